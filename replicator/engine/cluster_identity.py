"""Which Kafka cluster answers at each address: pinned when the job starts, checked while it runs.

A cluster's id is formatted into every broker's storage: a cluster rebuilt at the same address has a
new one. Copying on then is wrong either way (issue 50):
* a new source: the offsets group's positions are positions in the old source's partitions;
* a new, empty target: its offsets group is empty, so every source record would be copied again
  from the source's start (66,288 records in the report), into a cluster nobody chose.

The job keeps no state of its own, so the ids are recorded where the clusters keep them:
* every entry of the offsets group on the target carries the source's and the target's id
  (CommitMetadata `sc`, `tc`): a different source behind the address, or a group written on another
  cluster, is refused;
* a pin on the source: one offset committed into the group `__replicator.<name>.target-cluster` on
  the source, with the target's id as its metadata. An empty offsets group cannot tell a first start
  from a target that was replaced; the pin survives the target, so it can. It is re-committed at
  every start and at every offsets refresh while running (an empty group's offsets expire after the
  source's offsets.retention.minutes, 7 days by default). It needs Read on that group on the source;
  without it the job warns (at start, then once per refresh) and runs without that protection.

Why a pin on the source: the replaced target is empty, so nothing on it (provenance headers, topics)
can say it is new; a setting naming the expected target protects only whoever sets it, and has to be
edited at every deliberate move. The pin costs one group offset and one ACL on the source, and is
written only after every start-up check passed. What it cannot catch: a target replaced while the job
was stopped for longer than the source's offset retention (the pin has expired; the group on the
target then reads as a first start, as before).

A different cluster found at start refuses before anything is written (exit 1); found while running,
it stops the job (exit 1). A deliberate move to another target (a rebuilt cluster, a failback)
is accepted once with `accept_target_cluster_id` set to the new cluster's id: it is pinned, and the
same setting left in place never accepts any other cluster.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient

from replicator import names
from replicator.access import permissions
from replicator.clients import kafka_clients
from replicator.clients.client_errors import transient
from replicator.clients.kafka_clients import kafka_error
from replicator.config import ReplicatorConfig
from replicator.offsets import read_group

log = logging.getLogger("replicator.cluster_identity")

# How the start-up line of a job running without the pin begins (as "topic creation skipped" ...).
PIN_SKIPPED = "cluster pin skipped"
_TIMEOUT_S = 30.0
# While running: the driver's loop waits for it (the promotion check beside it already takes 30 s
# against a cluster that is down).
_RUNNING_TIMEOUT_S = 10.0


class ClusterChanged(RuntimeError):
    """Another cluster answers at an address the job replicates from or to: the message says which
    ids were expected and found, and what to do."""

    def __init__(self, role: str, message: str) -> None:
        super().__init__(message)
        self.role = role  # source | target


@dataclass(frozen=True)
class Clusters:
    source: str
    target: str
    pinnable: bool = True  # the source principal may keep the pin (pin_permitted)


def cluster_id(admin: AdminClient, topic: str, timeout: float = _TIMEOUT_S) -> str:
    """The id of the cluster behind `admin`, from the metadata of one topic (the whole cluster's
    costs a tenth of an idle driver's CPU at 5,000 partitions; an admin client's metadata request
    never creates the topic)."""
    return admin.list_topics(topic, timeout=timeout).cluster_id or ""


@dataclass(frozen=True)
class Pin:
    target: str  # the target's cluster id
    source: str  # the source's, when the pin was written
    at: int  # unix seconds

    def encode(self) -> str:
        return json.dumps({"v": 1, "tc": self.target, "sc": self.source, "t": self.at}, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | None) -> Pin | None:
        try:
            d = json.loads(text or "")
            return cls(str(d["tc"]), str(d.get("sc", "")), int(d.get("t", 0)))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def _group_entries(cfg: ReplicatorConfig) -> list:
    """Every entry of the offsets group on the target, pending commits included: only their
    metadata's ids matter here, and a stable read would wait out a transaction that a killed run
    left open (librdkafka asks for stable offsets exactly when its isolation level is read_committed)."""
    reader = kafka_clients.group_entries_reader(cfg)
    try:
        return [c for c in read_group(reader, timeout=_TIMEOUT_S).values() if c.metadata]
    except KafkaException as e:
        if permissions.is_authorization_error(kafka_error(e)):
            return []  # the pre-flight's permission check names the missing ACL
        raise
    finally:
        reader.close()


def pin_permitted(cfg: ReplicatorConfig, source: AdminClient) -> bool:
    """Whether the source principal may read and commit the pin (Read on its group); warns if not.
    Asked first: without Describe on a group librdkafka's committed() only times out."""
    try:
        ops = permissions._describe_group(source, names.target_pin_group(cfg.name)).authorized_operations
    except KafkaException as e:
        if not permissions.is_authorization_error(kafka_error(e)):
            raise
        ops = set()
    if ops is None or AclOperation.READ in ops:
        return True
    _unpinned(cfg)
    return False


def _unpinned(cfg: ReplicatorConfig) -> None:
    log.warning("%s: %s; a new, empty cluster at the target's address would get every record again (see "
                "`replicator acls --config ...`)", PIN_SKIPPED,
                permissions.lacks(cfg, "source", ["Read"], f"Group '{names.target_pin_group(cfg.name)}'"),
                extra={"event": "cluster_pin_unavailable"})


