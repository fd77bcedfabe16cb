"""Group checkpointing and sync (MirrorMaker 2's checkpoint connector, exact).

Every `group_sync_interval_seconds`: the committed offsets of the selected source groups are read,
translated exactly (`translate.Translator`), checkpointed on the target (`checkpoints`), and, with
`sync_group_offsets`, committed into the same-named target groups under these rules:
- only through the admin API's offset commit, which the group coordinator refuses while the group
  has members (a transactional commit would be accepted on an active group);
- only while every partition of the target group holds nothing or exactly what we wrote last;
  anything else means a consumer ran on the target: the group is marked taken over (persisted),
  logged, counted, and never written again;
- T comes from committed index entries, so it never points past committed target data; a source
  group reset backwards is followed (translation is exact, no forward-only rule); no leader epoch
  is sent (target epochs are unrelated to the source's); the group's metadata string is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from replicator.access import permissions
from replicator.clients import kafka_clients, kafka_python_clients
from replicator.clients.client_errors import is_authorization_error
from replicator.config import ReplicatorConfig
from replicator.group_filter import INTERNAL_GROUPS, GroupFilter  # noqa: F401 (re-exported)
from replicator.groups.back_translate import BackTranslator
from replicator.groups.checkpoints import Checkpoint, CheckpointStore, GroupState
from replicator.groups.translate import Translation, Translator
from replicator.internal_topics import ensure_checkpoint_topics
from replicator.offsets import read_committed
from replicator.replication_policy import policy_for
from replicator.topics import sync as topic_sync

log = logging.getLogger(__name__)
NO_OFFSET = -1001


@dataclass
class PartitionStatus:
    topic: str
    partition: int
    target_topic: str
    source_offset: int
    target_offset: int | None
    exact: bool
    ahead: int
    method: str
    reason: str = ""
    target_committed: int | None = None
    checkpoint_age_seconds: float = 0.0


@dataclass
class GroupStatus:
    group: str
    state: str  # synced | taken-over | active-on-target | checkpointed | untranslatable
    partitions: list[PartitionStatus] = field(default_factory=list)
    reason: str = ""

    @property
    def ahead(self) -> int:
        return sum(p.ahead for p in self.partitions)

    def to_dict(self) -> dict:
        return {"group": self.group, "state": self.state, "reason": self.reason, "ahead": self.ahead,
                "partitions": [p.__dict__ for p in self.partitions]}


# Group offsets are read and written through a member-less Consumer of the group, never through the
# AdminClient's group calls: in librdkafka 2.16 ListConsumerGroupOffsets dereferences a missing group
# handle on NOT_COORDINATOR or an unknown group (librdkafka #5040, confluent-kafka-python #1982) and
# coordinator admin requests can abort on a dropped connection (librdkafka #5397): either kills the
# job's driver. The commit is the same non-transactional OffsetCommit (generation -1, no member id)
# the admin API sends, which the coordinator refuses while the group has members.
def group_offsets(props: dict, bootstrap: str, group: str, tps: list[tuple[str, int]]
                  ) -> dict[tuple[str, int], tuple[int, str]]:
    """(topic, partition) -> (committed offset, metadata) of `group`, stable offsets only."""
    if not tps:
        return {}
    client = kafka_clients.group_handle(props, bootstrap, group)
    try:
        result = client.committed([TopicPartition(t, p) for t, p in tps], timeout=30)
    finally:
        client.close()
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in result
            if tp.error is None and tp.offset >= 0}


def commit_group(props: dict, bootstrap: str, group: str, offsets: dict[tuple[str, int], tuple[int, str]]
                 ) -> str | None:
    """Commits as the admin API does (refused while the group has members). None when accepted,
    else why not."""
    client = kafka_clients.group_handle(props, bootstrap, group)
    tps = [TopicPartition(t, p, o, metadata=m) if m else TopicPartition(t, p, o)
           for (t, p), (o, m) in sorted(offsets.items())]
    try:
        result = client.commit(offsets=tps, asynchronous=False)
    except KafkaException as e:
        return e.args[0].str()
    finally:
        client.close()
    errors = [f"{tp.topic}[{tp.partition}]: {tp.error.str()}" for tp in result or [] if tp.error]
    return "; ".join(errors) or None


class GroupSync:
    """One sync round at a time (`run_once`), or a background thread (`start`/`stop`)."""

    def __init__(self, cfg: ReplicatorConfig, metrics=None, dry_run: bool = False,
                 source_reachable: bool = True) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.dry_run = dry_run  # nothing written: not the checkpoints, not the target groups
        self.filter = GroupFilter(cfg.groups, cfg.groups_exclude)
        self.policy = policy_for(cfg)
        self.source = kafka_clients.source_admin(cfg) if source_reachable else None
        self.target = kafka_clients.target_admin(cfg)
        if not dry_run:
            ensure_checkpoint_topics(cfg, self.target)
        self.store = CheckpointStore(cfg, read_only=dry_run).load()
        self.translator = Translator(cfg, source_reachable)
        if self.store.forward_job and self.translator.source is not None:
            self.translator.back = BackTranslator(cfg, self.store.forward_job, self.translator.source)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: list[GroupStatus] = []
        self._selected: dict[str, int] | None = None
        self._selected_until = 0.0
        self._offsets_admin = None  # kafka-python, for the source groups' committed offsets

    # -- one round ----------------------------------------------------------------------------------
    def run_once(self) -> list[GroupStatus]:
        groups = sorted(g.group_id for g in self.source.list_consumer_groups(request_timeout=30).result().valid
                        if self.filter.accepts(g.group_id) and g.group_id != self.cfg.group)
        selected = self._selection() if groups else {}
        positions: dict[tuple[str, int], int | None] = {}  # per source partition: N, read once a round
        out, failed = [], set()
        for group in groups:
            try:
                status = self._sync_group(group, selected, positions)
                if status.partitions:  # groups that consume none of the replicated topics are not listed
                    out.append(status)
            except (KafkaException, RuntimeError) as e:
                failed.add(group)
                err = e.args[0].str() if isinstance(e, KafkaException) else str(e)
                log.warning("group %s: sync round failed (retried next round): %s", group, err,
                            extra={"event": "group_sync_failed", "group": group})
        self.store.flush()
        self.last = out
        if self.metrics is not None:
            self.metrics.on_groups(out, failed)
        return out

    def _selection(self) -> dict[str, int]:
        """The replicated source topics, read again at most every `refresh_topics_interval_seconds`
        (the job's own topic discovery interval: a topic joins the copy no sooner): a sync round
        every few seconds reading the source's full metadata cost an idle driver more at 5,000
        partitions than the round itself."""
        now = time.monotonic()
        if self._selected is None or now >= self._selected_until:
            self._selected, _ = topic_sync.selection(self.cfg, self.source)
            self._selected_until = now + self.cfg.refresh_topics_interval_seconds
        return self._selected

    def _source_offsets(self, group: str, selected: dict[str, int]) -> dict[tuple[str, int], tuple[int, str]]:
        """(topic, partition) -> (committed offset, metadata) of `group` on the replicated topics.

        The group is asked for what it committed, not for every replicated partition: asking each
        group for all 5,000 partitions of a large job cost an idle driver over a third of a core with
        34 source groups (py-spy, BENCHMARKS.md), and grew with groups x partitions. An offset inside
        an open transaction of the application is not returned until it commits (no require_stable:
        the last stable one is), which a sync round every few seconds then picks up."""
        try:
            if self._offsets_admin is None:  # a source unreachable now fails this round, not the thread
                self._offsets_admin = kafka_python_clients.admin_client(self.cfg.client_properties("source"),
                                                                        self.cfg.source_bootstrap_servers)
            answer = self._offsets_admin.list_group_offsets({group: None}).get(group, {})
        except Exception as e:  # noqa: BLE001 - kafka-python's errors: this group's round fails, the next retries
            # kafka-python 3.0 caches a group's coordinator and never forgets it: once the coordinator
            # moved, every later round asked the old broker and failed NOT_COORDINATOR (3.5 min of a
            # chaos run's source restarts, until the job stopped). A new client looks it up again.
            self._close_offsets_admin()
            raise RuntimeError(f"reading its committed offsets on the source: {type(e).__name__}: {e}") from None
        # Metadata up to a NUL, as librdkafka reads it (and writes it back): confluent-kafka commits
        # a C string's terminator with the metadata, which the committing client never sees.
        return {(tp.topic, tp.partition): (o.offset, (o.metadata or "").split("\x00", 1)[0])
                for tp, o in answer.items() if o.offset >= 0 and tp.partition < selected.get(tp.topic, 0)}

    def _sync_group(self, group: str, selected: dict[str, int], positions: dict) -> GroupStatus:
        committed = self._source_offsets(group, selected)
        status = GroupStatus(group, "checkpointed")
        if not committed:
            status.reason = "no committed offset on a replicated topic"
            return status
        now = time.time()
        for (topic, p), (x, meta) in sorted(committed.items()):
            target_topic = self.policy.target_topic(topic)
            if (topic, p) not in positions:
                c = read_committed(self.translator.group, [(target_topic, p)]).get((target_topic, p))
                positions[(topic, p)] = c.offset if c is not None and c.offset >= 0 else None
            tr: Translation = self.translator.translate(topic, p, x, positions[(topic, p)])
            if tr.target_offset is None and self.metrics is not None:
                self.metrics.translation_failures.inc()
            prev = self.store.checkpoints.get((group, topic, p))
            cp = Checkpoint(x, tr.target_offset, tr.exact, tr.ahead, tr.method, meta,
                            prev.w if prev else -1, prev.p if prev else -1, now)
            if prev is None or (prev.x, prev.t, prev.ahead, prev.meta) != (cp.x, cp.t, cp.ahead, cp.meta):
                self.store.put(group, topic, p, cp, target_topic)
            else:
                prev.at = now  # unchanged: the record stays, its age in memory is refreshed
            status.partitions.append(PartitionStatus(topic, p, target_topic, x, tr.target_offset, tr.exact,
                                                     tr.ahead, tr.method, tr.reason))
        if not self.cfg.sync_group_offsets:
            return status
        return self._write_target(group, status)

    def _write_target(self, group: str, status: GroupStatus) -> GroupStatus:
        state = self.store.groups.get(group)
        if state is not None and state.taken_over:
            status.state, status.reason = "taken-over", state.reason
            return status
        target_tps = [(s.target_topic, s.partition) for s in status.partitions]
        current = group_offsets(self.cfg.client_properties("target"), self.cfg.target_bootstrap_servers, group,
                                target_tps)
        for s in status.partitions:
            s.target_committed = current[(s.target_topic, s.partition)][0] if (s.target_topic, s.partition) \
                in current else None
        # Ownership: every partition holds nothing or a value we wrote; otherwise a consumer ran here.
        def foreign() -> list[PartitionStatus]:
            return [s for s in status.partitions if s.target_committed is not None
                    and s.target_committed not in self.store.owned(group, s.topic, s.partition)]
        if foreign() and not self.dry_run:
            # Another process of this job (the running job's sync, a switchover) may have written it:
            # what it wrote is recorded in the checkpoints topic before the write.
            self.store.flush()
            self.store.load()
            state = self.store.groups.get(group)
            if state is not None and state.taken_over:
                status.state, status.reason = "taken-over", state.reason
                return status
        for s in foreign()[:1]:
            owned = self.store.owned(group, s.topic, s.partition)
            reason = (f"{s.target_topic}[{s.partition}] is at {s.target_committed} on the target, not a value "
                      f"the replicator wrote ({sorted(owned) or 'none'}): a consumer used the group there")
            self.store.put_group(group, GroupState(True, time.time(), reason))
            self.store.flush()
            log.warning("group %s taken over on the target, no longer synced: %s", group, reason,
                        extra={"event": "group_taken_over", "group": group})
            status.state, status.reason = "taken-over", reason
            return status
        # The target holds values this job wrote (maybe another process of it): record them as ours,
        # so the latest checkpoint record always names what the target holds.
        for s in status.partitions:
            cp = self.store.checkpoints[(group, s.topic, s.partition)]
            if s.target_committed is not None and cp.w != s.target_committed:
                cp.w = s.target_committed
                self.store.put(group, s.topic, s.partition, cp, s.target_topic)
        if self.dry_run:
            pending = [s for s in status.partitions if s.target_offset is not None
                       and s.target_offset != s.target_committed]
            status.state = "would-sync" if pending else "synced"
            return status
        wanted = {(s.target_topic, s.partition): (s.target_offset, self.store.checkpoints[
            (group, s.topic, s.partition)].meta) for s in status.partitions
            if s.target_offset is not None and s.target_offset != s.target_committed}
        if not wanted:
            status.state = "synced" if all(s.target_offset is not None for s in status.partitions) \
                else "untranslatable"
            return status
        by_target = {(s.target_topic, s.partition): s for s in status.partitions}
        # Recorded before the write: if we die between the two, the value we may have written is ours.
        for tp, (t, _) in wanted.items():
            s = by_target[tp]
            cp = self.store.checkpoints[(group, s.topic, s.partition)]
            cp.p = t
            self.store.put(group, s.topic, s.partition, cp, s.target_topic)
        self.store.flush()
        refused = commit_group(self.cfg.client_properties("target"), self.cfg.target_bootstrap_servers, group, wanted)
        for tp, (t, _) in wanted.items():
            s = by_target[tp]
            cp = self.store.checkpoints[(group, s.topic, s.partition)]
            if refused is None:
                cp.w, s.target_committed = t, t
            cp.p = -1
            self.store.put(group, s.topic, s.partition, cp, s.target_topic)
        self.store.flush()
        if refused is not None:
            log.info("group %s not written on the target (it has members there): %s", group, refused,
                     extra={"event": "group_active_on_target", "group": group})
            status.state, status.reason = "active-on-target", refused
            return status
        status.state = "synced" if all(s.target_offset is not None for s in status.partitions) else "untranslatable"
        return status

    # -- from the checkpoints alone (the source is gone) ------------------------------------------------
    def from_checkpoints(self, sync: bool) -> list[GroupStatus]:
        """Every checkpointed group, its positions translated again with what is replicated now
        (target only: a checkpoint ahead of the replica may have been caught up since), and, with
        `sync`, written into the target groups under the same rules as the running sync."""
        by_group: dict[str, list] = {}
        for (group, topic, p), cp in sorted(self.store.checkpoints.items()):
            if self.filter.accepts(group):
                by_group.setdefault(group, []).append((topic, p, cp))
        now, out = time.time(), []
        for group, parts in sorted(by_group.items()):
            status = GroupStatus(group, "checkpointed")
            for topic, p, cp in parts:
                tr = self.translator.translate(topic, p, cp.x)
                status.partitions.append(PartitionStatus(topic, p, tr.target_topic, cp.x, tr.target_offset, tr.exact,
                                                         tr.ahead, tr.method, tr.reason,
                                                         checkpoint_age_seconds=round(now - cp.at, 1)))
                if tr.target_offset is not None and tr.target_offset != cp.t:
                    cp.t = tr.target_offset
            if sync:
                status = self._write_target(group, status)
            else:
                state = self.store.groups.get(group)
                if state is not None and state.taken_over:
                    status.state, status.reason = "taken-over", state.reason
            out.append(status)
        self.store.flush()
        return out

    # -- background ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="group-sync", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                groups = self.run_once()
                log.debug("group sync: %d groups", len(groups))
            except (KafkaException, RuntimeError) as e:
                log.warning("group sync round failed (retried next round): %s", e)
            self._stop.wait(self.cfg.group_sync_interval_seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        self.store.close()
        self.translator.close()
        self._close_offsets_admin()

    def _close_offsets_admin(self) -> None:
        admin, self._offsets_admin = self._offsets_admin, None
        kafka_python_clients.close_quietly(admin)


class GroupSyncObserver:
    """Runs the group sync next to the streaming query (a `JobObserver`)."""

    def __init__(self, cfg: ReplicatorConfig, metrics=None) -> None:
        self.cfg, self.metrics, self.sync = cfg, metrics, None

    def on_start(self, job) -> None:
        try:
            # Its ACLs are optional: without them the feature is skipped, and said so, by name.
            if not permissions.check_group_sync(self.cfg, kafka_clients.source_admin(self.cfg),
                                                kafka_clients.target_admin(self.cfg)):
                return
            self.sync = GroupSync(self.cfg, self.metrics)
            self.sync.start()
        except (KafkaException, RuntimeError) as e:
            err = e.args[0] if isinstance(e, KafkaException) and e.args else None
            refused = f" ({permissions.who(self.cfg, 'target')} / {permissions.who(self.cfg, 'source')} was " \
                      f"refused)" if isinstance(err, KafkaError) and is_authorization_error(err) else ""
            log.error("group sync not started%s: %s", refused, err.str() if isinstance(err, KafkaError) else e,
                      extra={"event": "group_sync_failed"})

    def on_batch(self, stats: dict) -> None:
        pass

    def on_lag(self, lags: list) -> None:
        pass

    def on_stop(self) -> None:
        if self.sync is not None:
            self.sync.stop()
