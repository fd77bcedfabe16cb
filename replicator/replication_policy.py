"""How a source topic is named on the target (MirrorMaker 2's ReplicationPolicy)."""

from __future__ import annotations

from replicator.config import ReplicatorConfig


class ReplicationPolicy:
    def target_topic(self, source_topic: str) -> str:
        raise NotImplementedError

    def is_remote(self, topic: str) -> bool:
        """True for topics that already are replicas from elsewhere (not to be sent back)."""
        return False


class IdentityPolicy(ReplicationPolicy):
    def target_topic(self, source_topic: str) -> str:
        return source_topic


class PrefixPolicy(ReplicationPolicy):
    """`<source-alias>.<topic>`, MirrorMaker 2's default; the prefix is the cycle guard."""

    def __init__(self, source_alias: str) -> None:
        self.alias = source_alias

    def target_topic(self, source_topic: str) -> str:
        return f"{self.alias}.{source_topic}"


def policy_for(cfg: ReplicatorConfig) -> ReplicationPolicy:
    if cfg.replication_policy == "prefix":
        return PrefixPolicy(cfg.source_alias)
    return IdentityPolicy()
