"""Application ACLs follow the replication (MirrorMaker 2's `sync.topic.acls.enabled`, stricter):
consumers' READ/DESCRIBE rules reach the replicas continuously, producers' WRITE rules only at
promotion; only what the sync created is ever deleted (`acl_state` says how it knows).

The job's own source principal's rules are the replicator's grant, not an application's: they are
neither copied nor applied at promotion (a reverse job would otherwise give the forward job's target
principal WRITE on the old source). It is the principal `replicator acls` names for the source: the
SASL user, or the client certificate's subject and its CN (what `ssl.principal.mapping.rules` usually
shorten it to); a principal mapped otherwise is not recognised, and its rules are treated as an
application's.

On by default (`sync_acls`) where the principals may: Describe on the source cluster (DescribeAcls),
Alter on the target cluster (CreateAcls/DeleteAcls; implies the Describe that DescribeAcls needs),
and the state topic. Without any of them the feature is off, said in one line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from replicator import names
from replicator.access import acl_translate, permissions
from replicator.access.acl_metrics import AclSyncMetrics
from replicator.access.acl_state import COPY, PROMOTED, STAGED, AclState, ensure_topic, exists
from replicator.access.acl_translate import CLUSTER, Binding
from replicator.access.acls import principal_of
from replicator.config import ReplicatorConfig
from replicator.group_filter import GroupFilter
from replicator.replication_policy import policy_for

log = logging.getLogger("replicator.acl_sync")
NO_AUTHORIZER = "has no authorizer"  # every principal may do anything there: no ACL to copy or to need
_EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)
# Matches nothing real: asked only to learn whether the cluster has an authorizer at all.
_NO_ACL = AclBindingFilter(ResourceType.TOPIC, f"{names.INTERNAL_PREFIX}acl-probe", ResourcePatternType.LITERAL, None,
                           None, AclOperation.ANY, AclPermissionType.ANY)


@dataclass
class Plan:
    """One round's changes on the target."""

    create: set[Binding] = field(default_factory=set)  # copies to create (ours, or ours again)
    delete: set[Binding] = field(default_factory=set)  # copies (or promoted rules) the sync made, now unwanted
    stage: set[Binding] = field(default_factory=set)  # promotion rules to record (never applied here)
    unstage: set[Binding] = field(default_factory=set)

    def to_dict(self) -> dict[str, list[str]]:
        return {k: [b.describe() for b in sorted(getattr(self, k))] for k in ("create", "delete", "stage", "unstage")}


def own_principals(cfg: ReplicatorConfig) -> set[str]:
    """The forms of the principal the job reads the source as (module docstring)."""
    principal = principal_of(cfg.client_properties("source"))
    if principal is None or "=" not in principal:  # unknown, or a SASL user
        return {principal} if principal else set()
    # A certificate's subject (`User:CN=app,O=org`): also its CN alone.
    return {principal} | {f"User:{part[3:]}" for part in principal.removeprefix("User:").split(",")
                          if part.startswith("CN=")}


def describe_acls(admin: AdminClient) -> set[Binding]:
    return {Binding.of(b) for b in admin.describe_acls(_EVERY_ACL, request_timeout=30).result()}


