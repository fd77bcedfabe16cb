"""`replicator spark-warmup`: records the Spark class-data archive without any Kafka cluster.

A job records the archive at its clean stop when asked (`spark_class_cache_record`), but a container
starts from its image every time, and its root filesystem is read-only in the shipped manifests: a
pod could never keep an archive it recorded. So the image build records one (Dockerfile) with this
command: a session configured exactly as the job's (same JVM options and SPARK_HOME, so the same
archive key), running one micro-batch through a Python streaming source into the job's `noop`
sink, which loads the classes a job's start loads.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
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


def record(cfg) -> Path | None:
    """Records the archive for `cfg`'s Spark settings; returns it, or None when none was written."""
    from replicator.engine import spark_session

    cfg = dataclasses.replace(cfg, spark_class_cache_record=True)
    archive = spark_session.class_archive(cfg)
    if archive is None:
        return None
    if archive.is_file():
        return archive
    scratch = Path(tempfile.mkdtemp(prefix="replicator-warmup-"))
    try:
        spark = spark_session.spark_session(cfg, scratch)
        spark.dataSource.register(_OneBatch)
        query = (spark.readStream.format(_OneBatch.name()).load()
                 .writeStream.format("noop").option("checkpointLocation", str(scratch / "checkpoint"))
                 .trigger(processingTime="100 milliseconds").start())
        query.processAllAvailable()
        query.stop()
        spark_session.stop(spark)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return archive if archive.is_file() else None


@click.command("spark-warmup", hidden=True)
def spark_warmup() -> None:
    """Record the Spark class-data archive into spark_class_cache (REPLICATOR_SPARK_CLASS_CACHE)."""
    from replicator import config as config_mod
    from replicator import logs

    placeholder = {"name": "warmup", "topics": "warmup", "source_bootstrap_servers": "127.0.0.1:9",
                   "target_bootstrap_servers": "127.0.0.2:9"}
    cfg = config_mod.load(placeholder)
    logs.configure(cfg.log_format, cfg.log_level)
    archive = record(cfg)
    if archive is None:
        click.echo("error: no class-data archive was recorded (spark_class_cache off, not writable, "
                   "or the JVM did not write it in time)", err=True)
        sys.exit(1)
    click.echo(f"class-data archive: {archive} ({archive.stat().st_size / 2**20:.0f} MiB)")
