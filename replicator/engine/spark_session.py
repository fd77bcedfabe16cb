"""The job's Spark session: settings for long-running shard tasks, a small JVM that starts fast, and
Spark's own log lines in the job's log format instead of log4j's default profile on stderr.

Start-up (a restart is a recovery point) is mostly the driver JVM loading and verifying Spark's
classes: ~14-16 s of CPU. A class-data archive (AppCDS, JEP 350) of what a start loads halves that.
Every start maps the archive for its JVM, Spark version and SPARK_HOME (spark_cache) if there is
one; a start that finds none has one recorded in the background (class_recorder), so a fresh
install's first restart is already fast. A missing, foreign or damaged archive is ignored by the JVM.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from replicator.config import ReplicatorConfig
from replicator.engine import class_recorder, spark_cache
from replicator.engine.spark_cache import JVM_OPTIONS, spark_home

log = logging.getLogger("replicator.spark_session")  # the log's public name, kept when the module moved

# The driver JVM only plans epochs and hosts task threads in local mode: records never cross it
# (spark_source). A 1 GiB G1 heap made it the largest process of the tree for nothing; serial GC
# has no GC worker threads and its heap grows only as far as it is used. The JVM's own work is
# start-up (class loading, Catalyst analysis, the first plans) and then a plan every few minutes:
# C2's optimising compiles never pay back there, and on a small pod they compete with the start
# for the cores. C1 alone took the JVM's CPU to a restarted job's first copied record from 6.8-8.2 s
# to 3.9-4.4 s and that restart from 14.0 s to 9.5 s (medians of 6, BENCHMARKS.md).
_DRIVER_MEMORY = "512m"

_ARCHIVE_LOGS = "-Xlog:cds*=off -Xlog:class+path=off"  # "skipping signed JAR" and mismatch notes
# A clean stop of a recording session (the recorder's, spark_warmup) waits this long at most for the
# JVM to write the archive (seconds on an idle machine, minutes on an overloaded one); then the JVM is
# killed and nothing is published.
_ARCHIVE_WRITE_S = 240.0

# (archive being written, where it is published) of this process's session, if it records one.
_recording: tuple[Path, Path] | None = None
# The background recording this process's session started, if any.
_recorder: class_recorder.Recorder | None = None

_TEXT_PATTERN = "%d{HH:mm:ss} %p %c: %m%n"
_JSON_PATTERN = ('{"ts":"%d{yyyy-MM-dd\'T\'HH:mm:ss.SSS\'Z\'}{UTC}","level":"%p","logger":"%enc{%c}{JSON}",'
                 '"msg":"%enc{%m}{JSON}","exc":"%enc{%throwable}{JSON}"}%n')


def log4j2_properties(log_format: str) -> str:
    """Spark logs ERROR and worse from the start (not only after setLogLevel), one line each."""
    pattern = _JSON_PATTERN if log_format == "json" else _TEXT_PATTERN
    return "\n".join([
        "status = error",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        f"appender.console.layout.pattern = {pattern}",
        # A stack trace would break one-object-per-line JSON; it goes into the "exc" field instead.
        f"appender.console.layout.alwaysWriteExceptions = {'false' if log_format == 'json' else 'true'}",
        "rootLogger.level = error",
        "rootLogger.appenderRef.console.ref = console",
        # PySpark's gateway counts as an interactive shell: unless its logger has a level of its own
        # equal to the root's, Spark prints "Setting default log level to WARN" on stderr.
        "logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer",
        "logger.gateway.level = error",
        "",
    ])


def spark_session(cfg: ReplicatorConfig, scratch: Path, record: bool = False):
    """The session; `record`: this JVM records the class-data archive as it exits (the recorder's
    own session), else a missing archive is recorded in the background when `spark_class_cache_record`."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if cfg.spark_master.startswith("local"):
        # Everything runs in this process; without it Spark warns that the host name resolves to
        # loopback and binds to the first interface instead.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    os.environ["SPARK_HOME"] = str(spark_home(cfg))
    log4j = scratch / "log4j2.properties"
    log4j.write_text(log4j2_properties(cfg.log_format))
    java_options = f"-Dderby.system.home={scratch} -Dlog4j2.configurationFile={log4j} {JVM_OPTIONS}"
    archive = spark_cache.class_archive(cfg)
    pending = None
    if archive is not None:
        if archive.is_file():
            java_options += f" -XX:SharedArchiveFile={archive} {_ARCHIVE_LOGS}"
        elif record:
            pending = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
            java_options += f" -XX:ArchiveClassesAtExit={pending} {_ARCHIVE_LOGS}"
    elif (cfg.spark_class_cache_record and not record and (folder := spark_cache.cache_folder(cfg)) is not None
          and not spark_cache.writable(folder)):
        log.info("no Spark class-data archive can be recorded: %s is not writable (spark_class_cache); Spark "
                 "starts without one", folder, extra={"event": "class_archive_skipped"})
    user = dict(cfg.spark)
    if extra := user.pop("spark.driver.extraJavaOptions", ""):
        java_options += f" {extra}"  # last wins in the JVM: the user's own options override ours
    builder = (SparkSession.builder.appName(f"replicator-{cfg.name}").master(cfg.spark_master)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.local.dir", str(scratch / "spark-local"))
               .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
               # A Python process per task, gone when the task ends. Spark's defaults keep a fork-server
               # daemon per kind of worker (4: data source lookup, creation, read planning, tasks)
               # for the whole run, and every finished worker a minute in an idle pool: 300 of the
               # tree's 1,250 MiB at a catch-up's peak (BENCHMARKS.md). A shard task runs for minutes,
               # so starting its interpreter afresh costs well under 1 % of it; reuse bought nothing.
               .config("spark.python.worker.reuse", "false")
               .config("spark.python.use.daemon", "false")
               .config("spark.task.maxFailures", "4")
               .config("spark.speculation", "false")
               # The job config travels as this data source option; plans and progress dumps show "***".
               .config("spark.sql.redaction.options.regex", "(?i)url|^config$")
               .config("spark.driver.memory", _DRIVER_MEMORY)
               .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
               .config("spark.driver.extraJavaOptions", java_options))
    for k, v in user.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    global _recording, _recorder
    _recording = (pending, archive) if pending is not None else None
    # Once this session has started: its own start is never slowed by the recorder's.
    if archive is not None and not archive.is_file() and not record and cfg.spark_class_cache_record:
        _recorder = class_recorder.start(cfg, archive)
    return spark


