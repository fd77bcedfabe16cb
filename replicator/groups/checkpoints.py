"""Group checkpoints on the target: what each source group's position translates to, and what the
sync wrote into the same-named target group (the ownership record that makes sync safe).

`__replicator.<name>.checkpoints` (compacted, one partition): key ["c", group, source topic,
partition] -> JSON {x, t, exact, ahead, method, meta, w, p, at}; `w` is the target offset the sync
last wrote and saw accepted, `p` one it is about to write (recorded first, so a crash between the
write and its confirmation never makes our own write look like someone else's). Key ["g", group] ->
{taken_over, at, reason} once a consumer was seen on the target. Key ["f"] -> {forward_job} in a
reverse job's topic, written by `failback`: the job whose index translates positions up to the
failover cut (`back_translate`).

With `mm2_compatible_checkpoints`, also MirrorMaker 2's `<source alias>.checkpoints.internal`
(key: group, target topic, partition; value: version 0, upstream offset, offset, metadata; Kafka
protocol types), so `RemoteClusterUtils.translateOffsets` and MM2 tooling read our translations.
"""

from __future__ import annotations

import json
import struct
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field

from confluent_kafka import Producer, TopicPartition

from replicator import names
from replicator.clients import kafka_clients
from replicator.clients.partition_reads import read_to_end
from replicator.config import ReplicatorConfig
from replicator.internal_topics import ensure_checkpoint_topics as ensure_topics  # noqa: F401 - `commands.groups` asks here

_LOAD_STALL_S = 120.0


@dataclass
class Checkpoint:
    x: int  # the source group's committed offset
    t: int | None  # its exact translation, None when it could not be translated
    exact: bool
    ahead: int  # source offsets the group is ahead of the replica
    method: str
    meta: str = ""  # the group's own metadata string, kept when synced
    w: int = -1  # target offset last written and confirmed
    p: int = -1  # target offset being written (not yet confirmed)
    at: float = field(default_factory=time.time)  # when the translation was made

    def owned(self) -> set[int]:
        return {v for v in (self.w, self.p) if v >= 0}


@dataclass
class GroupState:
    taken_over: bool = False
    at: float = 0.0
    reason: str = ""


def _key(*parts) -> bytes:
    return json.dumps(list(parts), separators=(",", ":")).encode()


def mm2_key(group: str, topic: str, partition: int) -> bytes:
    return _string(group) + _string(topic) + struct.pack(">i", partition)


def mm2_value(upstream: int, downstream: int, metadata: str) -> bytes:
    return struct.pack(">hqq", 0, upstream, downstream) + _string(metadata or "")


def parse_mm2(key: bytes, value: bytes) -> tuple[str, str, int, int, int, str]:
    group, pos = _read_string(key, 0)
    topic, pos = _read_string(key, pos)
    (partition,) = struct.unpack_from(">i", key, pos)
    _version, upstream, downstream = struct.unpack_from(">hqq", value, 0)
    metadata, _ = _read_string(value, 18)
    return group, topic, partition, upstream, downstream, metadata


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", data, pos)
    return data[pos + 2:pos + 2 + n].decode(), pos + 2 + n


class CheckpointStore:
    """The checkpoints topic, loaded whole at start (compacted: one record per key) and appended to."""

    def __init__(self, cfg: ReplicatorConfig, read_only: bool = False) -> None:
        self.cfg = cfg
        self.read_only = read_only  # dry runs and status commands: changes stay in memory
        self.topic = names.checkpoints_topic(cfg.name)
        self.mm2_topic = names.mm2_checkpoints_topic(cfg.source_alias) if cfg.mm2_compatible_checkpoints else None
        self.checkpoints: dict[tuple[str, str, int], Checkpoint] = {}
        self.groups: dict[str, GroupState] = {}
        self.forward_job: str | None = None  # a reverse job's forward job (`failback`)
        self._producer: Producer | None = None
        self._errors: list[str] = []
        # Values other processes of this job (the running job's sync, a switchover) wrote or were
        # about to write since this store was first loaded: read back by `load()` again.
        self.recent: dict[tuple[str, str, int], set[int]] = {}
        self._loaded = False

    def load(self) -> CheckpointStore:
        consumer = kafka_clients.translator_reader(self.cfg)
        try:
            md = consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
            if md is None or md.error is not None:
                return self
            starts = [TopicPartition(self.topic, p, 0) for p in md.partitions]
            with closing(read_to_end(consumer, starts, stall_s=_LOAD_STALL_S)) as records:
                for m in records:
                    self._apply(m.key(), m.value())
        finally:
            consumer.close()
        self._loaded = True
        return self

    def _apply(self, key: bytes, value: bytes | None) -> None:
        k = json.loads(key)
        if k[0] == "c":
            tp = (k[1], k[2], int(k[3]))
            if value is None:
                self.checkpoints.pop(tp, None)
            else:
                cp = self.checkpoints[tp] = Checkpoint(**json.loads(value))
                if self._loaded:
                    self.recent.setdefault(tp, set()).update(cp.owned())
        elif k[0] == "g":
            if value is None:
                self.groups.pop(k[1], None)
            else:
                self.groups[k[1]] = GroupState(**json.loads(value))
        elif k[0] == "f":
            self.forward_job = json.loads(value)["forward_job"] if value is not None else None

    def owned(self, group: str, topic: str, partition: int) -> set[int]:
        cp = self.checkpoints.get((group, topic, partition))
        return (cp.owned() if cp else set()) | self.recent.get((group, topic, partition), set())

    def _produce(self) -> Producer:
        if self._producer is None:
            self._producer = kafka_clients.target_writer(self.cfg, linger_ms=5)
        return self._producer

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self._errors.append(err.str())

    def put(self, group: str, topic: str, partition: int, cp: Checkpoint, target_topic: str) -> None:
        self.checkpoints[(group, topic, partition)] = cp
        if self.read_only:
            return
        producer = self._produce()
        producer.produce(self.topic, json.dumps(asdict(cp), separators=(",", ":")).encode(),
                         _key("c", group, topic, partition), on_delivery=self._on_delivery)
        if self.mm2_topic and cp.t is not None:
            producer.produce(self.mm2_topic, mm2_value(cp.x, cp.t, cp.meta), mm2_key(group, target_topic, partition),
                             on_delivery=self._on_delivery)

    def put_group(self, group: str, state: GroupState) -> None:
        self.groups[group] = state
        if self.read_only:
            return
        self._produce().produce(self.topic, json.dumps(asdict(state)).encode(), _key("g", group),
                                on_delivery=self._on_delivery)

    def put_forward_job(self, name: str) -> None:
        self.forward_job = name
        if not self.read_only:
            self._produce().produce(self.topic, json.dumps({"forward_job": name}).encode(), _key("f"),
                                    on_delivery=self._on_delivery)

    def flush(self) -> None:
        """Durable before return (acks=all), or RuntimeError: an unrecorded write must not follow."""
        if self._producer is None:
            return
        left = self._producer.flush(30)
        errors, self._errors = self._errors, []
        if left or errors:
            raise RuntimeError(f"checkpoint records not written to the target: {left} unacknowledged after 30s"
                               f"{'; ' + errors[0] if errors else ''}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None
