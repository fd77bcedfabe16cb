"""Consumer-group failover: the exact source->target offset translation index, translation,
group checkpointing/sync, and the DR commands built on them."""
