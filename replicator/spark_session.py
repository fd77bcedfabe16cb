"""The job's Spark session: settings for long-running shard tasks, a small JVM, and Spark's own log
lines in the job's log format instead of log4j's default profile on stderr."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from replicator.config import ReplicatorConfig

# The driver JVM only plans epochs and hosts task threads in local mode: records never cross it
# (spark_source). A 1 GiB G1 heap made it the largest process of the tree for nothing; serial GC
# has no GC worker threads and its heap grows only as far as it is used.
_DRIVER_MEMORY = "512m"
_JVM_OPTIONS = "-XX:+UseSerialGC -Xms32m -XX:ReservedCodeCacheSize=64m"

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

    log4j = scratch / "log4j2.properties"
    log4j.write_text(log4j2_properties(cfg.log_format))
    java_options = f"-Dderby.system.home={scratch} -Dlog4j2.configurationFile={log4j} {_JVM_OPTIONS}"
    user = dict(cfg.spark)
    if extra := user.pop("spark.driver.extraJavaOptions", ""):
        java_options += f" {extra}"  # last wins in the JVM: the user's own options override ours
    builder = (SparkSession.builder.appName(f"replicator-{cfg.name}").master(cfg.spark_master)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.local.dir", str(scratch / "spark-local"))
               .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
               .config("spark.python.worker.reuse", "true")
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
    return spark
