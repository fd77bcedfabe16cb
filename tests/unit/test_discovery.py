"""Topic discovery while the job runs: the source's selection every refresh, the target's full
metadata only when that selection changed, or once TARGET_RECHECK_S has passed (at 5,000 partitions
reading both clusters every refresh was a third of an idle driver's CPU, BENCHMARKS.md)."""

from __future__ import annotations

from replicator.config import ReplicatorConfig
from replicator.engine import cluster_watch
from replicator.engine.cluster_watch import TARGET_RECHECK_S, ClusterWatch
from replicator.topics.sync import TopicMapping


def test_the_target_is_read_again_only_when_the_selection_changed_or_a_while_passed(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(cluster_watch.time, "monotonic", lambda: clock[0])
    selection = {"a": 2}
    ensured: list[dict] = []
    ended: list[int] = []

    def ensure(cfg, source, target, topics):
        ensured.append(dict(topics))
        return [TopicMapping(t, t, n) for t, n in topics.items()]

    monkeypatch.setattr(cluster_watch.topic_sync, "selection", lambda cfg, source: (dict(selection), {}))
    monkeypatch.setattr(cluster_watch.topic_sync, "ensure_target_topics", ensure)
    monkeypatch.setattr(cluster_watch, "ensure_index_topic", lambda cfg, target, topics: None)
    stats = type("Stats", (), {"end_running_batches": lambda self: ended.append(1)})()
    r = ClusterWatch(ReplicatorConfig(topics="a|b"), stats, [], lambda: None)

    r._discover(None, None)
    assert ensured == [{"a": 2}] and r.mappings == [TopicMapping("a", "a", 2)] and len(ended) == 1
    clock[0] += 10
    r._discover(None, None)  # nothing changed at the source: the target is not asked
    assert len(ensured) == 1
    selection["a"] = 3  # grown at the source
    r._discover(None, None)
    assert ensured[-1] == {"a": 3} and r.mappings == [TopicMapping("a", "a", 3)] and len(ended) == 2
    clock[0] += TARGET_RECHECK_S  # a target topic deleted behind the job's back is created again
    r._discover(None, None)
    assert len(ensured) == 3 and len(ended) == 2  # same mappings: the running batch goes on


def test_a_promotion_stops_the_job_while_the_source_does_not_answer(monkeypatch):
    """A failover happens with the source gone: the job learns it from the target alone."""
    from confluent_kafka import KafkaError, KafkaException

    def source_gone(*args):
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "source down"))

    stops: list[int] = []
    monkeypatch.setattr(cluster_watch.cluster_identity, "check_running", source_gone)
    promoted = [False]
    monkeypatch.setattr(cluster_watch.promotion, "promoted", lambda target, name: promoted[0])
    r = ClusterWatch(ReplicatorConfig(topics="a"), None, [], lambda: stops.append(1))
    r.clusters = object()  # pinned at start
    assert r.refresh(None, None) is True and stops == []
    promoted[0] = True
    assert r.refresh(None, None) is False and stops == [1]
