"""How a source topic is named on the target (MirrorMaker 2's ReplicationPolicy), and how a
replicator avoids copying back what came from its own target (the cycle guard).

To add a policy: subclass `ReplicationPolicy` and register it in `POLICIES` (and in the config's
`replication_policy` choices).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from replicator.config import ReplicatorConfig

SEPARATOR = "."
# Header stamped on every copied record when `provenance_header` is on: the id of the cluster the
# record was copied from. Records may carry several (one per hop).
PROVENANCE_HEADER = "replicator.source.cluster"


class ReplicationPolicy:
    name = ""

    def target_topic(self, source_topic: str) -> str:
        raise NotImplementedError

    def is_remote(self, topic: str) -> bool:
        """True for source topics that are replicas of the target's own topics (never sent back)."""
        return False


class IdentityPolicy(ReplicationPolicy):
    """Same name on both sides. Names cannot tell a replica from an original, so active/active
    loops are prevented by the provenance header instead (see `Provenance`)."""

    name = "identity"

    def target_topic(self, source_topic: str) -> str:
        return source_topic


class PrefixPolicy(ReplicationPolicy):
    """`<source-alias>.<topic>`, MirrorMaker 2's default. A source topic whose alias chain names the
    target (`<target-alias>.orders`, `x.<target-alias>.orders`) came from the target: copying it back
    would loop, so it is remote."""

    name = "prefix"

    def __init__(self, source_alias: str, target_alias: str) -> None:
        self.alias = source_alias
        self.target_alias = target_alias

    def target_topic(self, source_topic: str) -> str:
        return f"{self.alias}{SEPARATOR}{source_topic}"

    def is_remote(self, topic: str) -> bool:
        # As MirrorMaker 2 does: every leading segment is read as the alias of an upstream hop.
        *hops, _ = topic.split(SEPARATOR)
        return self.target_alias in hops


POLICIES = {IdentityPolicy.name: lambda cfg: IdentityPolicy(),
            PrefixPolicy.name: lambda cfg: PrefixPolicy(cfg.source_alias, cfg.target_alias)}


def policy_for(cfg: ReplicatorConfig) -> ReplicationPolicy:
    return POLICIES[cfg.replication_policy](cfg)


class Provenance:
    """Stamps copied records with the source cluster id and drops records that originated on the
    target (they carry its id from an earlier hop). Applied once per consumed batch, and only when
    `provenance_header` is on, so the default data path pays nothing for it."""

    def __init__(self, source_cluster: str, target_cluster: str) -> None:
        self.stamp = (PROVENANCE_HEADER, source_cluster.encode())
        self.target = target_cluster.encode()

    def came_from_target(self, headers: list[tuple[str, bytes]] | None) -> bool:
        return bool(headers) and any(k == PROVENANCE_HEADER and v == self.target for k, v in headers)

    def apply(self, msgs: list, planned: Callable[[Any], bool]) -> list:
        """The batch without the planned records that came from the target, the others stamped.
        A dropped record's offset is still covered: the partition's next copied record, or the end
        of its planned range, moves the committed offset past it. Records beyond the plan are kept:
        they are what tells the copier a range is finished."""
        out = []
        for m in msgs:
            if m.error() is None:
                headers = m.headers()
                if self.came_from_target(headers) and planned(m):
                    continue
                m.set_headers([*(headers or ()), self.stamp])
            out.append(m)
        return out
