"""What must hold before the first record moves: both clusters reachable and the ones pinned, the
principals' ACLs, the target's topics, earlier writers fenced, and offsets that fit the source."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from replicator import names
from replicator.access import permissions
from replicator.clients import kafka_clients
from replicator.clients.client_errors import transient
from replicator.clients.partition_reads import ReadError
from replicator.config import ReplicatorConfig
from replicator.engine import cluster_identity, index_floors, transactional_ids
from replicator.engine.failures import RuntimeFailure
from replicator.engine.fencing import fence_previous_layouts
from replicator.groups import promotion
from replicator.groups.index_topic import ensure_index_topic
from replicator.ops.lag import LagUnavailable, PartitionLag, partition_lags
from replicator.topics import sync as topic_sync

log = logging.getLogger("replicator.job")  # the log's public name, kept when the module moved

_PREPARE_RETRY_S = 30.0  # a fresh cluster's brokers learning of topics the pre-flight just created


def preflight(cfg: ReplicatorConfig, on_reachable: Callable[[], None] | None = None,
              on_lags: Callable[[list[PartitionLag]], None] | None = None,
              on_clusters: Callable[[cluster_identity.Clusters, bool], None] | None = None,
              ) -> tuple[ReplicatorConfig, list[topic_sync.TopicMapping]]:
    """Everything that must hold before the first record moves. Returns the config with the optional
    features switched off that the principals' ACLs do not allow, and the topic mappings.
    `on_reachable` is called once both clusters answered (the job starts Spark then); `on_lags` gets
    the lag lookup made after fencing (the fake group's offsets as this client's coordinator said);
    `on_clusters` the clusters found behind the addresses, checked, and whether the target was pinned
    on the source (cluster_identity)."""
    from replicator.clients import tls_files

    for role in ("source", "target"):
        servers = getattr(cfg, f"{role}_bootstrap_servers")
        if problems := tls_files.problems(cfg.client_properties(role)):
            raise RuntimeFailure(f"cannot connect to the {role} cluster at {servers}: {'; '.join(problems)}")
    source_errors: list[str] = []
    target_errors: list[str] = []
    try:
        source = kafka_clients.source_admin(cfg, source_errors)
    except KafkaException as e:  # librdkafka refuses the TLS/SASL settings themselves
        raise RuntimeFailure(f"cannot connect to the source cluster at {cfg.source_bootstrap_servers}: "
                             f"{e.args[0].str()}") from None
    try:
        target = kafka_clients.target_admin(cfg, target_errors)
    except KafkaException as e:
        raise RuntimeFailure(f"cannot connect to the target cluster at {cfg.target_bootstrap_servers}: "
                             f"{e.args[0].str()}") from None
    ids = {}
    for role, admin, servers, errors in (("source", source, cfg.source_bootstrap_servers, source_errors),
                                         ("target", target, cfg.target_bootstrap_servers, target_errors)):
        try:
            ids[role] = admin.list_topics(timeout=20).cluster_id or ""
        except KafkaException as e:
            admin.poll(0)  # serves the error callback
            cause = f" ({errors[-1]})" if errors else ""
            raise RuntimeFailure(f"cannot reach the {role} cluster at {servers}: {e.args[0].str()}{cause}") from None
    if on_reachable is not None:
        on_reachable()
    try:
        clusters = cluster_identity.Clusters(ids["source"], ids["target"], cluster_identity.pin_permitted(cfg, source))
    except KafkaException as e:
        raise RuntimeFailure(f"describing the group {names.target_pin_group(cfg.name)!r} on the source failed: "
                             f"{e.args[0].str()}") from None
    log.info("source: cluster %s at %s; target: cluster %s at %s", clusters.source, cfg.source_bootstrap_servers,
             clusters.target, cfg.target_bootstrap_servers,
             extra={"event": "clusters", "source_cluster": clusters.source, "target_cluster": clusters.target})
    try:  # before anything is written to either cluster
        cluster_identity.check_at_start(cfg, clusters, sorted(topic_sync.discover(cfg, source)))
    except cluster_identity.ClusterChanged as e:
        raise RuntimeFailure(str(e)) from None
    except KafkaException as e:
        raise RuntimeFailure(f"reading which clusters job {cfg.name!r} replicated between failed: "
                             f"{e.args[0].str()}") from None
    if promotion.promoted(target, cfg.name):
        raise RuntimeFailure(
            f"the target was promoted ({promotion.marker_topic(cfg.name)} exists: a switchover or failover ran): "
            f"replicating into it again in this direction would split the brain. Fail back with a reverse "
            f"job (docs/disaster-recovery.md, Runbook), or delete that topic to resume this direction deliberately.")
    checked = cfg
    deadline = time.monotonic() + _PREPARE_RETRY_S
    while True:
        try:
            cfg = checked
            selected = topic_sync.discover(cfg, source)
            permissions.check_source(cfg, source, selected)
            permissions.check_source_group(cfg, source)
            cfg = permissions.check_source_configs(cfg, source, selected)
            # Checked before creating anything (what creation would skip), and again after it (topics
            # that did not exist before): no record or offset is written until every check passed.
            cfg = permissions.check_target(cfg, target, selected)
            mappings = topic_sync.ensure_target_topics(cfg, source, target, selected)
            ensure_index_topic(cfg, target, [m.target for m in mappings])
            cfg = permissions.check_target(cfg, target, selected, quiet=True)
            permissions.check_group(cfg, target)
            permissions.check_promotion_marker(cfg, target)
            break
        except permissions.PermissionDenied as e:
            raise RuntimeFailure(str(e)) from None
        except KafkaException as e:
            # A topic just created is not yet known to every broker of a fresh multi-broker cluster
            # (UNKNOWN_TOPIC_OR_PART from the next check: seen in make test's three-broker run). Every
            # step here is a check or an idempotent creation, so asking again is safe.
            err = kafka_clients.kafka_error(e)
            if err is None or not transient(err) or time.monotonic() >= deadline:
                raise RuntimeFailure(f"preparing target topics failed: {e}") from None
            time.sleep(0.5)
        except RuntimeError as e:
            raise RuntimeFailure(f"preparing target topics failed: {e}") from None
    if not mappings:
        log.warning("no source topic matches the selection yet; new topics are picked up every %ss",
                    cfg.refresh_topics_interval_seconds)
    # Fenced before the group's offsets are read (fence_previous_layouts says why); no record has
    # moved yet either way: fencing only aborts what earlier writers left open.
    try:
        fence_previous_layouts(cfg)
    except transactional_ids.FenceError as e:
        raise RuntimeFailure(str(e)) from None
    try:
        lags = partition_lags(cfg, mappings)
    except LagUnavailable as e:
        raise RuntimeFailure(f"reading the offsets group {cfg.group!r} and the source's ends failed: {e}") from None
    lags = _raised_to_the_index(cfg, target, lags)
    if on_lags is not None:
        on_lags(lags)
    for lag in lags:
        if lag.committed > lag.source_end:
            raise RuntimeFailure(
                f"the offsets group {cfg.group!r} on the target says {lag.target_topic}[{lag.partition}] is "
                f"copied up to source offset {lag.committed}, beyond the source's end {lag.source_end}: "
                f"the group was written by another job or the source topic was recreated. Use another "
                f"--name/--offsets-group, or delete the group to start over.")
    pinned = pin_target(cfg, clusters, mappings)
    if on_clusters is not None:
        on_clusters(clusters, pinned)
    return cfg, mappings


def _raised_to_the_index(cfg: ReplicatorConfig, target: AdminClient, lags: list[PartitionLag]
                         ) -> list[PartitionLag]:
    """`lags` with the group's offset raised where the target holds committed copies past it
    (`index_floors`): the floors the job's tasks resume at. A check that fails is warned about and
    skipped: it guards against a broker fault seen once, and the start does not depend on it."""
    try:
        behind = {(b.target_topic, b.partition): b.resume
                  for b in index_floors.find(cfg, target, [(x.target_topic, x.partition) for x in lags])}
    except (KafkaException, ReadError) as e:
        why = e.args[0].str() if isinstance(e, KafkaException) else str(e)
        log.warning("could not check the target for copies past the offsets group's position: %s", why,
                    extra={"event": "group_behind_target_unchecked"})
        return lags
    return [replace(x, committed=behind[(x.target_topic, x.partition)]) if (x.target_topic, x.partition) in behind
            else x for x in lags]


def pin_target(cfg: ReplicatorConfig, clusters: cluster_identity.Clusters,
               mappings: list[topic_sync.TopicMapping]) -> bool:
    """Pins the target on the source (cluster_identity); False when it could not be pinned now."""
    try:
        return cluster_identity.pin(cfg, clusters, [m.source for m in mappings])
    except KafkaException as e:  # the next start or refresh pins it; copying does not depend on it
        log.warning("could not pin the target cluster on the source: %s", e.args[0].str(),
                    extra={"event": "cluster_pin_failed"})
        return False
