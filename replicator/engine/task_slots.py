"""Whether Spark offers a task slot for every shard."""

from __future__ import annotations

from replicator.config import ReplicatorConfig
from replicator.engine.failures import RuntimeFailure


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
