"""The promotion marker: written on the target by `switchover`/`failover`, after which `run` refuses
to copy into that target again in the same direction (no split brain), and which records the cut
(per partition: the next source offset copied, and the target's end) that `failback` and
`divergence` start from.

`__replicator.<name>.promoted` (one partition); its latest record is a JSON document
{kind, at, cut: [{source_topic, target_topic, partition, source_next, target_end}]}.
"""

from __future__ import annotations

import dataclasses
import json
import time
from contextlib import closing
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from replicator.access import permissions
from replicator.clients import kafka_clients
from replicator.clients.client_errors import TOPIC_NOT_VISIBLE, is_authorization_error
from replicator.clients.partition_reads import ReadError, read_to_end
from replicator.config import ReplicatorConfig
from replicator.internal_topics import create_marker_topic
from replicator.names import marker_topic
from replicator.offsets import read_committed
from replicator.topics.sync import TopicMapping

_READ_STALL_S = 60.0


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
    if md is None or (md.error is not None and md.error.code() in TOPIC_NOT_VISIBLE):
        return False
    tp = TopicPartition(topic, 0)
    return target.list_offsets({tp: OffsetSpec.latest()}, request_timeout=30)[tp].result().offset > 0


def forward_view(reverse: ReplicatorConfig, forward_name: str) -> ReplicatorConfig:
    """The forward job as its reverse job's configuration sees it (`failback`): both clusters
    swapped, with the client settings (TLS, SASL) that go with each; swapping only the addresses
    would speak one cluster's security to the other."""
    return dataclasses.replace(reverse, name=forward_name, offsets_group="",
                               target_bootstrap_servers=reverse.source_bootstrap_servers,
                               source_bootstrap_servers=reverse.target_bootstrap_servers,
                               source=reverse.target, target=reverse.source)


def read_marker(cfg: ReplicatorConfig) -> Marker | None:
    topic = marker_topic(cfg.name)
    consumer = kafka_clients.translator_reader(cfg)
    try:
        if topic not in consumer.list_topics(timeout=30).topics:
            return None
        latest = None
        with closing(read_to_end(consumer, [TopicPartition(topic, 0, 0)], stall_s=_READ_STALL_S)) as records:
            for m in records:
                latest = Marker.from_json(m.value())
        return latest
    except ReadError as e:
        if is_authorization_error(e.error):
            raise permissions.denied(cfg, "target", "Read", f"Topic '{topic}'",
                                     "read the promotion marker's cut") from None
        raise
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
    producer = kafka_clients.target_writer(cfg)
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
