"""The job as a long-running process: the health and metrics server, the observers, stop signals,
and the exit code that tells the truth about the stop."""

from __future__ import annotations

import logging
import os
import signal
import threading

from replicator.config import ReplicatorConfig
from replicator.engine.failures import RuntimeFailure
from replicator.engine.job import JobObserver, Replicator

log = logging.getLogger("replicator.job")  # the log's public name, kept when the module moved


def _jvm_gone(stopping: bool) -> str:
    """The driver lost its Spark JVM: one line that says why it likely happened and what is safe."""
    why = ("while the job was stopping: the stop signal reached the JVM too. Send SIGTERM to the "
           "replicator's own PID, as Kubernetes does (systemd: KillMode=mixed; timeout: --foreground)"
           if stopping else "unexpectedly (killed, or out of memory)")
    return (f"the Spark JVM ended {why}. Transactions its shard tasks left open were aborted at shutdown "
            "(or else are at the next start, which resumes from the target's offsets)")


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
