"""The least Kafka ACLs a replication needs, written down once.

`acl_set(cfg)` is the single source: `replicator acls` prints it (kafka-acls lines or JSON), the
docs' table in deploy/README.md is generated from it (a unit test compares), and the integration
tests grant exactly it before proving that replication works with it and fails clearly without
any one entry.

Operations that imply Describe (Read, Write, Alter, ...) are not paired with a separate Describe,
nor AlterConfigs with DescribeConfigs: such an entry could be removed without any effect, so it
would not be least privilege (the single-removal tests would show it).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from replicator import names
from replicator.config import ReplicatorConfig
from replicator.replication_policy import policy_for

REQUIRED = "required"
# optional: the pin of the target's cluster id on the source (replicator.engine.cluster_identity);
# without it the job runs, warned that a new, empty cluster at the target's address would get every
# record again.
CLUSTER_PIN = "cluster pin"
CREATE = "topic creation"  # optional: without it, target topics must exist beforehand
CONFIG_SYNC = "topic config sync"  # optional: without it, configs are not copied or re-synced
GROUP_SYNC = "group sync"  # optional: consumer-group checkpoints and offset sync (needs the index)
# optional: the disaster-recovery commands that write or read the promotion marker (switchover,
# failover, divergence, failback); `run` never needs these, so the job can run without them.
PROMOTION = "promotion"
# optional: application ACLs follow the replication (replicator.access.acl_sync)
ACL_SYNC = "acl sync"
FEATURES = (REQUIRED, CLUSTER_PIN, CREATE, CONFIG_SYNC, GROUP_SYNC, PROMOTION, ACL_SYNC)
DEFAULT_SOURCE_PRINCIPAL = "User:replicator-source"
DEFAULT_TARGET_PRINCIPAL = "User:replicator-target"


@dataclass(frozen=True)
class Acl:
    cluster: str  # "source" or "target"
    principal: str  # "User:name"
    resource_type: str  # Topic, Group, TransactionalId, Cluster
    pattern_type: str  # LITERAL or PREFIXED
    resource_name: str
    operation: str  # as kafka-acls spells it: Read, Write, Create, Alter, DescribeConfigs, ...
    feature: str  # REQUIRED or the optional feature it enables
    why: str

    @property
    def resource(self) -> str:
        kind = "prefixed" if self.pattern_type == "PREFIXED" else "literal"
        return f"{self.resource_type} '{self.resource_name}' ({kind})"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def topic_patterns(regex: str) -> list[tuple[str, str]]:
    """ACL resource patterns covering the source topics a selection regex can match:
    `orders` -> LITERAL orders, `orders\\..*` -> PREFIXED orders., anything else -> LITERAL * (every
    topic; the docs say to prefer names or prefixes)."""
    out: list[tuple[str, str]] = []
    for alternative in _alternatives(regex):
        alt = alternative
        while alt.startswith("(?:") and alt.endswith(")") and _balanced(alt[3:-1]):
            alt = alt[3:-1]
        prefix = alt[:-2] if alt.endswith(".*") else None
        literal = _literal(prefix if prefix is not None else alt)
        if literal is None or (prefix is not None and not literal):
            return [("LITERAL", "*")]
        out.append(("PREFIXED" if prefix is not None else "LITERAL", literal))
    return list(dict.fromkeys(out))


def _alternatives(regex: str) -> list[str]:
    parts, depth, current, escaped = [], 0, "", False
    for ch in regex:
        if escaped:
            current, escaped = current + ch, False
            continue
        if ch == "\\":
            current, escaped = current + ch, True
            continue
        depth += ch == "("
        depth -= ch == ")"
        if ch == "|" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text.replace("\\(", "").replace("\\)", ""):
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def _literal(pattern: str) -> str | None:
    """The text a regex matches when it matches exactly one string, else None."""
    text = re.sub(r"\\(.)", lambda m: "\x00" + m.group(1), pattern)
    if re.search(r"[.^$*+?()\[\]{}|]", text.replace("\x00.", "").replace("\x00-", "")):
        return None
    return text.replace("\x00", "")


def _grants(cluster: str, principal: str, resource_type: str, pattern: str, name: str,
            *grants: tuple[str, str, str]) -> list[Acl]:
    """The entries for one resource and principal: an (operation, feature, why) each."""
    return [Acl(cluster, principal, resource_type, pattern, name, op, feature, why) for op, feature, why in grants]


def acl_set(cfg: ReplicatorConfig, source_principal: str = DEFAULT_SOURCE_PRINCIPAL,
            target_principal: str = DEFAULT_TARGET_PRINCIPAL) -> list[Acl]:
    """Every ACL the configured replication uses, each tagged with the feature that needs it."""
    policy = policy_for(cfg)
    acls: list[Acl] = []
    src, dst = source_principal, target_principal
    for pattern, name in topic_patterns(cfg.topics):
        target_name = name if name == "*" else policy.target_topic(name)
        target_pattern = "PREFIXED" if name == "*" and target_name != "*" else pattern
        acls += _grants(
            "source", src, "Topic", pattern, name,
            ("Read", REQUIRED, "fetch records read_committed; also lists partitions and offsets (Read implies "
                               "Describe)"),
            ("DescribeConfigs", CONFIG_SYNC, "read the source topic's configs to create the target topic with them "
                                             "and keep them in sync"))
        acls += _grants(
            "target", dst, "Topic", target_pattern, target_name,
            ("Write", REQUIRED, "produce the copied records in transactions"),
            ("Read", REQUIRED, "commit the source offsets into the offsets group with the records (TxnOffsetCommit "
                               "checks Read on the topic); read back a record after a commit in doubt"),
            ("Create", CREATE, "create missing target topics with the source's partitions and configs"),
            ("Alter", CREATE, "add partitions when a source topic grows"),
            ("AlterConfigs", CONFIG_SYNC, "compare the target topic's configs with the source's and re-apply drifted "
                                          "ones (AlterConfigs implies DescribeConfigs)"))
    if cfg.exactly_once and cfg.translation_index:
        acls += _index_and_group_sync(cfg, src, dst)
    acls += _grants("source", src, "Group", "LITERAL", names.source_reader_group(cfg.name),
                    ("Describe", REQUIRED, "librdkafka looks up the coordinator of its consumer's group.id "
                                           "(FindCoordinator) although the job never joins that group or commits "
                                           "to it"))
    acls += _grants("source", src, "Group", "LITERAL", names.target_pin_group(cfg.name),
                    ("Read", CLUSTER_PIN, "commit the pin of the target's cluster id (one offset, at every start "
                                          "and offsets refresh), so a new cluster at the target's address is "
                                          "refused instead of copied into from the source's start (Read implies "
                                          "Describe)"))
    acls += _grants("target", dst, "Group", "LITERAL", cfg.group,
                    ("Read", REQUIRED, "the offsets group: source offsets are committed into it in each transaction "
                                       "and read back at every start (Read implies Describe)"))
    if cfg.sync_acls:
        acls += _acl_sync(cfg, src, dst)
    if cfg.exactly_once:
        acls += _grants("target", dst, "TransactionalId", "PREFIXED", names.transactional_id_prefix(cfg.name),
                        ("Write", REQUIRED, "one transactional producer per shard, `<name>-shard-<n>` (Write implies "
                                            "Describe)"))
    return sorted(acls, key=lambda a: (a.cluster != "source", FEATURES.index(a.feature), a.resource_type,
                                       a.resource_name, a.operation))


def _index_and_group_sync(cfg: ReplicatorConfig, src: str, dst: str) -> list[Acl]:
    """The translation index (written with every copy), the promotion marker, and group sync."""
    index, translator = names.index_topic(cfg.name), names.translator_group(cfg.name)
    acls = _grants(
        "target", dst, "Topic", "LITERAL", index,
        ("Write", REQUIRED, "the translation index: one exact source->target offset entry per copy transaction"),
        ("Create", CREATE, "create the translation index topic at the first start"),
        ("AlterConfigs", CONFIG_SYNC, "check the translation index keeps records as long as the replicated topics, "
                                      "and raise its retention if not (AlterConfigs implies DescribeConfigs)"),
        ("Read", GROUP_SYNC, "translate source offsets to target offsets through the index"))
    acls += _grants("target", dst, "Topic", "LITERAL", names.marker_topic(cfg.name),
                    ("Describe", REQUIRED, "see the switchover/failover marker topic: the job stops if the target was "
                                           "promoted (without it a promoted target would not be noticed)"),
                    ("Create", PROMOTION, "`switchover`/`failover` create the promotion marker topic"),
                    ("Write", PROMOTION, "`switchover`/`failover` write the promotion marker (the cut)"),
                    ("Read", PROMOTION, "`divergence`/`failback` read the promotion marker's cut"))
    for pattern, groups in topic_patterns(cfg.groups):
        acls += _grants("source", src, "Group", pattern, groups,
                        ("Describe", GROUP_SYNC, "list the source consumer groups and read their committed offsets"))
        acls += _grants("target", dst, "Group", pattern, groups,
                        ("Read", GROUP_SYNC, "commit translated offsets into the groups on the target (only while "
                                             "they are empty there)"))
    for cluster, principal, reader in (("source", src, "translation"), ("target", dst, "checkpoint")):
        acls += _grants(cluster, principal, "Group", "LITERAL", translator,
                        ("Describe", GROUP_SYNC, f"coordinator lookup of the {reader} reader's group.id (never "
                                                 f"joined or committed)"))
    acls += _grants("target", dst, "Topic", "LITERAL", names.checkpoints_topic(cfg.name),
                    ("Create", GROUP_SYNC, "create the checkpoints topic at the first start"),
                    ("Write", GROUP_SYNC, "write group checkpoints"),
                    ("Read", GROUP_SYNC, "load the checkpoints at start"))
    if cfg.mm2_compatible_checkpoints:
        acls += _grants("target", dst, "Topic", "LITERAL", names.mm2_checkpoints_topic(cfg.source_alias),
                        ("Create", GROUP_SYNC, "create MirrorMaker 2's checkpoints topic at the first start "
                                               "(mm2_compatible_checkpoints)"),
                        ("Write", GROUP_SYNC, "write MirrorMaker 2-format checkpoints (mm2_compatible_checkpoints)"))
    return acls


def _acl_sync(cfg: ReplicatorConfig, src: str, dst: str) -> list[Acl]:
    from replicator.access.acl_translate import CLUSTER

    return [*_grants("source", src, "Cluster", "LITERAL", CLUSTER,
                     ("Describe", ACL_SYNC, "read the source's ACLs (DescribeAcls) to copy the replicated topics' and "
                                            "groups' rules")),
            *_grants("target", dst, "Cluster", "LITERAL", CLUSTER,
                     ("Alter", ACL_SYNC, "create and delete the copied ACLs (CreateAcls/DeleteAcls; Alter implies the "
                                         "Describe DescribeAcls needs). It lets the principal grant any ACL: leave it "
                                         "out to keep application ACLs by hand")),
            *_grants("target", dst, "Topic", "LITERAL", names.acl_state_topic(cfg.name),
                     ("Create", ACL_SYNC, "create the topic recording which ACLs the sync created"),
                     ("Write", ACL_SYNC, "record each ACL before creating it (only those are ever deleted)"),
                     ("Read", ACL_SYNC, "load what the sync created; `failover` reads the producers' rules from it"))]


_OPTION = {"Topic": "--topic", "Group": "--group", "TransactionalId": "--transactional-id", "Cluster": "--cluster"}


def kafka_acls_lines(acls: list[Acl], bootstrap: dict[str, str] | None = None) -> list[str]:
    """One `kafka-acls.sh --add` command per resource and principal, operations merged."""
    bootstrap = bootstrap or {}
    grouped: dict[tuple, list[str]] = {}
    for a in acls:
        grouped.setdefault((a.cluster, a.feature, a.principal, a.resource_type, a.pattern_type, a.resource_name),
                           []).append(a.operation)
    lines = []
    for (cluster, feature, principal, rtype, pattern, name), ops in grouped.items():
        server = bootstrap.get(cluster) or cluster.upper()
        resource = "--cluster" if rtype == "Cluster" else f"{_OPTION[rtype]} '{name}'"
        operations = " ".join(f"--operation {op}" for op in ops)
        lines.append(f"# {cluster}, {feature}\nkafka-acls.sh --bootstrap-server {server} --command-config "
                     f"{cluster}-admin.properties --add --allow-principal {principal} {operations} {resource} "
                     f"--resource-pattern-type {pattern.lower()}")
    return lines


def markdown_table(acls: list[Acl]) -> str:
    rows = ["| cluster | principal | resource | pattern | operation | needed for | why |",
            "|---|---|---|---|---|---|---|"]
    for a in acls:
        rows.append(f"| {a.cluster} | `{a.principal}` | {a.resource_type} | {a.pattern_type.lower()} "
                    f"`{a.resource_name}` | {a.operation} | {a.feature} | {a.why} |")
    return "\n".join(rows)


# The example the docs' table is generated for (tests/unit/test_acls.py keeps them equal).
DOC_EXAMPLE = {"name": "orders-dr", "topics": r"orders\..*|payments", "source_bootstrap_servers": "src:9092",
               "target_bootstrap_servers": "dst:9092"}
DOC_BEGIN = "<!-- acl-table:begin (generated by `replicator acls --format markdown`; tests/unit/test_acls.py) -->"
DOC_END = "<!-- acl-table:end -->"


def doc_table() -> str:
    from replicator import config as config_mod

    cfg = config_mod.load(DOC_EXAMPLE, environ={})
    return markdown_table(acl_set(cfg, "User:replicator-source", "User:replicator-target"))


def principal_of(props: dict[str, str] | None) -> str | None:
    """The principal a cluster will see for these client properties, where the properties say it:
    the SASL user, or the client certificate's subject DN (Kafka's default mapping; brokers with
    `ssl.principal.mapping.rules` may shorten it, e.g. to the CN)."""
    props = props or {}
    if props.get("sasl.username"):
        return f"User:{props['sasl.username']}"
    cert = props.get("ssl.certificate.location")
    if cert:
        try:
            from cryptography import x509

            with open(cert, "rb") as f:
                return f"User:{x509.load_pem_x509_certificate(f.read()).subject.rfc4514_string()}"
        except (OSError, ValueError):
            return None
    return None
