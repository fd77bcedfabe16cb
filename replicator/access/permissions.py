"""Pre-flight authorization: before the first write, each cluster is asked what the job's principal
may do on the resources the job will use (KIP-430 authorized operations), so a missing ACL stops the
job with a message naming the permission, the resource and the principal, instead of a task retry
loop or a half-done start. Optional features whose ACLs are missing are switched off, and said so.

The ACL names match `replicator.access.acls` (the one written-down set); the broker is the judge.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

from replicator import names
from replicator.access.acls import principal_of, topic_patterns
from replicator.clients.client_errors import COORDINATOR_BUSY, is_authorization_error
from replicator.config import ReplicatorConfig
from replicator.internal_topics import checkpoint_topics, create_marker_topic, ensure_checkpoint_topics
from replicator.replication_policy import policy_for

log = logging.getLogger("replicator.permissions")  # the log's public name, kept when the module moved
_OP_NAMES = {AclOperation.READ: "Read", AclOperation.WRITE: "Write", AclOperation.CREATE: "Create",
             AclOperation.ALTER: "Alter", AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
             AclOperation.ALTER_CONFIGS: "AlterConfigs", AclOperation.DESCRIBE: "Describe"}
_OPS = {name: op for op, name in _OP_NAMES.items()}


_ALL = set(AclOperation)


class PermissionDenied(RuntimeError):
    """A required ACL is missing (exit code 1); the message says which and for whom."""


def who(cfg: ReplicatorConfig, role: str) -> str:
    principal = principal_of(cfg.client_properties(role) if role in ("source", "target") else None)
    return f"principal {principal}" if principal else "the job's principal"


def lacks(cfg: ReplicatorConfig, role: str, operations: Iterable[str], resource: str) -> str:
    """How every degrade message names what is missing: the principal, the operation(s), the cluster
    and the resource, e.g. "principal User:writer lacks Read on target Group 'app' (literal)"."""
    return f"{who(cfg, role)} lacks {'/'.join(operations)} on {role} {resource}"


def denied(cfg: ReplicatorConfig, role: str, operation: str, resource: str, purpose: str) -> PermissionDenied:
    servers = cfg.source_bootstrap_servers if role == "source" else cfg.target_bootstrap_servers
    return PermissionDenied(
        f"the {role} cluster at {servers} does not allow {who(cfg, role)} to {operation} {resource}, which "
        f"the job needs to {purpose}. Grant it (see `replicator acls --config ...`) and start again; nothing "
        f"has been written.")


def _topic_operations(admin: AdminClient, topics: Iterable[str]) -> dict[str, set | KafkaError]:
    topics = sorted(set(topics))
    if not topics:
        return {}
    futures = admin.describe_topics(TopicCollection(topics), include_authorized_operations=True,
                                    request_timeout=30)
    out: dict[str, set | KafkaError] = {}
    for topic, fut in futures.items():
        try:
            ops = fut.result().authorized_operations
        except KafkaException as e:
            out[topic] = e.args[0]
            continue
        # None: the cluster did not say (no authorizer, or too old to answer): nothing to check.
        out[topic] = _ALL if ops is None else set(ops)
    return out


def check_source(cfg: ReplicatorConfig, source: AdminClient, selected: Iterable[str]) -> None:
    """Read on every selected source topic; a topic named literally in `topics` that the source
    does not show at all is checked by name (unauthorized topics are invisible in listings)."""
    selected = set(selected)
    named = {name for kind, name in topic_patterns(cfg.topics) if kind == "LITERAL" and name != "*"}
    for topic, ops in _topic_operations(source, selected | named).items():
        if isinstance(ops, KafkaError):
            if is_authorization_error(ops):
                raise denied(cfg, "source", "Read", f"Topic '{topic}'", "list and copy it")
            continue  # does not exist (yet): picked up when it appears
        if topic in selected and AclOperation.READ not in ops:
            raise denied(cfg, "source", "Read", f"Topic '{topic}'", "copy its records")


def check_target(cfg: ReplicatorConfig, target: AdminClient, selected: dict[str, int],
                 quiet: bool = False) -> ReplicatorConfig:
    """Write and Read on existing target topics, and whether the optional features may run; returns
    the config with the features switched off that the principal may not use."""
    policy = policy_for(cfg)
    targets = {policy.target_topic(s): s for s in selected}
    if cfg.translation_index and cfg.exactly_once:
        targets[names.index_topic(cfg.name)] = ""
    ops_by_topic = _topic_operations(target, targets)
    skipped_sync: list[str] = []
    for topic, ops in ops_by_topic.items():
        if isinstance(ops, KafkaError):
            if is_authorization_error(ops):
                raise denied(cfg, "target", "Write", f"Topic '{topic}'", "copy records into it")
            # Does not exist: creating it needs Create, which only the creation itself can tell.
            continue
        for op, purpose in ((AclOperation.WRITE, "copy records into it"),
                            (AclOperation.READ, "commit source offsets for it (TxnOffsetCommit checks Read)")):
            if op == AclOperation.READ and not targets[topic]:
                continue  # the translation index: written, no offsets committed for it
            if op not in ops:
                raise denied(cfg, "target", _OP_NAMES[op], f"Topic '{topic}'", purpose)
        if not targets[topic]:
            # The index: created once, never grown; its retention sizing (DescribeConfigs/AlterConfigs)
            # degrades on its own in `ensure_index_topic`, without switching off the topics' config sync.
            continue
        lacking = [_OP_NAMES[op] for op in (AclOperation.CREATE, AclOperation.ALTER) if op not in ops]
        if lacking and not quiet:
            effect = ("if its source topic grows, its partitions cannot be added (add them beforehand)"
                      if "Alter" in lacking else "it exists, so nothing is needed unless it is deleted")
            log.info("topic creation skipped for target topic %s: %s; %s", topic,
                     lacks(cfg, "target", lacking, f"Topic '{topic}'"), effect,
                     extra={"event": "topic_creation_skipped", "topic": topic})
        lacking = [_OP_NAMES[op] for op in (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)
                   if op not in ops]
        if lacking and cfg.sync_topic_configs:
            skipped_sync.append(lacks(cfg, "target", lacking, f"Topic '{topic}'"))
    if cfg.sync_topic_configs and not skipped_sync:
        # Reading the source configs needs DescribeConfigs there (read-only).
        return cfg
    if skipped_sync:
        log.warning("topic config sync skipped: %s; target topic configs are left as they are",
                    "; ".join(skipped_sync), extra={"event": "config_sync_skipped"})
        return dataclasses.replace(cfg, sync_topic_configs=False)
    return cfg


def check_source_configs(cfg: ReplicatorConfig, source: AdminClient, selected: Iterable[str]) -> ReplicatorConfig:
    if not cfg.sync_topic_configs:
        return cfg
    lacking = sorted(t for t, ops in _topic_operations(source, selected).items()
                     if not isinstance(ops, KafkaError) and AclOperation.DESCRIBE_CONFIGS not in ops)
    if not lacking:
        return cfg
    log.warning("topic config sync skipped: %s; target topic configs are left as they are",
                lacks(cfg, "source", ["DescribeConfigs"], "Topic " + ", ".join(f"'{t}'" for t in lacking)),
                extra={"event": "config_sync_skipped"})
    return dataclasses.replace(cfg, sync_topic_configs=False)


# How long one DescribeGroups is waited for before another one is sent (the earlier stays pending).
GROUP_DESCRIBE_WAIT_S = 5.0
# librdkafka 2.16 aborts the whole process (`rd_kafka_enq_once_del_source_return: Assertion
# 'eonce->refcnt > 0'`) once an admin request to a group coordinator has timed out inside librdkafka:
# the late coordinator answer releases the request a second time. A fresh cluster creating
# __consumer_offsets under load made that routine at start-up (docs/reliability.md). So librdkafka is
# never given a timeout that can expire. A request can also stay stuck in librdkafka's coordinator
# lookup (seen on a fresh three-broker cluster: no answer in 60 s), which the old 30 s timeout used
# to end: instead, after GROUP_DESCRIBE_WAIT_S another request is sent and the first answer of any
# of them counts; the others complete (or fail) inside librdkafka later.
_NO_LIBRDKAFKA_TIMEOUT_S = 3600.0


def _describe_group(admin: AdminClient, group: str, timeout: float = 60.0):
    """DescribeGroups with its authorized operations; a coordinator still loading (a fresh cluster's
    __consumer_offsets) is waited for."""
    deadline = time.monotonic() + timeout
    pending: set[concurrent.futures.Future] = set()
    ask = True
    while True:
        if ask:
            pending.add(admin.describe_consumer_groups([group], include_authorized_operations=True,
                                                       request_timeout=_NO_LIBRDKAFKA_TIMEOUT_S)[group])
        left = deadline - time.monotonic()
        if left <= 0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"describing group {group!r}: no answer in {timeout:g}s"))
        done, pending = concurrent.futures.wait(pending, timeout=min(GROUP_DESCRIBE_WAIT_S, left),
                                                return_when=concurrent.futures.FIRST_COMPLETED)
        busy = None
        for fut in done:
            try:
                return fut.result()
            except KafkaException as e:
                if e.args[0].code() not in COORDINATOR_BUSY:
                    raise
                busy = e
        if busy is not None:
            if time.monotonic() > deadline:
                raise busy
            time.sleep(0.5)
        ask = not pending or busy is not None or not done


def check_promotion_marker(cfg: ReplicatorConfig, target: AdminClient) -> None:
    """Describe on the marker topic a switchover/failover creates: without it the job could not see
    that the target was promoted, and would copy into it again."""
    if not (cfg.translation_index and cfg.exactly_once):
        return
    topic = names.marker_topic(cfg.name)
    ops = _topic_operations(target, [topic]).get(topic)
    if isinstance(ops, KafkaError) and is_authorization_error(ops):
        raise denied(cfg, "target", "Describe", f"Topic '{topic}'",
                     "notice a switchover or failover (the job must stop copying into a promoted target)")


def check_promotion_write(cfg: ReplicatorConfig, target: AdminClient) -> None:
    """Create and Write on the marker topic, asked before `switchover`/`failover` fence or write
    anything: refused half-way, a promotion would leave the job fenced with no marker. Write can
    only be asked of an existing topic, so the topic is created here, empty (an empty marker topic
    is not a promotion, see `promotion.promoted`)."""
    topic = names.marker_topic(cfg.name)
    purpose = "write the promotion marker (switchover, failover)"
    ops = _topic_operations(target, [topic]).get(topic)
    deadline = time.monotonic() + 30
    while isinstance(ops, KafkaError):
        if is_authorization_error(ops):
            raise denied(cfg, "target", "Describe", f"Topic '{topic}'", purpose)
        try:
            create_marker_topic(cfg, target)
        except KafkaException as e:
            if is_authorization_error(e.args[0]):
                raise denied(cfg, "target", "Create", f"Topic '{topic}'", purpose) from None
            raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"the promotion marker topic {topic!r} did not appear within 30 s")
        time.sleep(0.5)  # the new topic reaches every broker's metadata shortly
        ops = _topic_operations(target, [topic]).get(topic)
    if AclOperation.WRITE not in ops:
        raise denied(cfg, "target", "Write", f"Topic '{topic}'", purpose)


def check_source_group(cfg: ReplicatorConfig, source: AdminClient) -> None:
    """Describe on the source consumer's group.id: librdkafka looks up its coordinator."""
    group = names.source_reader_group(cfg.name)
    try:
        _describe_group(source, group)
    except KafkaException as e:
        if is_authorization_error(e.args[0]):
            raise denied(cfg, "source", "Describe", f"Group '{group}'",
                         "read (librdkafka looks up the coordinator of the consumer's group; nothing is "
                         "committed there)") from None
        raise


