"""Consumer-group failover: the exact source->target offset translation index, translation,
group checkpointing/sync and promotion (the DR commands built on them are in `replicator.commands.groups`)."""
