"""Prometheus metrics of a run, fed by the job's observer hooks.

Counters come from the shard tasks' live stats (what their transactions really committed), lag from
the clusters (`replicator.ops.lag`), micro-batch timings from Spark's streaming query listener. Every
name follows the Prometheus conventions (base units, `_total`, `_seconds`, `_bytes`); labels are
limited to `topic` (source), `partition` and `target_topic`.
"""

from __future__ import annotations

import logging
import platform
import threading
import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)

from replicator import __version__
from replicator.config import ReplicatorConfig
from replicator.ops.lag import AgesSeen, PartitionLag, with_ages
from replicator.replication_policy import policy_for

log = logging.getLogger("replicator.metrics")
PARTITION = ("topic", "partition", "target_topic")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
_TXN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_RECORDS_BUCKETS = (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)
# Writer stats that deserve a warning when non-zero, by metric name.
_EVENTS = {"transactions_aborted": "aborted", "producer_fenced": "fenced",
           "producer_recreations": "producer_recreations", "data_loss_events": "data_loss_events",
           "source_rewinds": "source_rewinds", "source_consumer_restarts": "source_consumer_restarts"}
# `*_created` series double the exposition for nothing a dashboard or alert here uses.
disable_created_metrics()


class ReplicatorMetrics:
    """The metric families, in their own registry (tests build several side by side)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        # Held while a batch or a lag lookup is applied and while scraping: a scrape never sees half
        # of a batch (say, its offsets but not yet its records).
        self.lock = threading.Lock()
        self.lag_records = Gauge(
            "replicator_lag_records", "Source last stable offset minus the next source offset committed "
            "in the fake group on the target (offsets still to copy).", PARTITION, registry=r)
        self.lag_seconds = Gauge(
            "replicator_lag_seconds", "Age of the oldest committed source record not yet replicated; "
            "0 when caught up.", PARTITION, registry=r)
        self.lag_refresh = Gauge(
            "replicator_lag_refresh_timestamp_seconds", "Unix time of the last successful lag lookup.",
            registry=r)
        self.records = Counter("replicator_replicated_records_total",
                               "Records committed to the target.", PARTITION, registry=r)
        self.bytes = Counter("replicator_replicated_bytes_total",
                             "Key and value bytes committed to the target.", PARTITION, registry=r)
        self.committed_offset = Gauge(
            "replicator_committed_offset", "Next source offset committed to the target's offsets group "
            "by the last transaction of the partition.", PARTITION, registry=r)
        self.last_commit = Gauge("replicator_last_commit_timestamp_seconds",
                                 "Unix time of the last transaction that committed records of the partition.",
                                 PARTITION, registry=r)
        self.latency = Histogram(
            "replicator_replication_latency_seconds", "Target commit time minus source record timestamp "
            "(first and last record of each partition in each transaction).",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.transaction_duration = Histogram("replicator_transaction_duration_seconds",
                                              "Duration of committed target transactions.",
                                              buckets=_TXN_BUCKETS, registry=r)
        self.transactions = Counter("replicator_transactions_committed_total",
                                    "Target transactions committed.", registry=r)
        self.aborted = Counter("replicator_transactions_aborted_total",
                               "Target transactions aborted (their records are invisible and retried).", registry=r)
        self.fenced = Counter("replicator_producer_fenced_total",
                              "Times a shard's producer found itself fenced by a newer one.", registry=r)
        self.recreations = Counter("replicator_producer_recreations_total",
                                   "Target producers recreated after a fatal error.", registry=r)
        self.data_loss = Counter("replicator_data_loss_events_total",
                                 "Source ranges lost to retention before they were copied.", registry=r)
        self.source_rewinds = Counter("replicator_source_rewinds_total",
                                      "Times the source consumer went back below a partition's copy position "
                                      "(the records it re-read were dropped, not copied twice).", registry=r)
        self.source_consumer_restarts = Counter(
            "replicator_source_consumer_restarts_total",
            "Source consumers replaced because they stopped fetching partitions the source had records in "
            "(librdkafka #5153).", registry=r)
        self.topics_deleted = Counter("replicator_source_topics_deleted_total",
                                      "Selected source topics that were deleted (their target topics are kept).",
                                      ("topic",), registry=r)
        self.batches = Counter("replicator_batches_total",
                               "Micro-batches Spark finished (all their shard tasks ended).", registry=r)
        self.batch_records = Histogram("replicator_batch_records", "Records committed per micro-batch.",
                                       buckets=_RECORDS_BUCKETS, registry=r)
        self.batch_duration = Histogram("replicator_batch_duration_seconds",
                                        "Micro-batch duration reported by Spark's query progress.",
                                        buckets=_BATCH_BUCKETS, registry=r)
        self.last_progress = Gauge("replicator_last_batch_timestamp_seconds",
                                   "Unix time the shard tasks last reported committed transactions.", registry=r)
        self.ready = Gauge("replicator_ready", "1 when /readyz answers 200.", registry=r)
        # Consumer-group checkpointing and sync (replicator.groups.sync); labelled by source group.
        self.group_checkpoint = Gauge(
            "replicator_group_checkpoint_timestamp_seconds", "Unix time the group's committed source offsets "
            "were last read, translated and checkpointed.", ("group",), registry=r)
        self.group_ahead = Gauge(
            "replicator_group_sync_lag_offsets", "Source offsets the group has consumed that are not "
            "replicated yet (its data loss if the source were lost now).", ("group",), registry=r)
        self.groups_state = Gauge("replicator_groups", "Selected source groups by sync state (synced, "
                                  "taken-over, active-on-target, checkpointed, untranslatable).", ("state",),
                                  registry=r)
        self.translation_failures = Counter(
            "replicator_group_translation_failures_total", "Group positions that could not be translated "
            "exactly (never guessed; see `replicator groups`).", registry=r)
        self.build = Info("replicator_build", "Version of the replicator and its runtime.", registry=r)
        self.build.info({"version": __version__, "python": platform.python_version()})

    def on_groups(self, statuses: list, failed: set[str] | frozenset[str] = frozenset()) -> None:
        """One sync round's `GroupStatus` list; `failed` groups keep their series (and so age)."""
        with self.lock:
            seen = {st.group for st in statuses if st.partitions} | set(failed)
            for gone in getattr(self, "_groups", set()) - seen:  # deleted, or no longer selected
                self.group_checkpoint.remove(gone)
                self.group_ahead.remove(gone)
            self._groups = {g for g in seen if g not in failed} | (getattr(self, "_groups", set()) & set(failed))
            states: dict[str, int] = dict.fromkeys(("synced", "taken-over", "active-on-target", "checkpointed",
                                                    "untranslatable"), 0)
            now = time.time()
            for st in statuses:
                states[st.state] = states.get(st.state, 0) + 1
                if st.partitions:
                    self.group_checkpoint.labels(st.group).set(now)
                    self.group_ahead.labels(st.group).set(st.ahead)
            for state, n in states.items():
                self.groups_state.labels(state).set(n)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric, consistent across one batch."""
        with self.lock:
            return generate_latest(self.registry)


class MetricsObserver:
    """A `JobObserver` keeping `ReplicatorMetrics` and the readiness state of one run."""

    def __init__(self, cfg: ReplicatorConfig, metrics: ReplicatorMetrics | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics or ReplicatorMetrics()
        self._policy = policy_for(cfg)
        self._job = None
        self._stopped = False
        # (source topic, partition, target topic) -> the (records, seconds) last exported
        self._lags: dict[tuple[str, str, str], tuple[int, float | None]] = {}
        self._applied: list[PartitionLag] = []  # the lookup applied last, object by object
        self._ages = AgesSeen()
        self.last_batch_at = 0.0
        self.last_lag_at = 0.0
        self.lag_total: int | None = None
        self.metrics.ready.set_function(lambda: 1.0 if self.readiness()[0] else 0.0)

    # -- JobObserver --------------------------------------------------------------------------
    def on_start(self, job) -> None:
        self._job = job

    def on_batch(self, stats: dict) -> None:
        m = self.metrics
        with m.lock:
            self._apply_batch(m, stats)

    def _apply_batch(self, m: ReplicatorMetrics, stats: dict) -> None:
        now = time.time()
        for key, (records, nbytes, next_offset, committed_at) in stats.get("partitions", {}).items():
            topic, partition = key.rsplit("|", 1)
            labels = (topic, partition, self._policy.target_topic(topic))
            m.records.labels(*labels).inc(records)
            m.bytes.labels(*labels).inc(nbytes)
            m.committed_offset.labels(*labels).set(next_offset)
            m.last_commit.labels(*labels).set(committed_at)
        for seconds in stats.get("latency_seconds", []):
            m.latency.observe(max(0.0, seconds))
        for seconds in stats.get("transaction_seconds", []):
            m.transaction_duration.observe(seconds)
        m.transactions.inc(stats.get("transactions", 0))
        m.aborted.inc(stats.get("aborted", 0))
        m.fenced.inc(stats.get("fenced", 0))
        m.recreations.inc(stats.get("producer_recreations", 0))
        m.data_loss.inc(stats.get("data_loss_events", 0))
        m.source_rewinds.inc(stats.get("source_rewinds", 0))
        m.source_consumer_restarts.inc(stats.get("source_consumer_restarts", 0))
        if stats.get("batches"):  # a micro-batch ended: its leftovers; the rest arrived live
            m.batches.inc(stats["batches"])
            m.batch_records.observe(stats.get("batch_records", 0))
            if "batch_seconds" in stats:
                m.batch_duration.observe(stats["batch_seconds"])
        m.last_progress.set(now)
        self.last_batch_at = now
        # Rare events get a log line whose fields are named like the metrics, for log-based alerting.
        events = {name: stats.get(key, 0) for name, key in _EVENTS.items() if stats.get(key, 0)}
        if events:
            where = f"batch {stats.get('batch')}" + (f" shard {stats['shard']}" if stats.get("shard", -1) >= 0 else "")
            log.warning("%s: %s", where, ", ".join(f"{k}={v}" for k, v in events.items()),
                        extra={"batch": stats.get("batch"), **{f"replicator_{k}_total": v for k, v in events.items()}})
        log.debug("batch %s committed %d records", stats.get("batch"), stats.get("records", 0),
                  extra={"batch": stats.get("batch"), "replicator_batch_records": stats.get("records", 0)})

    def on_lag(self, lags: list[PartitionLag]) -> None:
        if not lags:
            return  # the lookup failed or nothing is selected: keep the last known values
        started = time.time()
        try:
            lags = with_ages(self.cfg, lags, seen=self._ages)
        except Exception as e:  # noqa: BLE001 - the offsets lag is still exact without the ages
            log.warning("lag in seconds unavailable: %s", e)
        m = self.metrics
        with m.lock:
            self._apply_lags(m, lags, started)

    def _apply_lags(self, m: ReplicatorMetrics, lags: list[PartitionLag], started: float) -> None:
        total, prev = 0, self._applied
        if len(prev) == len(lags):
            # The lag lookup hands back the same object for a partition that stayed caught up: at
            # 5,000 idle partitions, walking each one's labels and values every tick was 6 ms (py-spy
            # and a timing, BENCHMARKS.md); an identity check is a tenth of that.
            for p, x in zip(prev, lags, strict=True):
                if p is x and x.records == 0:
                    continue  # its gauges already read 0
                if (p.source_topic, p.partition, p.target_topic) != (x.source_topic, x.partition, x.target_topic):
                    break  # the selection changed: everything is applied again below
                self._apply_one(m, x, started, self._lags, self._lags)
                total += x.records
            else:
                self._finish_lags(m, lags, total, started)
                return
        values: dict[tuple[str, str, str], tuple[int, float | None]] = {}
        for x in lags:
            self._apply_one(m, x, started, self._lags, values)
            total += x.records
        for gone in self._lags.keys() - values.keys():  # topics dropped from the selection
            m.lag_records.remove(*gone)
            m.lag_seconds.remove(*gone)
        self._lags = values
        self._finish_lags(m, lags, total, started)

    @staticmethod
    def _apply_one(m: ReplicatorMetrics, x: PartitionLag, started: float, old: dict, values: dict) -> None:
        labels = (x.source_topic, str(x.partition), x.target_topic)
        seconds = x.seconds(started)
        value = (x.records, seconds)
        # An idle partition's lag stays 0: at 5,000 partitions the label lookups of unchanged
        # values were a fifth of an idle driver's CPU (py-spy, BENCHMARKS.md).
        if old.get(labels) != value:
            m.lag_records.labels(*labels).set(x.records)
            if seconds is not None:
                m.lag_seconds.labels(*labels).set(seconds)
        values[labels] = value

    def _finish_lags(self, m: ReplicatorMetrics, lags: list[PartitionLag], total: int, started: float) -> None:
        self._applied = lags
        self.lag_total = total
        self.last_lag_at = started
        m.lag_refresh.set(started)

    def on_topic_deleted(self, topic: str) -> None:
        with self.metrics.lock:
            self.metrics.topics_deleted.labels(topic).inc()

    def on_stop(self) -> None:
        self._stopped = True

    # -- readiness -------------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        """Ready = the query runs and either committed a batch or was seen caught up within
        `readiness_window_seconds`."""
        if self._job is None:
            return False, "the streaming query has not started yet"
        if self._stopped:
            return False, "stopping"
        try:
            active = bool(self._job.query.isActive)
        except Exception:  # noqa: BLE001 - a query torn down under us is simply not active
            active = False
        if not active:
            return False, "the streaming query is not active"
        now, window = time.time(), self.cfg.readiness_window_seconds
        if now - self.last_batch_at <= window:
            return True, f"a micro-batch committed {now - self.last_batch_at:.0f}s ago"
        if self.lag_total == 0 and now - self.last_lag_at <= window:
            return True, "caught up"
        return False, (f"no micro-batch committed in the last {window:g}s and the lag is "
                       f"{'unknown' if self.lag_total is None else self.lag_total} offsets")