def check_group(cfg: ReplicatorConfig, target: AdminClient) -> None:
    """Read on the offsets group (commit into it, read it back)."""
    try:
        ops = _describe_group(target, cfg.group).authorized_operations
        ops = _ALL if ops is None else set(ops)
    except KafkaException as e:
        if is_authorization_error(e.args[0]):
            raise denied(cfg, "target", "Read", f"Group '{cfg.group}'", "keep the copied offsets in it") from None
        raise
    if AclOperation.READ not in ops:
        raise denied(cfg, "target", "Read", f"Group '{cfg.group}'", "commit the copied offsets into it")


def creation_denied(cfg: ReplicatorConfig, topic: str, grow: bool) -> PermissionDenied:
    if grow:
        return denied(cfg, "target", "Alter", f"Topic '{topic}'",
                      "add the partitions its source topic has (or add them beforehand)")
    return denied(cfg, "target", "Create", f"Topic '{topic}'",
                  "create it: it does not exist on the target (or create it beforehand)")


def transactional_id_denied(cfg: ReplicatorConfig, transactional_id: str) -> PermissionDenied:
    prefix = names.transactional_id_prefix(cfg.name)
    return denied(cfg, "target", "Write", f"TransactionalId '{transactional_id}' (prefix '{prefix}')",
                  "write exactly once")