def _read_pin(cfg: ReplicatorConfig, topics: list[str]) -> Pin | None:
    """The newest pin on the source among `topics`' first partitions."""
    if not topics:
        return None
    client = kafka_clients.target_pin_handle(cfg)
    try:
        found = _retrying(lambda: client.committed([TopicPartition(t, 0) for t in topics], timeout=_TIMEOUT_S))
    finally:
        client.close()
    pins = [p for tp in found if tp.error is None and tp.offset >= 0 for p in [Pin.decode(tp.metadata)] if p]
    return max(pins, key=lambda p: p.at, default=None)


def check_at_start(cfg: ReplicatorConfig, found: Clusters, source_topics: list[str]) -> None:
    """Raises ClusterChanged when the clusters behind the addresses are not the ones the job
    replicated between (the pin is read when `found.pinnable`). Reads only: it runs before anything
    is written to either cluster."""
    recorded = [(c.metadata.source_cluster, c.metadata.target_cluster) for c in _group_entries(cfg)]
    sources = {s for s, _ in recorded if s and s != "unknown"} - {found.source}
    if sources:
        raise ClusterChanged("source",
            f"the source at {cfg.source_bootstrap_servers} is cluster {found.source}, but the offsets group "
            f"{cfg.group!r} on the target (cluster {found.target}) records copying from cluster "
            f"{', '.join(sorted(sources))}: its positions are offsets in that cluster. Nothing was written. If the "
            f"source was replaced on purpose, copy from it under a new --name (or --offsets-group), or delete "
            f"the group to copy everything again")
    targets = {t for _, t in recorded if t}
    if targets - {found.target}:
        raise ClusterChanged("target",
            f"the offsets group {cfg.group!r} on the target at {cfg.target_bootstrap_servers} (cluster "
            f"{found.target}) was written on cluster {', '.join(sorted(targets - {found.target}))}: it was copied "
            f"from another cluster, so its positions say nothing of what this target holds. Nothing was written. "
            f"Delete the group to copy everything again, or use a new --offsets-group")
    if not found.pinnable:
        return
    pin = _read_pin(cfg, source_topics)
    # The group holding this target's own entries proves it is the job's target whatever the pin
    # says (another job of the same name from this source into another target re-pins it).
    if pin is None or pin.target == found.target or found.target in targets:
        return
    if cfg.accept_target_cluster_id == found.target:
        log.warning("accepting target cluster %s at %s in place of cluster %s (accept_target_cluster_id): it is "
                    "pinned now", found.target, cfg.target_bootstrap_servers, pin.target,
                    extra={"event": "target_cluster_accepted", "expected": pin.target, "found": found.target})
        return
    raise ClusterChanged("target",
        f"the target at {cfg.target_bootstrap_servers} is cluster {found.target}, but job {cfg.name!r} copies "
        f"into cluster {pin.target} (pinned on the source at {cfg.source_bootstrap_servers} in group "
        f"{names.target_pin_group(cfg.name)!r}); its offsets group there is empty, so every record would be "
        f"copied again from the source's start. Nothing was written. If the new target is deliberate (a rebuilt "
        f"cluster, a failback), start once with --accept-target-cluster-id {found.target}")


def _retrying(call):
    """`call()`, again while the source's group coordinator is loading or moving (a cluster that just
    started answers COORDINATOR_LOAD_IN_PROGRESS to a group's first request)."""
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        try:
            return call()
        except KafkaException as e:
            err = kafka_error(e)
            if err is None or not transient(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def pin(cfg: ReplicatorConfig, clusters: Clusters, source_topics: list[str]) -> bool:
    """Records (again) on the source that the job copies into `clusters.target`: the offset 0 of
    the first replicated topic's partition 0 in the target pin group, with the ids as its metadata. True
    when done until the next refresh: pinned, or not permitted (warned); False with no topic to pin on."""
    if not clusters.pinnable:
        return True
    if not source_topics:
        return False  # nothing is copied yet either: pinned once a topic is
    client = kafka_clients.target_pin_handle(cfg)
    record = Pin(clusters.target, clusters.source, int(time.time())).encode()
    tp = TopicPartition(sorted(source_topics)[0], 0, 0, record)
    try:
        for r in _retrying(lambda: client.commit(offsets=[tp], asynchronous=False)) or []:
            if r.error is not None:
                raise KafkaException(r.error)
    except KafkaException as e:
        if not permissions.is_authorization_error(kafka_error(e)):
            raise
        _unpinned(cfg)
    finally:
        client.close()
    return True


def check_running(cfg: ReplicatorConfig, pinned: Clusters, source: AdminClient, target: AdminClient,
                  topic: str) -> None:
    """Raises ClusterChanged when another cluster answers at either address than the one pinned at
    start (KafkaException when one does not answer: asked again at the next check)."""
    now = cluster_id(source, topic, _RUNNING_TIMEOUT_S)
    if now and pinned.source and now != pinned.source:
        raise ClusterChanged("source",
            f"the source at {cfg.source_bootstrap_servers} is now cluster {now}, not cluster {pinned.source} that "
            f"this job started with: it was replaced under the running job, and the offsets group's positions "
            f"are offsets in the old one. Stopped; to copy from the new cluster, use a new --name (or "
            f"--offsets-group), or delete the group to copy everything again")
    now = cluster_id(target, topic, _RUNNING_TIMEOUT_S)
    if now and pinned.target and now != pinned.target:
        raise ClusterChanged("target",
            f"the target at {cfg.target_bootstrap_servers} is now cluster {now}, not cluster {pinned.target} that "
            f"this job started with: it was replaced under the running job. Stopped before copying into it; if "
            f"the new target is deliberate, start once with --accept-target-cluster-id {now} (every record is "
            f"copied again from the source's start)")