def missing_permissions(cfg: ReplicatorConfig, source: AdminClient | None, target: AdminClient,
                        create: bool = True) -> list[str]:
    """What the principals lack for ACL sync, each said as the other degraded features say it; []
    when it may run (the state topic then exists, unless not `create`: a dry run writes nothing).
    `source` None: the source is gone (failover)."""
    missing = []
    for role, admin, op, name in (("source", source, AclOperation.DESCRIBE, "Describe"),
                                  ("target", target, AclOperation.ALTER, "Alter")):
        if admin is None:
            continue
        try:
            admin.describe_acls(_NO_ACL, request_timeout=30).result()
        except KafkaException as e:
            if e.args[0].code() == KafkaError.SECURITY_DISABLED:  # nothing to copy from, or nothing needed on
                return [f"the {role} cluster {NO_AUTHORIZER}"]
            if not permissions.is_authorization_error(e.args[0]):
                raise
        # Not authorized to describe the cluster: its operations are not said (None), so none are allowed.
        ops = admin.describe_cluster(include_authorized_operations=True, request_timeout=30).result() \
            .authorized_operations or ()
        if op not in ops:
            missing.append(permissions.lacks(cfg, role, [name], f"Cluster '{CLUSTER}'"))
    if missing:
        return missing
    topic = names.acl_state_topic(cfg.name)
    if not create and not exists(target, topic):
        return []  # nothing was ever recorded: nothing to show either
    try:
        ensure_topic(cfg, target)
    except KafkaException as e:
        if not permissions.is_authorization_error(e.args[0]):
            raise
        return [permissions.lacks(cfg, "target", ["Create"], f"Topic '{topic}'")]
    deadline = time.monotonic() + 30
    while True:
        try:
            ops = target.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                         request_timeout=30)[topic].result().authorized_operations
            break
        except KafkaException as e:
            if permissions.is_authorization_error(e.args[0]):
                ops = []
                break
            # Just created: not yet in the metadata of the broker asked.
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    lacking = [n for op, n in ((AclOperation.WRITE, "Write"), (AclOperation.READ, "Read"))
               if ops is not None and op not in ops]
    return [permissions.lacks(cfg, "target", lacking, f"Topic '{topic}'")] if lacking else []


def _unsecured(missing: list[str]) -> bool:
    return any(NO_AUTHORIZER in m for m in missing)


def skipped(cfg: ReplicatorConfig, missing: list[str]) -> str:
    return (f"ACL sync skipped: {'; '.join(missing)}; application ACLs are not copied to the target "
            f"(see `replicator acls --config ...`)")


class AclSync:
    """Rounds of ACL sync for one job (the target's state loaded once; this job is its only writer)."""

    def __init__(self, cfg: ReplicatorConfig, metrics: AclSyncMetrics | None = None, replica: bool = True) -> None:
        self.cfg = cfg
        # The job runs only while the target is a replica: promotion rules left there (a promotion
        # undone by deleting its marker) are withdrawn. Promotion itself keeps them.
        self.replica = replica
        self.rename = policy_for(cfg).target_topic
        self.metrics = metrics
        self.state = AclState(cfg)
        self.own = own_principals(cfg)
        self._loaded = False
        self._groups = None
        if cfg.translation_index and cfg.exactly_once:  # group sync exists only then
            self._groups = GroupFilter(cfg.groups, cfg.groups_exclude)

    def _state(self) -> AclState:
        if not self._loaded:
            self.state.load()
            self._loaded = True
        return self.state

    def wanted(self, source: AdminClient, topics: dict[str, str]) -> tuple[set[Binding], set[Binding]]:
        """The copies the target should hold now, and the rules promotion would apply."""
        rules = {b for b in describe_acls(source) if b.principal not in self.own}
        groups: list[str] = []
        accepts = self._groups.accepts if self._groups is not None else (lambda _g: False)
        if self._groups is not None and acl_translate.needs_groups(rules):
            groups = [g.group_id for g in source.list_consumer_groups(request_timeout=30).result().valid]
        return (acl_translate.copies(rules, topics, self.rename, groups, accepts),
                acl_translate.promotion_writes(rules, topics, self.rename))

    def plan(self, source: AdminClient, target: AdminClient, topics: dict[str, str]) -> Plan:
        want, staged = self.wanted(source, topics)
        state, present = self._state(), describe_acls(target)
        ours = state.entries[COPY]
        return Plan(create=want - present,
                    delete=(ours - want) | (state.entries[PROMOTED] if self.replica else set()),
                    stage=staged - state.entries[STAGED], unstage=state.entries[STAGED] - staged)

    def apply(self, target: AdminClient, plan: Plan) -> None:
        state = self._state()
        state.record(COPY, plan.create - state.entries[COPY])  # before the ACL: a crash never orphans one
        create(target, plan.create)
        if plan.delete:
            delete(target, plan.delete)
            state.forget(COPY, plan.delete & state.entries[COPY])
            state.forget(PROMOTED, plan.delete & state.entries[PROMOTED])
        state.record(STAGED, plan.stage)
        state.forget(STAGED, plan.unstage)
        for b in sorted(plan.create):
            log.info("ACL copied to the target: %s", b.describe(), extra={"event": "acl_created"})
        for b in sorted(plan.delete):
            log.info("ACL removed from the target (its source rule is gone): %s", b.describe(),
                     extra={"event": "acl_deleted"})

    def run_once(self, source: AdminClient, target: AdminClient, topics: dict[str, str]) -> Plan:
        plan = self.plan(source, target, topics)
        self.apply(target, plan)
        if self.metrics is not None:
            self.metrics.on_round(plan, self.state.entries)
        return plan

    def promotion(self, source: AdminClient | None, target: AdminClient, topics: dict[str, str]) -> set[Binding]:
        """The producers' rules the promoted target lacks: from the live source when it answers
        (switchover), else as the periodic sync staged them (failover)."""
        staged = self.wanted(source, topics)[1] if source is not None else self._state().entries[STAGED]
        return staged - describe_acls(target)

    def promote(self, target: AdminClient, writes: set[Binding]) -> None:
        state = self._state()
        state.record(PROMOTED, writes - state.entries[PROMOTED])
        create(target, writes)
        for b in sorted(writes):
            log.info("ACL applied at promotion: %s", b.describe(), extra={"event": "acl_promoted"})

    def close(self) -> None:
        self.state.close()


