"""`replicator spark-warmup`: records the Spark class-data archive without any Kafka cluster.

A session configured exactly as the job's (same JVM options, classpath and SPARK_HOME, so the same
archive, which the JVM accepts from another process), running one micro-batch through a Python
streaming source into the job's `noop` sink: it loads the classes a job's start loads. A job that
finds no archive runs it in the background (`--background`, class_recorder). The image build runs
it too (Dockerfile): a container starts from its image every time, and its root filesystem is
read-only in the shipped manifests, so a pod could never keep an archive it recorded.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

log = logging.getLogger("replicator.spark_warmup")  # the log's public name, kept when the module moved


class _OneBatch(DataSource):
    @classmethod
    def name(cls) -> str:
        return "replicator-warmup"

    def schema(self) -> StructType:
        return StructType([StructField("shard", IntegerType()), StructField("ranges", StringType())])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _Reader()


class _Quiet(StreamingQueryListener):
    """The job listens to its query's progress (a Python listener, the JVM's side of py4j's callback)."""

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


class _Reader(DataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        return {"n": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(0)] if start["n"] < end["n"] else []

    def read(self, partition: InputPartition) -> Iterator[tuple[int, str]]:
        yield (0, "{}")

    def commit(self, end: dict) -> None:
        pass


# Nobody waits for a background recording, and at the lowest priority on a machine busy with other
# work the JVM needed more than 240 s to write the archive (load average 45 on 2 cores).
BACKGROUND_WRITE_S = 1800.0


def record(cfg, archive_write_s: float | None = None) -> Path | None:
    """Records the archive for `cfg`'s Spark settings; returns it, or None when none was written."""
    from replicator.engine import spark_cache, spark_session

    archive = spark_cache.class_archive(cfg)
    if archive is None:
        return None
    if archive.is_file():
        return archive
    scratch = Path(tempfile.mkdtemp(prefix="replicator-warmup-"))
    try:
        spark = spark_session.spark_session(cfg, scratch, record=True)
        spark.dataSource.register(_OneBatch)
        spark.streams.addListener(_Quiet())
        query = (spark.readStream.format(_OneBatch.name()).load()
                 .writeStream.format("noop").option("checkpointLocation", str(scratch / "checkpoint"))
                 .trigger(processingTime="100 milliseconds").start())
        query.processAllAvailable()
        query.stop()
        spark_session.stop(spark, *(() if archive_write_s is None else (archive_write_s,)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return archive if archive.is_file() else None


def _end_at_sigterm() -> None:
    """The job that started this recorder stops: the recorder's whole group goes, its JVM at whatever
    stage of its start (killed, a JVM writes no archive), and what it had written goes too."""
    def handler(signum, frame) -> None:
        from replicator.engine import spark_session

        if spark_session._recording is not None:
            spark_session._recording[0].unlink(missing_ok=True)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    signal.signal(signal.SIGTERM, handler)


@click.command("spark-warmup", hidden=True)
@click.option("--background", is_flag=True, help="started by a job: Spark settings as JSON on stdin, "
                                                  "lowest CPU priority")
def spark_warmup(background: bool) -> None:
    """Record the Spark class-data archive into spark_class_cache (REPLICATOR_SPARK_CLASS_CACHE)."""
    from replicator import config as config_mod
    from replicator import logs

    placeholder = {"name": "warmup", "topics": "warmup", "source_bootstrap_servers": "127.0.0.1:9",
                   "target_bootstrap_servers": "127.0.0.2:9"}
    environ = None  # the process's own
    if background:
        os.nice(19)  # before the JVM starts: it inherits the priority
        _end_at_sigterm()
        # The job's Spark settings, and only them: options from its environment alone might not
        # pass the checks that its config file passed.
        placeholder.update(json.loads(sys.stdin.read() or "{}"))
        environ = {}
    cfg = config_mod.load(placeholder, environ=environ)
    logs.configure(cfg.log_format, cfg.log_level)
    archive = record(cfg, BACKGROUND_WRITE_S if background else None)
    if archive is None:
        click.echo("error: no class-data archive was recorded (spark_class_cache off, not writable, "
                   "or the JVM did not write it in time)", err=True)
        sys.exit(1)
    click.echo(f"class-data archive: {archive} ({archive.stat().st_size / 2**20:.0f} MiB)")