def check_group_sync(cfg: ReplicatorConfig, source: AdminClient, target: AdminClient) -> bool:
    """Whether group sync may run: every ACL of its set (`replicator acls`, feature "group sync") is
    granted. Missing ones switch the feature off, said once, each named with principal, operation and
    resource. When nothing else is missing, the checkpoints topic is created here if absent (the
    feature's first step): Write and Read on a topic can only be asked once it exists."""
    missing: list[str] = []
    translator = names.translator_group(cfg.name)
    for role, admin, op in (("source", source, AclOperation.DESCRIBE), ("target", target, AclOperation.READ)):
        for pattern, name in topic_patterns(cfg.groups):
            # Any group name the pattern covers asks the same question; `*` covers them all.
            probe = f"{cfg.name}.group-sync-probe" if name == "*" else name
            if op not in _group_operations(admin, probe):
                kind = " (prefixed)" if pattern == "PREFIXED" else ""
                missing.append(lacks(cfg, role, [_OP_NAMES[op]], f"Group '{name}'{kind}"))
        if AclOperation.DESCRIBE not in _group_operations(admin, translator):
            missing.append(lacks(cfg, role, ["Describe"], f"Group '{translator}'"))
    index = names.index_topic(cfg.name)
    ops = _topic_operations(target, [index])[index]
    if (isinstance(ops, KafkaError) and is_authorization_error(ops)) or (isinstance(ops, set)
                                                                         and AclOperation.READ not in ops):
        missing.append(lacks(cfg, "target", ["Read"], f"Topic '{index}'"))
    # The job's own checkpoints are written and read back; MirrorMaker 2's are only written.
    own, *mm2 = checkpoint_topics(cfg)
    wanted = {own: ("Write", "Read"), **{t: ("Write",) for t in mm2}}
    found = _topic_operations(target, wanted)
    absent = [t for t, o in found.items() if isinstance(o, KafkaError) and not is_authorization_error(o)]
    missing += [lacks(cfg, "target", ["Create"], f"Topic '{t}'") for t in absent if not _may_create(cfg, target, t)]
    if not missing and absent:
        ensure_checkpoint_topics(cfg, target)
        found = _topic_operations(target, wanted)
    if not missing:
        for topic, needed in wanted.items():
            have = found[topic] if isinstance(found[topic], set) else set()
            if lacking := [n for n in needed if _OPS[n] not in have]:
                missing.append(lacks(cfg, "target", lacking, f"Topic '{topic}'"))
    if missing:
        log.warning("group sync skipped: %s; consumer group offsets are neither checkpointed nor synced to the "
                    "target (see `replicator acls --config ...`)", "; ".join(missing),
                    extra={"event": "group_sync_skipped"})
    return not missing


def _group_operations(admin: AdminClient, group: str) -> set:
    try:
        ops = _describe_group(admin, group).authorized_operations
    except KafkaException as e:
        if is_authorization_error(e.args[0]):
            return set()
        raise
    return _ALL if ops is None else set(ops)


def _may_create(cfg: ReplicatorConfig, target: AdminClient, topic: str) -> bool:
    """Create asked without creating (validate_only); errors other than authorization are the
    creation's own to report."""
    fut = target.create_topics([NewTopic(topic, 1, cfg.replication_factor)], validate_only=True,
                               request_timeout=30)[topic]
    try:
        fut.result()
    except KafkaException as e:
        return not is_authorization_error(e.args[0])
    return True
