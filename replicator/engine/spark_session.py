"""The job's Spark session: settings for long-running shard tasks, a small JVM that starts fast, and
Spark's own log lines in the job's log format instead of log4j's default profile on stderr.

Start-up (a restart is a recovery point) is mostly the driver JVM loading and verifying Spark's
classes: ~14-16 s of CPU. A class-data archive (AppCDS, JEP 350) of what a run loaded halves that.
The archive is written by the JVM when it exits, which takes seconds to minutes, so recording is
asked for (`spark_class_cache_record`: a first run, an image build, the bench's warm-up) and the
archive is published only after that run's clean stop (`stop`), under a name that changes with the
JVM, the Spark version and SPARK_HOME; every later run maps it. A missing, foreign or damaged
archive is ignored by the JVM.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from replicator.config import ReplicatorConfig

log = logging.getLogger("replicator.spark_session")  # the log's public name, kept when the module moved

# The driver JVM only plans epochs and hosts task threads in local mode: records never cross it
# (spark_source). A 1 GiB G1 heap made it the largest process of the tree for nothing; serial GC
# has no GC worker threads and its heap grows only as far as it is used. The JVM's own work is
# start-up (class loading, Catalyst analysis, the first plans) and then a plan every few minutes:
# C2's optimising compiles never pay back there, and on a small pod they compete with the start
# for the cores. C1 alone took the JVM's CPU to a restarted job's first copied record from 6.8-8.2 s
# to 3.9-4.4 s and that restart from 14.0 s to 9.5 s (medians of 6, BENCHMARKS.md).
_DRIVER_MEMORY = "512m"
_JVM_OPTIONS = "-XX:+UseSerialGC -Xms32m -XX:ReservedCodeCacheSize=64m -XX:TieredStopAtLevel=1"

_ARCHIVE_LOGS = "-Xlog:cds*=off -Xlog:class+path=off"  # "skipping signed JAR" and mismatch notes
# A clean stop of a recording run waits this long at most for the JVM to write the archive (seconds
# on an idle machine, minutes on an overloaded one); then the JVM is killed and nothing is published.
_ARCHIVE_WRITE_S = 240.0

# (archive being written, where it is published) of this process's session, if it records one.
_recording: tuple[Path, Path] | None = None

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


def spark_session(cfg: ReplicatorConfig, scratch: Path):
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
    java_options = f"-Dderby.system.home={scratch} -Dlog4j2.configurationFile={log4j} {_JVM_OPTIONS}"
    archive = class_archive(cfg)
    pending = None
    if archive is not None:
        if archive.is_file():
            java_options += f" -XX:SharedArchiveFile={archive} {_ARCHIVE_LOGS}"
        elif cfg.spark_class_cache_record:
            pending = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
            java_options += f" -XX:ArchiveClassesAtExit={pending} {_ARCHIVE_LOGS}"
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
    global _recording
    _recording = (pending, archive) if pending is not None else None
    return spark


def spark_home(cfg: ReplicatorConfig) -> Path:
    """The SPARK_HOME the job runs with: the user's, else `worker_spark_home`, else PySpark's own."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return worker_spark_home(cfg) or Path(pyspark.__file__).parent


def worker_spark_home(cfg: ReplicatorConfig) -> Path | None:
    """A SPARK_HOME for pip-installed PySpark that lacks python/lib/pyspark.zip.

    Spark puts that zip first on every Python worker's PYTHONPATH, and Python compiles modules
    imported from a zip on every start: 1.2 s of CPU against 0.4 s for the same pyspark from
    site-packages with its cached bytecode (measured here). Spark waits a fixed 10 s for a new
    worker to connect back, which a loaded machine then missed (the planner's process). Without the
    zip, workers import the installed pyspark, the same version. Kept in the cache folder (a stable
    path: the class-data archive records the jars' paths); None when the cache is off or its folder
    cannot be written (`spark_home` lets a user's SPARK_HOME win before asking)."""
    if cfg.spark_class_cache == "off":
        return None
    import pyspark

    real = Path(pyspark.__file__).parent
    if not (real / "jars").is_dir():
        return None
    home = Path(cfg.spark_class_cache).expanduser() / f"spark-home-{pyspark.__version__}-{_digest(str(real))}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        for name in ("bin", "sbin", "jars", "conf", "data", "licenses"):
            link = home / name
            if (real / name).exists() and not link.is_symlink():
                link.symlink_to(real / name)
    except OSError:
        return None
    return home


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def class_archive(cfg: ReplicatorConfig) -> Path | None:
    """Where the class-data archive for this JVM, Spark version and SPARK_HOME lives (an existing one
    also in a read-only folder); None when switched off or nothing could be recorded there. Removes
    recordings left by runs that did not stop cleanly."""
    if cfg.spark_class_cache == "off":
        return None
    import pyspark

    java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if java is None:
        return None
    # The archive holds the jars' paths: it is only valid for the SPARK_HOME it was recorded with.
    key = _digest(f"{Path(java).resolve()}|{pyspark.__version__}|{spark_home(cfg)}|{_JVM_OPTIONS}")
    folder = Path(cfg.spark_class_cache).expanduser()
    archive = folder / f"spark-{pyspark.__version__}-{key}.jsa"
    if archive.is_file():  # also from a read-only folder (an image that ships its archive)
        return archive
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    for stale in folder.glob("spark-*.jsa.*.tmp"):  # left by a run that did not stop cleanly
        pid = stale.suffixes[-2].lstrip(".")
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                stale.unlink()
    return archive


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


def stop(spark) -> None:
    """Stops Spark; after a run that recorded a class-data archive, lets the JVM exit (it writes the
    archive then) and publishes the archive only if the JVM exited cleanly. Raises JvmGone when the JVM
    no longer answers: pyspark turns that into a warning during stop, which a caller cannot tell from a
    clean stop."""
    spark.stop()
    global _recording
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
        code = proc.wait(_ARCHIVE_WRITE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
        log.info("the Spark class-data archive was not recorded: the JVM needed more than %.0f s to write it, "
                 "nothing was published", _ARCHIVE_WRITE_S, extra={"event": "class_archive_skipped"})
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
