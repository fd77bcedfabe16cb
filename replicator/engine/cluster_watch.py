"""What the driver checks while the query runs, every refresh_topics_interval_seconds: that both
clusters are still the ones pinned at start, that the target was not promoted, the source's topics
(new, deleted, grown) with the target's following, topic config drift, and the pin kept fresh.

It owns the current topic mappings: the lag lookup and the ACL sync read them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from replicator.config import ReplicatorConfig
from replicator.engine import cluster_identity
from replicator.engine.preflight import pin_target
from replicator.engine.task_control import ControlServer
from replicator.groups import promotion
from replicator.groups.index_topic import ensure_index_topic
from replicator.topics import sync as topic_sync

log = logging.getLogger("replicator.job")  # the log's public name, kept when the module moved

# Discovery reads the target's full metadata only when the source's selection changed, and at least
# this often (a target topic deleted behind the job's back is created again): at 5,000 partitions,
# reading both clusters' metadata every refresh was a third of an idle driver's CPU (BENCHMARKS.md).
TARGET_RECHECK_S = 60.0


class ClusterWatch:
    def __init__(self, cfg: ReplicatorConfig, stats: ControlServer, observers: list,
                 request_stop: Callable[[], None]) -> None:
        self.cfg = cfg
        self.stats = stats  # running shard tasks end early when the topics changed
        self.observers = observers
        self._request_stop = request_stop
        self.mappings: list[topic_sync.TopicMapping] = []
        self._target_checked: tuple[dict[str, int], float] = ({}, -TARGET_RECHECK_S)  # selection, when
        self.clusters: cluster_identity.Clusters | None = None  # found and checked at start
        self._pinned_at: float | None = None  # when the target was last pinned on the source (or refused)
        self.cluster_changed: cluster_identity.ClusterChanged | None = None  # seen while running: exit 1
        self._next_config_sync = time.monotonic() + cfg.sync_topic_configs_interval_seconds

    def started(self, cfg: ReplicatorConfig, mappings: list[topic_sync.TopicMapping]) -> None:
        """The pre-flight's outcome: the config it settled on and the topics it prepared."""
        self.cfg, self.mappings = cfg, mappings

    def on_clusters(self, clusters: cluster_identity.Clusters, pinned: bool) -> None:
        self.clusters = clusters
        self._pinned_at = time.monotonic() if pinned else None

    def refresh(self, source, target) -> bool:
        """One round of checks; False when the job must stop (another cluster, or a promoted target)."""
        known = self._clusters_known(source, target)
        if self.cluster_changed is not None:
            return False
        # Asked of the target even when the source does not answer: that is when a failover happens,
        # and the job stayed up, fenced, until the old source came back.
        if self._promoted(target, quiet=not known):
            return False
        try:
            if known:  # nothing is created on a cluster whose identity is not known
                self._discover(source, target)
                self._next_config_sync = self._sync_configs(source, target, self._next_config_sync)
                for o in self.observers:  # optional hook: ACL sync (replicator.access.acl_sync)
                    if hasattr(o, "on_topics"):
                        o.on_topics(source, target, self.mappings)
        except KafkaException as e:
            log.warning("topic discovery failed: %s; retrying in %gs", e.args[0].str(),
                        self.cfg.refresh_topics_interval_seconds)
        if known:
            self._refresh_pin()
        return True

    def after_failure(self, source, target) -> None:
        """Copying from a rebuilt source fails as data loss (offsets beyond its ends) before the next
        check: the other cluster is the cause to report."""
        self._clusters_known(source, target)

    def _discover(self, source, target) -> None:
        """New and deleted source topics, grown partition counts: target topics follow, and running
        shard tasks end early so the next batch plans the change."""
        selected, skipped = topic_sync.selection(self.cfg, source)
        self._on_deleted(topic_sync.deleted(self.mappings, selected, skipped))
        checked, when = self._target_checked
        if selected == checked and time.monotonic() - when < TARGET_RECHECK_S:
            return
        mappings = topic_sync.ensure_target_topics(self.cfg, source, target, selected)
        self._target_checked = (selected, time.monotonic())
        if mappings != self.mappings:  # a new topic may keep records longer than the index does
            ensure_index_topic(self.cfg, target, [m.target for m in mappings])
            # New topics and partitions join at a batch boundary: make one now.
            self.stats.end_running_batches()
        self.mappings = mappings

    def _sync_configs(self, source, target, due: float) -> float:
        """Source topic config changes reach the target every sync_topic_configs_interval_seconds,
        while shard tasks run (for minutes: the planner only runs between batches); returns when the
        next sync is due."""
        if not self.cfg.sync_topic_configs or time.monotonic() < due:
            return due
        try:
            topic_sync.sync_configs(self.cfg, source, target, self.mappings)
        except KafkaException as e:  # drift is retried at the next sync; records keep flowing
            log.warning("topic config sync failed: %s", e.args[0].str())
        return time.monotonic() + self.cfg.sync_topic_configs_interval_seconds

    def _clusters_known(self, source, target) -> bool:
        """Whether both clusters answered as the ones pinned at start. Another cluster behind either
        address sets `cluster_changed` and requests the stop (exit 1, one line)."""
        if self.clusters is None:
            return True
        try:
            cluster_identity.check_running(self.cfg, self.clusters, source, target,
                                           promotion.marker_topic(self.cfg.name))
        except KafkaException:  # not answering is not another cluster: the copy and lag lines say it
            return False
        except cluster_identity.ClusterChanged as e:
            self.cluster_changed = e
            self._request_stop()
            return False
        return True

    def _refresh_pin(self) -> None:
        """Pins the target on the source once a topic is replicated, and again before the source's
        offsets retention could expire the pin (the offsets refresh's interval, a day by default)."""
        due = self._pinned_at is None or time.monotonic() - self._pinned_at >= self.cfg.offsets_refresh_interval_seconds
        if self.clusters is not None and self.mappings and due and pin_target(self.cfg, self.clusters, self.mappings):
            self._pinned_at = time.monotonic()

    def _promoted(self, target, quiet: bool = False) -> bool:
        try:
            if not promotion.promoted(target, self.cfg.name):
                return False
        except KafkaException as e:  # the copy cannot commit on a target that does not answer either
            if not quiet:  # a cluster that does not answer is said once, by the identity check and the copy
                log.warning("promotion check failed: %s; retrying in %gs", e.args[0].str(),
                            self.cfg.refresh_topics_interval_seconds)
            return False
        log.error("the target was promoted (switchover/failover): stopping, this direction must not copy again",
                  extra={"event": "promoted"})
        self._request_stop()
        return True

    def _on_deleted(self, topics: list[str]) -> None:
        for topic in topics:
            log.warning("source topic %s was deleted; the target topic is kept", topic,
                        extra={"event": "source_topic_deleted", "topic": topic})
            for o in self.observers:  # optional hook: metrics count it
                if hasattr(o, "on_topic_deleted"):
                    o.on_topic_deleted(topic)