def create(target: AdminClient, bindings: set[Binding]) -> None:
    if not bindings:
        return
    futures = target.create_acls([b.to_kafka() for b in sorted(bindings)], request_timeout=30)
    for fut in futures.values():
        fut.result()


def delete(target: AdminClient, bindings: set[Binding]) -> None:
    for fut in target.delete_acls([_exact(b) for b in sorted(bindings)], request_timeout=30).values():
        fut.result()


def _exact(b: Binding) -> AclBindingFilter:
    k = b.to_kafka()
    return AclBindingFilter(k.restype, k.name, k.resource_pattern_type, k.principal, k.host, k.operation,
                            k.permission_type)


class AclSyncObserver:
    """The job's periodic ACL sync (a `JobObserver`): enabled at the query's start if the principals
    may, then one round with each topic discovery (`on_topics`, from the driver's watch loop), so a
    new topic's consumers are allowed on its replica as soon as it exists."""

    def __init__(self, cfg: ReplicatorConfig, registry=None) -> None:
        self.cfg = cfg
        self.metrics = AclSyncMetrics(registry) if registry is not None else None
        self.sync: AclSync | None = None
        self.decided = False  # whether the principals may: asked until a cluster answered

    def on_start(self, job) -> None:
        from replicator.clients import kafka_clients

        self._decide(kafka_clients.source_admin(self.cfg), kafka_clients.target_admin(self.cfg))

    def _decide(self, source: AdminClient, target: AdminClient) -> None:
        try:
            missing = missing_permissions(self.cfg, source, target)
        except KafkaException as e:
            log.warning("ACL sync not started yet: %s; asking again at the next topic discovery",
                        e.args[0].str(), extra={"event": "acl_sync_failed"})
            return
        self.decided = True
        if missing:
            level = logging.INFO if _unsecured(missing) else logging.WARNING
            log.log(level, "%s", skipped(self.cfg, missing), extra={"event": "acl_sync_skipped"})
            return
        self.sync = AclSync(self.cfg, self.metrics)
        if self.metrics is not None:
            self.metrics.enabled.set(1)

    def on_topics(self, source: AdminClient, target: AdminClient, mappings: list) -> None:
        if not self.decided:
            self._decide(source, target)
        if self.sync is None:
            return
        try:
            self.sync.run_once(source, target, {m.source: m.target for m in mappings})
        except (KafkaException, RuntimeError) as e:  # retried at the next discovery; records keep flowing
            if self.metrics is not None:
                self.metrics.failures.inc()
            err = e.args[0] if isinstance(e, KafkaException) and e.args else None
            log.warning("ACL sync failed: %s", err.str() if isinstance(err, KafkaError) else e,
                        extra={"event": "acl_sync_failed"})

    def on_batch(self, stats: dict) -> None:
        pass

    def on_lag(self, lags: list) -> None:
        pass

    def on_stop(self) -> None:
        if self.sync is not None:
            self.sync.close()


