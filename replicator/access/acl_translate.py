"""Which source ACLs a replica gets, and under which names (pure rules, no cluster access).

Copied continuously (`copies`): ALLOW rules only, on replicated topics (READ, DESCRIBE; ALL becomes
READ) and on synced groups (READ; ALL becomes READ). WRITE, ALTER, every other operation and every
DENY rule never reach a replica. Applied at promotion only (`promotion_writes`): the topics' WRITE
and DESCRIBE (ALL becomes WRITE, which implies DESCRIBE), so producers can move once the target is
the primary.

Names: a LITERAL topic pattern names one source topic, copied under its target name; a PREFIXED one
is copied, as MirrorMaker 2 does, under the policy's name for the prefix (`orders.` -> `west.orders.`
under the prefix policy) when it covers a replicated topic; the wildcard `*` becomes one LITERAL rule
per replicated topic (a target `*` would also cover the target's own topics). Groups keep their names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

TOPIC, GROUP = "TOPIC", "GROUP"
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
ALLOW = "ALLOW"
WILDCARD = "*"
CLUSTER = "kafka-cluster"  # the Cluster resource's name in ACLs

_TOPIC_COPIES = {"READ": "READ", "ALL": "READ", "DESCRIBE": "DESCRIBE"}
_GROUP_COPIES = {"READ": "READ", "ALL": "READ"}
_PROMOTION = {"WRITE": "WRITE", "ALL": "WRITE", "DESCRIBE": "DESCRIBE"}


@dataclass(frozen=True, order=True)
class Binding:
    """One ACL, spelled with confluent-kafka's enum names (TOPIC, LITERAL, READ, ALLOW)."""

    resource_type: str
    name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str = ALLOW

    @classmethod
    def of(cls, acl: AclBinding) -> Binding:
        return cls(acl.restype.name, acl.name, acl.resource_pattern_type.name, acl.principal, acl.host,
                   acl.operation.name, acl.permission_type.name)

    def to_kafka(self) -> AclBinding:
        return AclBinding(ResourceType[self.resource_type], self.name, ResourcePatternType[self.pattern_type],
                          self.principal, self.host, AclOperation[self.operation],
                          AclPermissionType[self.permission])

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_key(cls, key: str) -> Binding:
        return cls(**json.loads(key))

    def describe(self) -> str:
        kind = "prefixed" if self.pattern_type == PREFIXED else "literal"
        return (f"{self.permission} {self.principal} {self.operation} {self.resource_type.title()} "
                f"'{self.name}' ({kind}) from host {self.host}")


def _names(binding: Binding, names: Mapping[str, str], rename: Callable[[str], str],
           accepts: Callable[[str], bool]) -> list[tuple[str, str]]:
    """The (pattern type, name) a source rule gets on the target, [] when it covers nothing replicated.
    `names`: the known replicated resources (source -> target name); `accepts`: whether a literal
    name is replicated (a group that commits nothing yet still is)."""
    if binding.pattern_type == LITERAL:
        if binding.name == WILDCARD:
            return [(LITERAL, target) for target in sorted(set(names.values()))]
        return [(LITERAL, names.get(binding.name, rename(binding.name)))] if accepts(binding.name) else []
    if binding.pattern_type == PREFIXED and binding.name and any(s.startswith(binding.name) for s in names):
        return [(PREFIXED, rename(binding.name))]
    return []


def _translate(bindings: Iterable[Binding], resource_type: str, operations: Mapping[str, str],
               names: Mapping[str, str], rename: Callable[[str], str],
               accepts: Callable[[str], bool] | None = None) -> set[Binding]:
    accepts = accepts or names.__contains__
    out = set()
    for b in bindings:
        if b.resource_type != resource_type or b.permission != ALLOW or b.operation not in operations:
            continue
        for pattern, name in _names(b, names, rename, accepts):
            out.add(Binding(resource_type, name, pattern, b.principal, b.host, operations[b.operation]))
    return out


def _same(name: str) -> str:
    return name


def copies(bindings: Iterable[Binding], topics: Mapping[str, str], rename: Callable[[str], str],
           groups: Iterable[str] = (), accepts_group: Callable[[str], bool] = lambda _g: False) -> set[Binding]:
    """What the replica gets now. `topics`: replicated source topic -> target topic; `rename`: the
    replication policy's target name (applied to prefixes too); `groups`: the synced groups the
    source lists, `accepts_group`: the group selection (groups keep their names)."""
    bindings = list(bindings)
    return (_translate(bindings, TOPIC, _TOPIC_COPIES, topics, rename)
            | _translate(bindings, GROUP, _GROUP_COPIES, {g: g for g in groups if accepts_group(g)}, _same,
                         accepts_group))


def promotion_writes(bindings: Iterable[Binding], topics: Mapping[str, str],
                     rename: Callable[[str], str]) -> set[Binding]:
    """What the target gets when it is promoted (never before): producers' rights on the topics,
    less what `copies` already gave."""
    bindings = list(bindings)
    return _translate(bindings, TOPIC, _PROMOTION, topics, rename) - copies(bindings, topics, rename)


def needs_groups(bindings: Iterable[Binding]) -> bool:
    """Whether the source's group names are needed to translate (a prefixed or wildcard group rule)."""
    return any(b.resource_type == GROUP and (b.pattern_type == PREFIXED or b.name == WILDCARD) for b in bindings)
