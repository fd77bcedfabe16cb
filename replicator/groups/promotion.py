"""The promotion marker: written on the target by `switchover`/`failover`, after which `run` refuses
to copy into that target again in the same direction (no split brain), and which records the cut
(per partition: the next source offset copied, and the target's end) that `failback` and
`divergence` start from.

`__replicator.<name>.promoted` (one partition); its latest record is a JSON document
{kind, at, cut: [{source_topic, target_topic, partition, source_next, target_end}]}.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from replicator.access import permissions
from replicator.clients.kafka_clients import with_logging
from replicator.config import ReplicatorConfig
from replicator.offsets import read_committed
from replicator.topics.sync import TopicMapping

_TOPIC_ALREADY_EXISTS = 36


def marker_topic(job_name: str) -> str:
    return f"__replicator.{job_name}.promoted"


@dataclass(frozen=True)
class CutPoint:
    source_topic: str
    target_topic: str
    partition: int
    source_next: int  # the fake group's position: every source record below it is on the target
    target_end: int  # the target partition's last stable offset at the cut


@dataclass(frozen=True)
class Marker:
    kind: str  # switchover | failover
    at: float
    cut: tuple[CutPoint, ...]

    def to_json(self) -> bytes:
        return json.dumps({"kind": self.kind, "at": self.at, "cut": [asdict(c) for c in self.cut]}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Marker:
        d = json.loads(data)
        return cls(d["kind"], float(d["at"]), tuple(CutPoint(**c) for c in d["cut"]))


_NOT_THERE = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED)


def promoted(target: AdminClient, job_name: str) -> bool:
    """True once the marker topic holds a marker (the cheap check `run` makes, at start and while
    running; Describe suffices). An empty marker topic is no promotion: `switchover`/`failover`
    create it before fencing anything, to learn whether they may write it, and stop if not."""
    topic = marker_topic(job_name)
    # The marker topic's metadata alone: the whole cluster's, at 5,000 partitions, was a tenth of an
    # idle driver's CPU. An admin client's metadata request never auto-creates the topic (checked on
    # a broker with auto.create.topics.enable=true); not authorized to see it reads as not there, as
    # it did when the topic was looked for in the full listing.
    md = target.list_topics(topic, timeout=30).topics.get(topic)
    if md is None or (md.error is not None and md.error.code() in _NOT_THERE):
        return False
    tp = TopicPartition(topic, 0)
    return target.list_offsets({tp: OffsetSpec.latest()}, request_timeout=30)[tp].result().offset > 0


def create_marker_topic(cfg: ReplicatorConfig, target: AdminClient) -> None:
    """Creates the (empty) marker topic unless it exists; KafkaException on any other refusal."""
    topic = marker_topic(cfg.name)
    fut = target.create_topics([NewTopic(topic, 1, cfg.replication_factor, config={"retention.ms": "-1"})],
                               request_timeout=60)[topic]
    try:
        fut.result()
    except KafkaException as e:
        err = e.args[0] if e.args else None
        if not (isinstance(err, KafkaError) and err.code() == _TOPIC_ALREADY_EXISTS):  # promoted once before
            raise


def read_marker(cfg: ReplicatorConfig) -> Marker | None:
    topic = marker_topic(cfg.name)
    consumer = Consumer(with_logging({**cfg.client_properties("target"),
                                      "bootstrap.servers": cfg.target_bootstrap_servers,
                                      "group.id": f"{cfg.name}.translator", "enable.auto.commit": False,
                                      "enable.partition.eof": True, "auto.offset.reset": "earliest"}))
    try:
        if topic not in consumer.list_topics(timeout=30).topics:
            return None
        consumer.assign([TopicPartition(topic, 0, 0)])
        latest, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in consumer.consume(100, 1.0):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return latest
                    if permissions.is_authorization_error(m.error()):
                        raise permissions.denied(cfg, "target", "Read", f"Topic '{topic}'",
                                                 "read the promotion marker's cut")
                    raise RuntimeError(f"reading {topic}: {m.error().str()}")
                latest = Marker.from_json(m.value())
        raise RuntimeError(f"reading {topic} did not reach its end in 60s")
    finally:
        consumer.close()


def cut(cfg: ReplicatorConfig, target: AdminClient, group_reader: Consumer, mappings: list[TopicMapping]
        ) -> tuple[CutPoint, ...]:
    tps = [(m.target, p) for m in mappings for p in range(m.partitions)]
    committed = read_committed(group_reader, tps)
    ends = {}
    if tps:
        req = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
        for tp, fut in target.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED).items():
            ends[(tp.topic, tp.partition)] = fut.result().offset
    out = []
    for m in mappings:
        for p in range(m.partitions):
            c = committed.get((m.target, p))
            out.append(CutPoint(m.source, m.target, p, c.offset if c is not None else -1, ends[(m.target, p)]))
    return tuple(out)


def write_marker(cfg: ReplicatorConfig, target: AdminClient, marker: Marker) -> None:
    topic = marker_topic(cfg.name)
    try:
        create_marker_topic(cfg, target)
    except KafkaException as e:
        raise RuntimeError(f"creating the promotion marker topic {topic!r} failed: {e}") from None
    producer = Producer(with_logging({**cfg.client_properties("target"),
                                      "bootstrap.servers": cfg.target_bootstrap_servers,
                                      "enable.idempotence": True, "acks": "all"}))
    errors: list[str] = []
    deadline = time.monotonic() + 60
    while True:
        try:
            producer.produce(topic, marker.to_json(), partition=0,
                             on_delivery=lambda err, _m: errors.append(err.str()) if err else None)
            break
        except Exception:  # noqa: BLE001 - metadata of the brand-new topic not there yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    if producer.flush(60) or errors:
        raise RuntimeError(f"writing the promotion marker failed: {errors[0] if errors else 'timed out'}")