def promotion_step(cfg: ReplicatorConfig, topics: dict[str, str], live_source: bool,
                   dry_run: bool = False) -> tuple[dict, list[str]]:
    """`switchover`/`failover`'s ACL step, after the target is fenced and marked (or, dry, instead):
    a last round of copies when the source answers, then the producers' rules. Never fails the
    promotion it is part of: a refusal is reported, as a skipped feature is."""
    from replicator.clients import kafka_clients

    if not cfg.sync_acls:
        return {"skipped": "sync_acls is off"}, []
    target = kafka_clients.target_admin(cfg)
    source = kafka_clients.source_admin(cfg) if live_source else None
    sync = AclSync(cfg, replica=False)
    try:
        if missing := missing_permissions(cfg, source, target, create=not dry_run):
            return {"skipped": skipped(cfg, missing)}, [] if _unsecured(missing) else [skipped(cfg, missing)]
        copied = set()
        if source is not None and not dry_run:
            copied = sync.run_once(source, target, topics).create
        writes = sync.promotion(source, target, topics)
        if not dry_run:
            sync.promote(target, writes)
    except (KafkaException, RuntimeError) as e:
        err = e.args[0] if isinstance(e, KafkaException) and e.args else None
        text = f"ACL step failed: {err.str() if isinstance(err, KafkaError) else e}; grant producers WRITE by hand"
        return {"error": text}, [f"warning: {text}"]
    finally:
        sync.close()
    verb = "would apply" if dry_run else "applied"
    return ({"copied": [b.describe() for b in sorted(copied)], "promotion": [b.describe() for b in sorted(writes)]},
            [f"ACL {verb} at promotion: {b.describe()}" for b in sorted(writes)]
            or [f"ACLs: no producer rule to {'apply' if dry_run else 'add'} on the target"])


def failback_step(cfg: ReplicatorConfig, topics: dict[str, str], dry_run: bool = False) -> tuple[dict, list[str]]:
    """`failback`'s ACL step for the reverse job (source: the new primary, target: the old one): its
    first round, so the old primary's consumers hold the new primary's READ rules before the reverse
    job runs, and the new primary's producer rules are staged for the reverse job's promotion
    (`switchover`/`failover` with its configuration), which applies them: the old primary is a
    replica until then, so no WRITE is copied onto it. `dry_run`: the round planned, nothing written."""
    from replicator.clients import kafka_clients

    if not cfg.sync_acls:
        return {"skipped": "sync_acls is off"}, []
    target, source = kafka_clients.target_admin(cfg), kafka_clients.source_admin(cfg)
    sync = AclSync(cfg)
    try:
        if missing := missing_permissions(cfg, source, target, create=not dry_run):
            return {"skipped": skipped(cfg, missing)}, [] if _unsecured(missing) else [skipped(cfg, missing)]
        plan = sync.plan(source, target, topics) if dry_run else sync.run_once(source, target, topics)
    except (KafkaException, RuntimeError) as e:
        err = e.args[0] if isinstance(e, KafkaException) and e.args else None
        text = f"ACL step failed: {err.str() if isinstance(err, KafkaError) else e}"
        return {"error": text}, [f"warning: {text}"]
    finally:
        sync.close()
    copy, stage = ("would be copied", "would be staged") if dry_run else ("copied", "staged")
    return plan.to_dict(), [*(f"ACL {copy} for the reverse job: {b.describe()}" for b in sorted(plan.create)),
                            *(f"ACL {stage} for the reverse job's promotion: {b.describe()}"
                              for b in sorted(plan.stage))]
