"""The long-running driver: pre-flight checks, fencing, the streaming query, progress and shutdown."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from confluent_kafka import KafkaException
from py4j.protocol import Py4JError
from pyspark.errors import StreamingQueryException

from replicator.access import permissions
from replicator.clients import kafka_clients
from replicator.clients.client_errors import transient
from replicator.config import ReplicatorConfig
from replicator.engine import cluster_identity, heap, transactional_ids
from replicator.engine import spark_session as session
from replicator.engine.spark_session import spark_session
from replicator.engine.stop_budget import FENCING, QUERY_STOP, SPARK_STOP, TASKS_END, StopBudget, StopOutcome
from replicator.engine.task_control import ControlServer
from replicator.groups import promotion
from replicator.groups.index_topic import ensure_index_topic
from replicator.offsets import read_group
from replicator.ops.lag import LagReader, LagUnavailable, PartitionLag, partition_lags
from replicator.topics import sync as topic_sync

log = logging.getLogger("replicator.job")
PROGRESS_INTERVAL_S = 5.0
# A lookup that waits longer (a topic deleted between the selection and the lookup: the client
# retries its unknown partitions) only delays the progress line; the next one asks again.
LAG_LOOKUP_TIMEOUT_S = 10.0
SLOW_CLUSTER_CALL_S = 2 * PROGRESS_INTERVAL_S
# Spark gives each Python worker it spawns on its own (not through a fork-server daemon, which the job
# does not use: spark_session) 10 s to connect back, hard-coded in
# PythonWorkerFactory.createSimpleWorker (Spark 4.x, no setting). On a crowded machine an
# interpreter can take longer to start. A shard task whose worker missed it fails and Spark runs the
# task again (spark.task.maxFailures). The streaming source's runner, started with every query, fails
# the query before it planned anything. Seen in the soak and the multi-broker chaos runs at load
# average ~30 on 2 cores (RELIABILITY.md). The job then starts a new query in the same process instead
# of exiting: all state that matters is in the target (records and fake group, committed together),
# so this is a restart as after a crash.
TRANSIENT_QUERY_FAILURES = ("Python worker failed to connect back",)
# Each restart waits longer (5 s doubling up to 60 s): at load average 45-75 on 2 cores, six
# back-to-back starts within 100 s all missed the timeout, so retrying at once only added load.
# More than QUERY_RESTARTS failures in a row without a record copied in between: the failure is not
# passing, exit 1 and let the supervisor (or the operator) see it.
QUERY_RESTARTS = 8
QUERY_RESTART_BACKOFF_S = 5.0
QUERY_RESTART_BACKOFF_MAX_S = 60.0
# Discovery reads the target's full metadata only when the source's selection changed, and at least
# this often (a target topic deleted behind the job's back is created again): at 5,000 partitions,
# reading both clusters' metadata every refresh was a third of an idle driver's CPU (BENCHMARKS.md).
TARGET_RECHECK_S = 60.0
_PREPARE_RETRY_S = 30.0  # a fresh cluster's brokers learning of topics the pre-flight just created
PRODUCER_WARMUP_S = 10.0  # kafka_clients.target_producer's metadata wait before init_transactions()


class RuntimeFailure(RuntimeError):
    """A failure while running (exit code 1): the message says what and where."""


class TransientQueryFailure(RuntimeFailure):
    """The streaming query failed on one of TRANSIENT_QUERY_FAILURES: a new query may succeed."""


class JobObserver(Protocol):
    """What metrics, health checks and progress displays get to see of a run."""

    def on_start(self, job: Replicator) -> None: ...  # query started; job.spark, job.query usable
    def on_batch(self, stats: dict) -> None: ...  # committed transactions' stats (live; "batches": 1 at a batch end)
    def on_lag(self, lags: list) -> None: ...  # list[PartitionLag], every PROGRESS_INTERVAL_S
    def on_stop(self) -> None: ...


def preflight(cfg: ReplicatorConfig, on_reachable: Callable[[], None] | None = None,
              on_lags: Callable[[list[PartitionLag]], None] | None = None,
              on_clusters: Callable[[cluster_identity.Clusters, bool], None] | None = None,
              ) -> tuple[ReplicatorConfig, list[topic_sync.TopicMapping]]:
    """Everything that must hold before the first record moves. Returns the config with the optional
    features switched off that the principals' ACLs do not allow, and the topic mappings.
    `on_reachable` is called once both clusters answered (the job starts Spark then); `on_lags` gets
    the lag lookup made after fencing (the fake group's offsets as this client's coordinator said);
    `on_clusters` the clusters found behind the addresses, checked, and whether the target was pinned
    on the source (cluster_identity)."""
    from replicator.clients import tls_files

    for role in ("source", "target"):
        servers = getattr(cfg, f"{role}_bootstrap_servers")
        if problems := tls_files.problems(cfg.client_properties(role)):
            raise RuntimeFailure(f"cannot connect to the {role} cluster at {servers}: {'; '.join(problems)}")
    source_errors: list[str] = []
    target_errors: list[str] = []
    try:
        source = kafka_clients.source_admin(cfg, source_errors)
    except KafkaException as e:  # librdkafka refuses the TLS/SASL settings themselves
        raise RuntimeFailure(f"cannot connect to the source cluster at {cfg.source_bootstrap_servers}: "
                             f"{e.args[0].str()}") from None
    try:
        target = kafka_clients.target_admin(cfg, target_errors)
    except KafkaException as e:
        raise RuntimeFailure(f"cannot connect to the target cluster at {cfg.target_bootstrap_servers}: "
                             f"{e.args[0].str()}") from None
    ids = {}
    for role, admin, servers, errors in (("source", source, cfg.source_bootstrap_servers, source_errors),
                                         ("target", target, cfg.target_bootstrap_servers, target_errors)):
        try:
            ids[role] = admin.list_topics(timeout=20).cluster_id or ""
        except KafkaException as e:
            admin.poll(0)  # serves the error callback
            cause = f" ({errors[-1]})" if errors else ""
            raise RuntimeFailure(f"cannot reach the {role} cluster at {servers}: {e.args[0].str()}{cause}") from None
    if on_reachable is not None:
        on_reachable()
    try:
        clusters = cluster_identity.Clusters(ids["source"], ids["target"], cluster_identity.pin_permitted(cfg, source))
    except KafkaException as e:
        raise RuntimeFailure(f"describing the group {cluster_identity.pin_group(cfg)!r} on the source failed: "
                             f"{e.args[0].str()}") from None
    log.info("source: cluster %s at %s; target: cluster %s at %s", clusters.source, cfg.source_bootstrap_servers,
             clusters.target, cfg.target_bootstrap_servers,
             extra={"event": "clusters", "source_cluster": clusters.source, "target_cluster": clusters.target})
    try:  # before anything is written to either cluster
        cluster_identity.check_at_start(cfg, clusters, sorted(topic_sync.discover(cfg, source)))
    except cluster_identity.ClusterChanged as e:
        raise RuntimeFailure(str(e)) from None
    except KafkaException as e:
        raise RuntimeFailure(f"reading which clusters job {cfg.name!r} replicated between failed: "
                             f"{e.args[0].str()}") from None
    if promotion.promoted(target, cfg.name):
        raise RuntimeFailure(
            f"the target was promoted ({promotion.marker_topic(cfg.name)} exists: a switchover or failover ran): "
            f"replicating into it again in this direction would split the brain. Fail back with a reverse "
            f"job (see README, Disaster recovery), or delete that topic to resume this direction deliberately.")
    checked = cfg
    deadline = time.monotonic() + _PREPARE_RETRY_S
    while True:
        try:
            cfg = checked
            selected = topic_sync.discover(cfg, source)
            permissions.check_source(cfg, source, selected)
            permissions.check_source_group(cfg, source)
            cfg = permissions.check_source_configs(cfg, source, selected)
            # Checked before creating anything (what creation would skip), and again after it (topics
            # that did not exist before): no record or offset is written until every check passed.
            cfg = permissions.check_target(cfg, target, selected)
            mappings = topic_sync.ensure_target_topics(cfg, source, target, selected)
            ensure_index_topic(cfg, target, [m.target for m in mappings])
            cfg = permissions.check_target(cfg, target, selected, quiet=True)
            permissions.check_group(cfg, target)
            permissions.check_promotion_marker(cfg, target)
            break
        except permissions.PermissionDenied as e:
            raise RuntimeFailure(str(e)) from None
        except KafkaException as e:
            # A topic just created is not yet known to every broker of a fresh multi-broker cluster
            # (UNKNOWN_TOPIC_OR_PART from the next check: seen in make test's three-broker run). Every
            # step here is a check or an idempotent creation, so asking again is safe.
            err = kafka_clients.kafka_error(e)
            if err is None or not transient(err) or time.monotonic() >= deadline:
                raise RuntimeFailure(f"preparing target topics failed: {e}") from None
            time.sleep(0.5)
        except RuntimeError as e:
            raise RuntimeFailure(f"preparing target topics failed: {e}") from None
    if not mappings:
        log.warning("no source topic matches the selection yet; new topics are picked up every %ss",
                    cfg.refresh_topics_interval_seconds)
    # Fenced before the group's offsets are read (fence_previous_layouts says why); no record has
    # moved yet either way: fencing only aborts what earlier writers left open.
    try:
        fence_previous_layouts(cfg)
    except transactional_ids.FenceError as e:
        raise RuntimeFailure(str(e)) from None
    try:
        lags = partition_lags(cfg, mappings)
    except LagUnavailable as e:
        raise RuntimeFailure(f"reading the offsets group {cfg.group!r} and the source's ends failed: {e}") from None
    if on_lags is not None:
        on_lags(lags)
    for lag in lags:
        if lag.committed > lag.source_end:
            raise RuntimeFailure(
                f"the offsets group {cfg.group!r} on the target says {lag.target_topic}[{lag.partition}] is "
                f"copied up to source offset {lag.committed}, beyond the source's end {lag.source_end}: "
                f"the group was written by another job or the source topic was recreated. Use another "
                f"--name/--offsets-group, or delete the group to start over.")
    pinned = _pin(cfg, clusters, mappings)
    if on_clusters is not None:
        on_clusters(clusters, pinned)
    return cfg, mappings


def _pin(cfg: ReplicatorConfig, clusters: cluster_identity.Clusters, mappings: list[topic_sync.TopicMapping]) -> bool:
    try:
        return cluster_identity.pin(cfg, clusters, [m.source for m in mappings])
    except KafkaException as e:  # the next start or refresh pins it; copying does not depend on it
        log.warning("could not pin the target cluster on the source: %s", e.args[0].str(),
                    extra={"event": "cluster_pin_failed"})
        return False


def fence_previous_layouts(cfg: ReplicatorConfig) -> int:
    """init_transactions() on every transactional id an earlier run could hold, before any new write:
    the current layout's, every layout (job name, shard count) the fake group records, and every id
    of those names the target's transaction coordinators still list (which covers a layout that was
    killed before its first commit). Fences their zombies and aborts what they left open.

    The ids that need no group read are fenced first: a run killed between sending its offsets and
    committing leaves them pending, and the group's stable offsets wait for that transaction to end
    (OffsetFetch answers UNSTABLE_OFFSET_COMMIT), so reading the group first made a restart after
    SIGKILL wait out the transaction timeout (60 s) whenever the kill hit a commit."""
    if not cfg.exactly_once:
        return 0
    current = {transactional_ids.shard_id(cfg.name, s) for s in range(cfg.shard_count)}
    listed = _listed(cfg, {cfg.name})
    first = transactional_ids.to_fence(cfg, [], listed)
    _fence(cfg, first)
    reader = kafka_clients.group_reader(cfg)
    try:
        committed = read_group(reader)
    finally:
        reader.close()
    layouts = {(c.metadata.job or cfg.name, c.metadata.shards) for c in committed.values() if c.metadata}
    damaged = sorted(f"{t}[{p}]" for (t, p), c in committed.items() if c.damaged)
    if damaged:
        log.warning("the offsets group %r holds unreadable metadata for %s: the layout that wrote it is unknown; "
                    "fencing every id of job %r the target's coordinators list", cfg.group, ", ".join(damaged),
                    cfg.name, extra={"event": "damaged_metadata", "partitions": len(damaged)})
    others = {name for name, _ in layouts} - {cfg.name}
    ids = transactional_ids.to_fence(cfg, layouts, listed + (_listed(cfg, others) if others else []))
    earlier = sorted(set(ids) - current)
    if earlier:
        # Recorded in the group, or only known to the coordinators (a layout that never committed).
        log.info("shard layout changed (recorded: %s; now %d shards of %s): fencing %d transactional ids of "
                 "earlier layouts, e.g. %s", sorted(layouts) or "none", cfg.shard_count, cfg.name, len(earlier),
                 ", ".join(earlier[:3]), extra={"event": "fencing", "ids": len(ids)})
    done = set(first)
    _fence(cfg, [i for i in ids if i not in done])
    return len(ids)


def _listed(cfg: ReplicatorConfig, names: set[str]) -> list[str]:
    try:
        return transactional_ids.listed(cfg, names)
    except Exception as e:  # noqa: BLE001 - kafka-python's errors; any of them means "not proven fenced"
        raise transactional_ids.FenceError(
            f"cannot list the target's transactions to find earlier writers of job(s) {sorted(names)}: {e}") from None


def _fence(cfg: ReplicatorConfig, ids: list[str]) -> None:
    try:
        transactional_ids.fence(cfg, ids)
    except transactional_ids.FenceError as e:
        for txn_id, cause in e.failures:
            if permissions.is_authorization_error(kafka_clients.kafka_error(cause)):
                raise RuntimeFailure(str(permissions.transactional_id_denied(cfg, txn_id))) from None
        raise


def fence_current_layout(cfg: ReplicatorConfig, timeout: float | None = None) -> int:
    """At exit: abort whatever an interrupted task left open now, not at the transaction timeout.
    Returns how many ids it fenced; FenceError names those it could not within `timeout`."""
    if not cfg.exactly_once:
        return 0
    ids = [transactional_ids.shard_id(cfg.name, s) for s in range(cfg.shard_count)]
    if timeout is None:
        transactional_ids.fence(cfg, ids)
    else:
        transactional_ids.fence(cfg, ids, timeout)
    return len(ids)


class Replicator:
    """One run of the job, from pre-flight to a clean stop."""

    def __init__(self, cfg: ReplicatorConfig, observers: list[JobObserver] | None = None) -> None:
        self.cfg = cfg
        self.observers = list(observers or [])
        self.stop_requested = threading.Event()
        self._stopping = threading.RLock()
        self.stop_budget: StopBudget | None = None  # from the stop signal (or the failure that ends the run)
        self.stop_outcome = StopOutcome()  # what the stop could not finish
        self.jvm_lost = False  # Spark's JVM ended under the driver: the stop was not clean
        self.scratch = Path(tempfile.mkdtemp(prefix=f"replicator-{cfg.name}-"))
        self.stats = ControlServer(self._on_batch, "127.0.0.1" if cfg.spark_master.startswith("local") else "0.0.0.0")
        self.mappings: list[topic_sync.TopicMapping] = []
        self._target_checked: tuple[dict[str, int], float] = ({}, -TARGET_RECHECK_S)  # selection, when
        self.clusters: cluster_identity.Clusters | None = None  # found and checked at start
        self._pinned_at: float | None = None  # when the target was last pinned on the source (or refused)
        self.cluster_changed: cluster_identity.ClusterChanged | None = None  # seen while running: exit 1
        self.spark = None
        self.query = None

    def _on_batch(self, stats: dict) -> None:
        if refreshed := stats.get("refreshed", 0):
            log.info("re-committed the offsets of %d idle partitions so the group never expires them", refreshed,
                     extra={"event": "offsets_refreshed", "partitions": refreshed})
        for o in self.observers:
            o.on_batch(stats)

    def request_stop(self, *_args) -> None:
        # The signal's handler and its wake-up thread both call this; re-entrant: the handler can
        # run in the main thread while the main thread is in here.
        with self._stopping:
            first = not self.stop_requested.is_set()
            self._budget()
            self.stop_requested.set()
        if first:
            log.info("stop requested: the shard tasks commit what they copied and end; the stop ends within "
                     "%g s (shutdown_timeout_seconds)", self.cfg.shutdown_timeout_seconds,
                     extra={"event": "stop_requested"})
        (self.scratch / "stop").touch()
        self.stats.stop()

    def run(self) -> None:
        # Spark's start-up (seconds of JVM and Python) overlaps the checks once both clusters answer;
        # it writes nothing to Kafka, so a failed check only has to stop it again.
        starting = _Background()
        try:
            # The pre-flight's read of the fake group seeds the tasks' floors: a second, independent
            # coordinator lookup, so a start while one broker is cut off and answers stale offsets
            # (shard_copy._read_resume_points) is caught unless both lookups land on that broker.
            self.cfg, self.mappings = preflight(
                self.cfg, lambda: starting.run(spark_session, self.cfg, self.scratch),
                lambda lags: self.stats.seed_floors({f"{x.source_topic}|{x.partition}": x.committed for x in lags}),
                self._on_clusters)
        except BaseException:
            _stop_spark(starting.result(quiet=True))
            self.stats.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        if self.stop_requested.is_set():  # stopped during start-up: nothing written, nothing to finish
            _stop_spark(starting.result())
            self.stats.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            return
        log.info("starting", extra={"job": self.cfg.name, "group": self.cfg.group,
                                    "shards": self.cfg.shard_count, "master": self.cfg.spark_master,
                                    "topics": len(self.mappings)})
        spark = self.spark = starting.result() or spark_session(self.cfg, self.scratch)
        # Each Python thread talks to its own JVM thread (pinned threads); the JVM's active session is
        # per thread, and Python data sources are looked up in it: without this, "replicator" is not found.
        from pyspark.sql import SparkSession

        SparkSession._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)
        try:
            check_task_slots(self.cfg, spark)
            from replicator.engine.spark_source import ReplicatorDataSource

            spark.dataSource.register(ReplicatorDataSource)
            options = {"config": self.cfg.to_json(), "stop_flag": str(self.scratch / "stop"),
                       "stats_addr": f"{_driver_host(self.cfg, spark)}:{self.stats.port}"}
            spark.streams.addListener(_batch_ends(self.stats))  # before the query: no batch end missed
            attempt, failed_in_a_row = 0, 0
            while True:
                copied_before = self.stats.records
                if attempt:
                    self.stats.new_query()
                self.query = self._start_query(spark, options, attempt)
                if attempt == 0:  # observers hook into the run once (group sync, readiness)
                    for o in self.observers:
                        o.on_start(self)
                try:
                    self._watch()
                    return
                except (Py4JError, ConnectionError):
                    if not session.jvm_ended():
                        raise
                    return  # the shutdown below finds the JVM gone, and `run` says so once
                except TransientQueryFailure as e:
                    failed_in_a_row = 1 if self.stats.records > copied_before else failed_in_a_row + 1
                    if failed_in_a_row > QUERY_RESTARTS:
                        raise RuntimeFailure(f"{e} ({failed_in_a_row} times in a row)") from e
                    backoff = min(QUERY_RESTART_BACKOFF_MAX_S, QUERY_RESTART_BACKOFF_S * 2 ** (failed_in_a_row - 1))
                    log.warning("%s; starting the query again in %gs (%d of at most %d failures in a row)",
                                str(e).rstrip("."), backoff, failed_in_a_row, QUERY_RESTARTS,
                                extra={"event": "query_restarted"})
                    self._before_restart(spark, backoff)
                    if self.stop_requested.is_set():
                        return
                    attempt += 1
        finally:
            self._shutdown(spark)

    def _start_query(self, spark, options: dict[str, str], attempt: int):
        # A fresh checkpoint per query: it is never trusted for correctness (the target is).
        checkpoint = self.scratch / ("checkpoint" if attempt == 0 else f"checkpoint-{attempt}")
        # The tasks copy and emit nothing; Spark's JVM no-op sink costs no Python process.
        return (spark.readStream.format("replicator").options(**options).load()
                .writeStream.format("noop")
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime=f"{self.cfg.trigger_interval_ms} milliseconds")
                .queryName(self.cfg.name).start())

    def _on_clusters(self, clusters: cluster_identity.Clusters, pinned: bool) -> None:
        self.clusters = clusters
        self._pinned_at = time.monotonic() if pinned else None

    def _before_restart(self, spark, backoff: float) -> None:
        """No task of the failed query may still copy when the next one starts; what one left open
        is aborted now (the next query's tasks would fence it too, at their first transaction)."""
        try:
            spark.sparkContext.cancelAllJobs()
        except Exception as e:  # noqa: BLE001 - the fencing below and the next tasks' own still hold
            log.warning("cancelling the failed query's jobs: %s", e)
        try:
            fence_current_layout(self.cfg)
        except transactional_ids.FenceError as e:
            log.warning("before the restart: %s; the next query's tasks fence them before writing", e)
        self.stop_requested.wait(backoff)

    def _watch(self) -> None:
        source, target = kafka_clients.source_admin(self.cfg), kafka_clients.target_admin(self.cfg)
        lag_reader: LagReader | None = None
        next_progress, last_records = time.monotonic() + PROGRESS_INTERVAL_S, 0
        # Topic discovery (and the promotion check riding on it) reads the full metadata of both
        # clusters: at 5,000 partitions that was most of an idle driver's CPU when it ran with every
        # progress line; it keeps its own, documented interval (refresh_topics_interval_seconds).
        next_discovery = time.monotonic() + self.cfg.refresh_topics_interval_seconds
        next_config_sync = time.monotonic() + self.cfg.sync_topic_configs_interval_seconds
        while self.query.isActive:
            if self.stop_requested.is_set():
                self._stop_query()
                break
            try:
                self.query.awaitTermination(0.5)
            except StreamingQueryException:
                break  # reported below from query.exception(), as a one-line cause
            if time.monotonic() >= next_discovery:
                asked = time.monotonic()
                known = self._clusters_known(source, target)
                if self.cluster_changed is not None:
                    self._stop_query()
                    break
                if known and self._promoted(target):
                    self._stop_query()
                    break
                try:
                    if known:  # nothing is created on a cluster whose identity is not known
                        self._discover(source, target)
                        next_config_sync = self._sync_configs(source, target, next_config_sync)
                        for o in self.observers:  # optional hook: ACL sync (replicator.access.acl_sync)
                            if hasattr(o, "on_topics"):
                                o.on_topics(source, target, self.mappings)
                except KafkaException as e:
                    log.warning("topic discovery failed: %s; retrying in %gs", e.args[0].str(),
                                self.cfg.refresh_topics_interval_seconds)
                if known:
                    self._refresh_pin()
                _warn_if_slow("topic discovery", asked)
                next_discovery = time.monotonic() + self.cfg.refresh_topics_interval_seconds
            if time.monotonic() >= next_progress:
                asked = time.monotonic()
                try:
                    lag_reader = lag_reader or LagReader(self.cfg, LAG_LOOKUP_TIMEOUT_S)
                    lags = lag_reader.lags(self.mappings, self.stats.settled())
                    lag = sum(x.records for x in lags)
                    _warn_if_slow("the lag lookup", asked)
                except KafkaException as e:
                    lag, lags = -1, []
                    log.warning("lag lookup failed: %s", e.args[0].str())
                except LagUnavailable as e:
                    lag, lags = -1, []
                    log.warning("lag lookup failed: %s", e)
                for o in self.observers:
                    o.on_lag(lags)
                rate = (self.stats.records - last_records) / PROGRESS_INTERVAL_S
                last_records = self.stats.records
                # Transactions, not micro-batches: a batch runs for minutes and commits all along.
                log.info("progress: %d records copied (%.0f/s), lag %s offsets over %d partitions, "
                         "%d transactions committed", self.stats.records, rate, lag, len(lags),
                         self.stats.transactions,
                         extra={"records_total": self.stats.records, "lag_records": lag,
                                "transactions_total": self.stats.transactions})
                next_progress = time.monotonic() + PROGRESS_INTERVAL_S
                heap.settle()  # once per process: by the first lookup the lasting heap is built
        if lag_reader is not None:
            lag_reader.close()
        error = self.query.exception()
        if error is not None and not self.stop_requested.is_set():
            # Copying from a rebuilt source fails as data loss (offsets beyond its ends) before the
            # next check: the other cluster is the cause to report.
            self._clusters_known(source, target)
        if self.cluster_changed is not None:
            raise RuntimeFailure(str(self.cluster_changed))
        if error is not None and not self.stop_requested.is_set():
            cause = _root_cause(error)
            if any(marker in cause for marker in TRANSIENT_QUERY_FAILURES):
                raise TransientQueryFailure(f"the streaming query failed: {cause}")
            raise RuntimeFailure(f"the streaming query failed: {cause}")

    def _discover(self, source, target) -> None:
        """New and deleted source topics, grown partition counts: target topics follow, and running
        shard tasks end early so the next batch plans the change."""
        selected, skipped = topic_sync.selection(self.cfg, source)
        self._on_deleted(topic_sync.deleted(self.mappings, selected, skipped))
        checked, when = self._target_checked
        if selected == checked and time.monotonic() - when < TARGET_RECHECK_S:
            return
        mappings = topic_sync.ensure_target_topics(self.cfg, source, target, selected)
        self._target_checked = (selected, time.monotonic())
        if mappings != self.mappings:  # a new topic may keep records longer than the index does
            ensure_index_topic(self.cfg, target, [m.target for m in mappings])
            # New topics and partitions join at a batch boundary: make one now.
            self.stats.end_running_batches()
        self.mappings = mappings

    def _sync_configs(self, source, target, due: float) -> float:
        """Source topic config changes reach the target every sync_topic_configs_interval_seconds,
        while shard tasks run (for minutes: the planner only runs between batches); returns when the
        next sync is due."""
        if not self.cfg.sync_topic_configs or time.monotonic() < due:
            return due
        try:
            topic_sync.sync_configs(self.cfg, source, target, self.mappings)
        except KafkaException as e:  # drift is retried at the next sync; records keep flowing
            log.warning("topic config sync failed: %s", e.args[0].str())
        return time.monotonic() + self.cfg.sync_topic_configs_interval_seconds

    def _clusters_known(self, source, target) -> bool:
        """Whether both clusters answered as the ones pinned at start. Another cluster behind either
        address sets `cluster_changed` and requests the stop (exit 1, one line)."""
        if self.clusters is None:
            return True
        try:
            cluster_identity.check_running(self.cfg, self.clusters, source, target,
                                           promotion.marker_topic(self.cfg.name))
        except KafkaException:  # not answering is not another cluster: the copy and lag lines say it
            return False
        except cluster_identity.ClusterChanged as e:
            self.cluster_changed = e
            self.request_stop()
            return False
        return True

    def _refresh_pin(self) -> None:
        """Pins the target on the source once a topic is replicated, and again before the source's
        offsets retention could expire the pin (the offsets refresh's interval, a day by default)."""
        due = self._pinned_at is None or time.monotonic() - self._pinned_at >= self.cfg.offsets_refresh_interval_seconds
        if self.clusters is not None and self.mappings and due and _pin(self.cfg, self.clusters, self.mappings):
            self._pinned_at = time.monotonic()

    def _promoted(self, target) -> bool:
        try:
            if not promotion.promoted(target, self.cfg.name):
                return False
        except KafkaException as e:  # the copy cannot commit on a target that does not answer either
            log.warning("promotion check failed: %s; retrying in %gs", e.args[0].str(),
                        self.cfg.refresh_topics_interval_seconds)
            return False
        log.error("the target was promoted (switchover/failover): stopping, this direction must not copy again",
                  extra={"event": "promoted"})
        self.request_stop()
        return True

    def _on_deleted(self, topics: list[str]) -> None:
        for topic in topics:
            log.warning("source topic %s was deleted; the target topic is kept", topic,
                        extra={"event": "source_topic_deleted", "topic": topic})
            for o in self.observers:  # optional hook: metrics count it
                if hasattr(o, "on_topic_deleted"):
                    o.on_topic_deleted(topic)

    def stopping_for(self) -> float:
        """Seconds since the stop began (0 before it did)."""
        return self.stop_budget.elapsed() if self.stop_budget is not None else 0.0

    def _budget(self) -> StopBudget:
        if self.stop_budget is None:
            self.stop_budget = StopBudget(self.cfg.shutdown_timeout_seconds)
        return self.stop_budget

    def _stop_query(self) -> None:
        budget = self._budget()
        given = min(self.cfg.transaction_timeout_ms / 1000, budget.left(TASKS_END))
        deadline = time.monotonic() + given
        # Asked once per turn: the batch's end can start the next trigger at once, so a second
        # question after the wait could see a batch that is not the tasks' one.
        while (active := self.query.status.get("isTriggerActive")) and time.monotonic() < deadline:
            time.sleep(0.1)
        if active:
            # Their commit cannot go through (a target down, a coordinator gone): what they copied
            # since their last commit is copied again at the next start.
            self.stop_outcome.tasks_not_ended = budget.elapsed()  # since the stop signal
        # Spark's own wait for the query's thread is unbounded by default (spark.sql.streaming.stopTimeout
        # = 0); read at stop(), so it is set here, to what the budget leaves.
        self.spark.conf.set("spark.sql.streaming.stopTimeout", str(max(1000, int(budget.left(QUERY_STOP) * 1000))))
        try:
            self.query.stop()
        except Exception as e:  # noqa: BLE001 - Spark's stop below ends what the query's thread still runs
            log.warning("the streaming query did not stop within its share of shutdown_timeout_seconds: %s",
                        str(e).splitlines()[0] if str(e) else type(e).__name__)

    def _shutdown(self, spark) -> None:
        budget = self._budget()
        # Group sync's stop waits for its thread, which may be inside a call to a cluster that is down.
        observers = _Background()
        observers.run(lambda: [o.on_stop() for o in self.observers])
        # Gone before it was asked to stop, or failing the stop because it is going: either way the
        # shard tasks did not end as told (a stop signal sent to the whole process group, a kill).
        self.jvm_lost = session.jvm_ended(0)
        stopping = _Background()
        stopping.run(session.stop, spark)
        if not stopping.done(budget.left(SPARK_STOP)):
            # Its tasks could still write: fencing below refuses their next commit. The JVM ends with this process.
            log.warning("Spark did not stop within its share of shutdown_timeout_seconds (%.0f s in)", budget.elapsed())
            self.stop_outcome.tasks_not_ended = self.stop_outcome.tasks_not_ended or budget.elapsed()
        elif (e := stopping.error()) is not None:
            self.jvm_lost = self.jvm_lost or isinstance(e, session.JvmGone) or session.jvm_ended()
            if not self.jvm_lost:
                log.warning("spark stop: %s", e)
        if not observers.done(budget.left(SPARK_STOP)):
            log.warning("the observers (group sync) did not stop within their share of shutdown_timeout_seconds")
        # Whatever an interrupted task left open is aborted now, not at the transaction timeout; on a
        # target that was replaced there is nothing of the job's to abort (and nothing may be written).
        if self.cluster_changed is None or self.cluster_changed.role != "target":
            try:
                # Each id's producer first waits up to PRODUCER_WARMUP_S for the target's metadata
                # (kafka_clients.target_producer), and only then init_transactions() starts its own clock.
                given = max(1.0, budget.left(FENCING) - PRODUCER_WARMUP_S)
                self.stop_outcome.fenced = fence_current_layout(self.cfg, given)
            except transactional_ids.FenceError as e:
                self.stop_outcome.fenced = self.cfg.shard_count
                self.stop_outcome.unfenced = [(txn_id, _describe(cause)) for txn_id, cause in e.failures]
        self.stats.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _batch_ends(stats: ControlServer):
    from pyspark.sql.streaming import StreamingQueryListener

    from replicator.engine.spark_source import epoch_of

    class BatchEnds(StreamingQueryListener):
        """Spark's word that a micro-batch finished: every one of its shard tasks ended. The job's
        only query listener: the batch end reaches the observers as a "batches" event."""

        def __init__(self) -> None:
            self.seen: set[tuple[str, int]] = set()

        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            progress = event.progress
            if (progress.runId, progress.batchId) in self.seen:
                return
            self.seen.add((progress.runId, progress.batchId))
            epoch = epoch_of(progress.sources[0].endOffset) if progress.sources else None
            stats.batch_ended(progress.batchId + 1 if epoch is None else epoch, progress.batchDuration / 1000)

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    return BatchEnds()


class _Background:
    """One call in a thread; `result()` waits for it (None if it never ran) and re-raises its error
    unless `quiet` (when another error is already on its way)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._value = None
        self._error: BaseException | None = None

    def run(self, fn, *args) -> None:
        def target() -> None:
            try:
                self._value = fn(*args)
            except BaseException as e:  # noqa: BLE001 - handed to the caller of result()
                self._error = e
        self._thread = threading.Thread(target=target, daemon=True, name="spark-start")
        self._thread.start()

    def result(self, quiet: bool = False):
        if self._thread is None:
            return None
        self._thread.join()
        if self._error is not None and not quiet:
            raise self._error
        return self._value

    def done(self, timeout: float) -> bool:
        """Whether the call ended within `timeout` seconds (it runs on otherwise, in a daemon thread)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def error(self) -> BaseException | None:
        return self._error


def _stop_spark(spark) -> None:
    if spark is not None:
        try:
            session.stop(spark)  # with a background recording it started
        except Exception as e:  # noqa: BLE001 - the start failed anyway; say why Spark did not stop
            log.warning("spark stop: %s", e)


def check_task_slots(cfg: ReplicatorConfig, spark) -> None:
    """Every shard's task runs for a whole batch: a shard without a slot of its own would wait a whole
    batch duration for one, each batch."""
    slots = _task_slots(spark)
    if slots is not None and cfg.shard_count > slots:
        raise RuntimeFailure(
            f"{cfg.shard_count} shards need {cfg.shard_count} concurrent Spark task slots, but master "
            f"{cfg.spark_master} offers {slots}: each shard's task runs for batch_duration_seconds "
            f"({cfg.batch_duration_seconds:g}s). Lower `shards` or give Spark more cores (local[N], "
            f"spark.executor.instances x spark.executor.cores, spark.cores.max).")


def _task_slots(spark) -> int | None:
    conf = spark.sparkContext.getConf()
    per_task = int(conf.get("spark.task.cpus", "1"))
    master = conf.get("spark.master", "")
    if master.startswith("local"):
        return spark.sparkContext.defaultParallelism // per_task
    if conf.contains("spark.cores.max"):
        return int(conf.get("spark.cores.max")) // per_task
    if conf.contains("spark.executor.instances") and conf.contains("spark.executor.cores"):
        return int(conf.get("spark.executor.instances")) * int(conf.get("spark.executor.cores")) // per_task
    return None  # a cluster sized elsewhere (dynamic allocation, the whole standalone cluster)


def _driver_host(cfg: ReplicatorConfig, spark) -> str:
    if cfg.spark_master.startswith("local"):
        return "127.0.0.1"
    return spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")


def _jvm_gone(stopping: bool) -> str:
    """The driver lost its Spark JVM: one line that says why it likely happened and what is safe."""
    why = ("while the job was stopping: the stop signal reached the JVM too. Send SIGTERM to the "
           "replicator's own PID, as Kubernetes does (systemd: KillMode=mixed; timeout: --foreground)"
           if stopping else "unexpectedly (killed, or out of memory)")
    return (f"the Spark JVM ended {why}. Transactions its shard tasks left open were aborted at shutdown "
            "(or else are at the next start, which resumes from the target's offsets)")


def _describe(e: BaseException) -> str:
    err = kafka_clients.kafka_error(e)
    return err.str() if err is not None else f"{type(e).__name__}: {e}"


def _pass_signals_on(job: Replicator) -> None:
    """Python runs a signal handler in the main thread between bytecodes, so while the driver waits in
    a call to a cluster that is down (30 s for the promotion check) the shard tasks would not hear of
    the stop and its budget would not start. The wake-up fd is written as the signal arrives; this
    thread passes it on at once (the handlers stay installed: without them there is no wake-up)."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    stops = {signal.SIGTERM, signal.SIGINT}

    def forward() -> None:
        while data := os.read(read, 64):
            if any(b in stops for b in data):
                job.request_stop()
    threading.Thread(target=forward, daemon=True, name="stop-signals").start()


def _warn_if_slow(what: str, started: float) -> None:
    """The progress line, lag gauges and discovery share the driver's loop: without this, a cluster
    that answers late (a stalled broker, a partition) only makes the progress line go quiet."""
    if (took := time.monotonic() - started) > SLOW_CLUSTER_CALL_S:
        log.warning("%s took %.0f s: a cluster answered late, and progress and lag updates waited for it",
                    what, took, extra={"event": "cluster_call_slow", "seconds": round(took, 1)})


def _root_cause(error) -> str:
    text = str(getattr(error, "desc", None) or error)
    for marker in ("DataLossError: ", "PermissionDenied: ", "RuntimeError: ", "KafkaException: ", "InjectedFault: "):
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0]
    return text.splitlines()[0] if text else repr(error)


def run(cfg: ReplicatorConfig, observers: list[JobObserver] | None = None,
        stop: threading.Event | None = None) -> int:
    """Runs until SIGTERM/SIGINT (or `stop` is set); returns the process exit code."""
    from replicator.ops.health import HealthServer
    from replicator.ops.metrics import MetricsObserver

    metrics = MetricsObserver(cfg)
    try:
        server = HealthServer(cfg.metrics_host, cfg.metrics_port, metrics.metrics.exposition, metrics.readiness)
    except OSError as e:
        log.error("%s", e)
        return 1
    server.start()
    extra = list(observers or [])
    if cfg.translation_index and cfg.exactly_once:
        from replicator.groups.sync import GroupSyncObserver

        extra.append(GroupSyncObserver(cfg, metrics.metrics))
    if cfg.sync_acls:
        from replicator.access.acl_sync import AclSyncObserver

        extra.append(AclSyncObserver(cfg, metrics.metrics.registry))
    job = Replicator(cfg, [metrics, *extra])
    signal.signal(signal.SIGTERM, job.request_stop)
    signal.signal(signal.SIGINT, job.request_stop)
    if threading.current_thread() is threading.main_thread():
        _pass_signals_on(job)
    if stop is not None and stop.is_set():
        job.request_stop()
    try:
        job.run()
    except RuntimeFailure as e:
        log.error("%s", e)
        if job.stop_outcome.unfenced:  # the failure's line does not say what it leaves open
            _unclean(job)
        return 1
    finally:
        server.close()
    # A lost JVM explains cancelled tasks (and how to avoid it); ids left unfenced are said first.
    if job.jvm_lost and not job.stop_outcome.unfenced:
        log.error("%s", _jvm_gone(job.stop_requested.is_set()), extra={"event": "spark_jvm_lost"})
        return 1
    if not job.stop_outcome.clean:
        _unclean(job)
        return 1
    log.info("stopped cleanly in %.0f s", job.stopping_for(), extra={"records_total": job.stats.records})
    return 0


def _unclean(job: Replicator) -> None:
    took = job.stopping_for()
    log.error("%s", job.stop_outcome.line(took), extra={"event": "stop_unclean", "seconds": round(took, 1),
                                                       "unfenced": len(job.stop_outcome.unfenced)})
