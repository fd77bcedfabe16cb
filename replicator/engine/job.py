"""One run of the job, the driver's side: Spark and the streaming query started after the pre-flight,
progress, lag, discovery and the cluster checks while it runs, and the bounded shutdown."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Protocol

from confluent_kafka import KafkaException
from py4j.protocol import Py4JError
from pyspark.errors import StreamingQueryException

from replicator.clients import kafka_clients
from replicator.config import ReplicatorConfig
from replicator.engine import heap, transactional_ids
from replicator.engine import spark_session as session
from replicator.engine.cluster_watch import ClusterWatch
from replicator.engine.failures import RuntimeFailure, TransientQueryFailure
from replicator.engine.fencing import fence_current_layout
from replicator.engine.preflight import preflight
from replicator.engine.spark_session import spark_session
from replicator.engine.stop_budget import FENCING, QUERY_STOP, SPARK_STOP, TASKS_END, StopBudget, StopOutcome
from replicator.engine.task_control import ControlServer
from replicator.engine.task_slots import check_task_slots
from replicator.ops.lag import LagReader, LagUnavailable

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
# average ~30 on 2 cores (docs/reliability.md). The job then starts a new query in the same process instead
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
PRODUCER_WARMUP_S = 10.0  # kafka_clients.target_producer's metadata wait before init_transactions()


class JobObserver(Protocol):
    """What metrics, health checks and progress displays get to see of a run."""

    def on_start(self, job: Replicator) -> None: ...  # query started; job.spark, job.query usable
    def on_batch(self, stats: dict) -> None: ...  # committed transactions' stats (live; "batches": 1 at a batch end)
    def on_lag(self, lags: list) -> None: ...  # list[PartitionLag], every PROGRESS_INTERVAL_S
    def on_stop(self) -> None: ...


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
        self.watch = ClusterWatch(cfg, self.stats, self.observers, self.request_stop)
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
            self.cfg, mappings = preflight(
                self.cfg, lambda: starting.run(spark_session, self.cfg, self.scratch),
                lambda lags: self.stats.seed_floors({f"{x.source_topic}|{x.partition}": x.committed for x in lags}),
                self.watch.on_clusters)
            self.watch.started(self.cfg, mappings)
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
                                    "topics": len(self.watch.mappings)})
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
                if not self.watch.refresh(source, target):
                    self._stop_query()
                    break
                _warn_if_slow("topic discovery", asked)
                next_discovery = time.monotonic() + self.cfg.refresh_topics_interval_seconds
            if time.monotonic() >= next_progress:
                asked = time.monotonic()
                try:
                    lag_reader = lag_reader or LagReader(self.cfg, LAG_LOOKUP_TIMEOUT_S)
                    lags = lag_reader.lags(self.watch.mappings, self.stats.settled())
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
            self.watch.after_failure(source, target)
        if self.watch.cluster_changed is not None:
            raise RuntimeFailure(str(self.watch.cluster_changed))
        if error is not None and not self.stop_requested.is_set():
            cause = _root_cause(error)
            if any(marker in cause for marker in TRANSIENT_QUERY_FAILURES):
                raise TransientQueryFailure(f"the streaming query failed: {cause}")
            raise RuntimeFailure(f"the streaming query failed: {cause}")

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
        changed = self.watch.cluster_changed
        if changed is None or changed.role != "target":
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


def _driver_host(cfg: ReplicatorConfig, spark) -> str:
    if cfg.spark_master.startswith("local"):
        return "127.0.0.1"
    return spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")


def _describe(e: BaseException) -> str:
    err = kafka_clients.kafka_error(e)
    return err.str() if err is not None else f"{type(e).__name__}: {e}"


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
