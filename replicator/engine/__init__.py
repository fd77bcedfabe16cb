"""The data path and its driver: the Spark job (`job`), its session and data source, the shard copy
loop with its transactional ids, and the task-side helpers it runs with (sharding, bounded calls,
stall watch, the driver link)."""
