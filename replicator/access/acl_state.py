"""What ACL sync created on the target, kept on the target (the only state): a compacted topic,
`__replicator.<name>.acls`, keyed by the ACL, one record per entry:

- `copy`: a READ/DESCRIBE rule the sync created (and so may delete when its source rule goes);
- `staged`: a source WRITE/DESCRIBE rule, translated, that promotion applies (recorded so that
  `failover` has it with the source gone; never applied before);
- `promoted`: a rule promotion created.

An entry is written (and flushed) before its ACL is created, and removed (a tombstone) after its ACL
is deleted: a crash in between leaves an entry whose ACL may be missing, which the next round
creates again or deletes (a no-op), never an ACL the sync created but does not know of. A rule that
already exists on the target when the sync would create it is someone else's: it is not recorded,
so it is never deleted.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from replicator import names
from replicator.access.acl_translate import Binding
from replicator.clients import kafka_clients
from replicator.clients.partition_reads import read_to_end
from replicator.clients.topic_creation import create_topic_if_missing
from replicator.config import ReplicatorConfig

COPY, STAGED, PROMOTED = "copy", "staged", "promoted"


def ensure_topic(cfg: ReplicatorConfig, target: AdminClient) -> None:
    """Creates the state topic unless it exists; KafkaException on any other refusal."""
    topic = names.acl_state_topic(cfg.name)
    create_topic_if_missing(target, NewTopic(topic, 1, cfg.replication_factor, config={"cleanup.policy": "compact"}))
    deadline = time.monotonic() + 30
    while not exists(target, topic) and time.monotonic() < deadline:
        time.sleep(0.2)


def exists(client, topic: str) -> bool:
    """Whether the topic exists (a metadata request for one topic answers even for a missing one)."""
    md = client.list_topics(topic, timeout=30).topics.get(topic)
    return md is not None and md.error is None


class AclState:
    """The entries by kind; `load` reads the topic to its end, `record`/`forget` write through."""

    def __init__(self, cfg: ReplicatorConfig) -> None:
        self.cfg = cfg
        self.topic = names.acl_state_topic(cfg.name)
        self.entries: dict[str, set[Binding]] = {COPY: set(), STAGED: set(), PROMOTED: set()}
        self._producer: Producer | None = None

    def load(self) -> AclState:
        # Under the offsets group's id, which the job's ACLs cover: the consumer never joins or commits.
        consumer = kafka_clients.reader_to_end(self.cfg.client_properties("target"), self.cfg.target_bootstrap_servers,
                                               self.cfg.group)
        found: dict[str, set[Binding]] = {COPY: set(), STAGED: set(), PROMOTED: set()}
        try:
            if exists(consumer, self.topic):  # else never created: nothing recorded (a dry run creates nothing)
                for m in read_to_end(consumer, [TopicPartition(self.topic, 0, 0)]):
                    kind, key = json.loads(m.key())
                    if m.value() is None:
                        found[kind].discard(Binding.from_key(key))
                    else:
                        found[kind].add(Binding.from_key(key))
        finally:
            consumer.close()
        self.entries = found
        return self

    def record(self, kind: str, bindings: set[Binding]) -> None:
        self._write(kind, bindings, tombstone=False)
        self.entries[kind] |= bindings

    def forget(self, kind: str, bindings: set[Binding]) -> None:
        self._write(kind, bindings, tombstone=True)
        self.entries[kind] -= bindings

    def _write(self, kind: str, bindings: set[Binding], tombstone: bool) -> None:
        if not bindings:
            return
        if self._producer is None:
            self._producer = kafka_clients.target_writer(self.cfg)
        errors: list[str] = []
        for b in sorted(bindings):
            value = None if tombstone else json.dumps({"kind": kind, "acl": b.describe(), "at": time.time()})
            self._producer.produce(self.topic, key=json.dumps([kind, b.key()]), value=value, partition=0,
                                   on_delivery=lambda err, _m: errors.append(err.str()) if err else None)
        if self._producer.flush(60) or errors:
            raise RuntimeError(f"recording ACL sync state in {self.topic} failed: "
                               f"{errors[0] if errors else 'timed out'}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
