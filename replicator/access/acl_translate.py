"""Which source ACLs a replica gets, and under which names (pure rules, no cluster access).

Copied continuously (`copies`): ALLOW rules only, on replicated topics (READ, DESCRIBE; ALL becomes
READ) and on synced groups (READ; ALL becomes READ). WRITE, ALTER, every other operation and every
DENY rule never reach a replica. Applied at promotion only (`promotion_writes`): the topics' WRITE
and DESCRIBE (ALL becomes WRITE, which implies DESCRIBE), so producers can move once the target is
the primary; and, for each principal that gets WRITE on a promoted topic, its TransactionalId
WRITE/DESCRIBE rules (ALL becomes WRITE) and its IDEMPOTENT_WRITE on the cluster: a transactional
producer without them fails at its first init_transactions() on the promoted cluster. Transactional
ids are not renamed (they name no topic); MirrorMaker 2 copies none of these.

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

TOPIC, GROUP, TRANSACTIONAL_ID, BROKER = "TOPIC", "GROUP", "TRANSACTIONAL_ID", "BROKER"
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
ALLOW = "ALLOW"
WILDCARD = "*"
CLUSTER = "kafka-cluster"  # the Cluster resource's name in ACLs

_TOPIC_COPIES = {"READ": "READ", "ALL": "READ", "DESCRIBE": "DESCRIBE"}
_GROUP_COPIES = {"READ": "READ", "ALL": "READ"}
_PROMOTION = {"WRITE": "WRITE", "ALL": "WRITE", "DESCRIBE": "DESCRIBE"}
_TRANSACTIONAL = {"WRITE": "WRITE", "ALL": "WRITE", "DESCRIBE": "DESCRIBE"}
# Kafka 3.0+ implies it from WRITE on a topic or transactional id; older brokers ask for it.
_IDEMPOTENT = {"IDEMPOTENT_WRITE": "IDEMPOTENT_WRITE"}
_KINDS = {TRANSACTIONAL_ID: "TransactionalId", BROKER: "Cluster"}  # as kafka-acls spells them


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
        return (f"{self.permission} {self.principal} {self.operation} "
                f"{_KINDS.get(self.resource_type, self.resource_type.title())} "
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
    less what `copies` already gave, and the transactional rights of the principals that write."""
    bindings = list(bindings)
    on_topics = _translate(bindings, TOPIC, _PROMOTION, topics, rename)
    writers = {b.principal for b in on_topics if b.operation == "WRITE"}
    return (on_topics - copies(bindings, topics, rename)) | _producers_own(bindings, writers)


def _producers_own(bindings: Iterable[Binding], principals: set[str]) -> set[Binding]:
    """The TransactionalId and cluster IDEMPOTENT_WRITE rules of `principals`, names kept."""
    out = set()
    for b in bindings:
        if b.permission != ALLOW or b.principal not in principals:
            continue
        ops = _TRANSACTIONAL if b.resource_type == TRANSACTIONAL_ID else \
            _IDEMPOTENT if b.resource_type == BROKER and b.name == CLUSTER else {}
        if b.operation in ops:
            out.add(Binding(b.resource_type, b.name, b.pattern_type, b.principal, b.host, ops[b.operation]))
    return out


def needs_groups(bindings: Iterable[Binding]) -> bool:
    """Whether the source's group names are needed to translate (a prefixed or wildcard group rule)."""
    return any(b.resource_type == GROUP and (b.pattern_type == PREFIXED or b.name == WILDCARD) for b in bindings)