def jvm_ended(wait_s: float = 10.0) -> bool:
    """Whether Spark's JVM has exited (waiting up to `wait_s` for one that is going): what a py4j error
    in the driver means depends on it."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return False
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        return False
    return True


class JvmGone(RuntimeError):
    """The Spark JVM stopped answering the driver."""


def _check_jvm_answers() -> None:
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    try:
        gateway.jvm.java.lang.System.nanoTime()
    except Py4JError as e:
        raise JvmGone(f"the Spark JVM stopped answering: {e}") from e


def stop(spark, archive_write_s: float = _ARCHIVE_WRITE_S) -> None:
    """Stops Spark and a background recording still under way; after a session that recorded a
    class-data archive, lets the JVM exit (it writes the archive then) and publishes the archive only
    if the JVM exited cleanly. Raises JvmGone when the JVM no longer answers: pyspark turns that into
    a warning during stop, which a caller cannot tell from a clean stop."""
    global _recording, _recorder
    if _recorder is not None:
        _recorder.stop()
        _recorder = None
    spark.stop()
    if _recording is None:
        _check_jvm_answers()
        return
    (pending, archive), _recording = _recording, None
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None or proc.stdin is None:
        return
    with contextlib.suppress(Exception):  # nothing on this side may call into the JVM any more
        gateway.shutdown()
    proc.stdin.close()  # the gateway JVM exits on EOF of its stdin
    try:
        code = proc.wait(archive_write_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
        log.info("the Spark class-data archive was not recorded: the JVM needed more than %.0f s to write it, "
                 "nothing was published", archive_write_s, extra={"event": "class_archive_skipped"})
    written = pending.is_file() and pending.stat().st_size > 0
    if code == 0 and written:
        os.replace(pending, archive)
        log.info("recorded the Spark class-data archive %s: later starts load Spark faster", archive,
                 extra={"event": "class_archive_written"})
    else:
        if code is not None:  # the timeout above said so already
            log.warning("the Spark class-data archive was not recorded: the JVM exited with code %s and %s; "
                        "later starts load Spark without it", code, "wrote an archive" if written else "wrote none",
                        extra={"event": "class_archive_skipped"})
        with contextlib.suppress(OSError):
            pending.unlink()
