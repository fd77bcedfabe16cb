"""Which transactional ids a run fences, and when: every id an earlier writer could hold before the
first write, and the job's own at exit."""

from __future__ import annotations

import logging

from replicator.access import permissions
from replicator.clients import kafka_clients
from replicator.config import ReplicatorConfig
from replicator.engine import transactional_ids
from replicator.engine.failures import RuntimeFailure
from replicator.offsets import read_group

log = logging.getLogger("replicator.job")  # the log's public name, kept when the module moved


def fence_previous_layouts(cfg: ReplicatorConfig) -> int:
    """init_transactions() on every transactional id an earlier run could hold, before any new write:
    the current layout's, every layout (job name, shard count) the fake group records, and every id
    of those names the target's transaction coordinators still list (which covers a layout that was
    killed before its first commit). Fences their zombies and aborts what they left open.

    The ids that need no group read are fenced first: a run killed between sending its offsets and
    committing leaves them pending, and the group's stable offsets wait for that transaction to end
    (OffsetFetch answers UNSTABLE_OFFSET_COMMIT), so reading the group first made a restart after
    SIGKILL wait out the transaction timeout (60 s) whenever the kill hit a commit."""
    if not cfg.exactly_once:
        return 0
    current = {transactional_ids.shard_id(cfg.name, s) for s in range(cfg.shard_count)}
    listed = _listed(cfg, {cfg.name})
    first = transactional_ids.to_fence(cfg, [], listed)
    _fence(cfg, first)
    reader = kafka_clients.group_reader(cfg)
    try:
        committed = read_group(reader)
    finally:
        reader.close()
    layouts = {(c.metadata.job or cfg.name, c.metadata.shards) for c in committed.values() if c.metadata}
    damaged = sorted(f"{t}[{p}]" for (t, p), c in committed.items() if c.damaged)
    if damaged:
        log.warning("the offsets group %r holds unreadable metadata for %s: the layout that wrote it is unknown; "
                    "fencing every id of job %r the target's coordinators list", cfg.group, ", ".join(damaged),
                    cfg.name, extra={"event": "damaged_metadata", "partitions": len(damaged)})
    others = {name for name, _ in layouts} - {cfg.name}
    ids = transactional_ids.to_fence(cfg, layouts, listed + (_listed(cfg, others) if others else []))
    earlier = sorted(set(ids) - current)
    if earlier:
        # Recorded in the group, or only known to the coordinators (a layout that never committed).
        log.info("shard layout changed (recorded: %s; now %d shards of %s): fencing %d transactional ids of "
                 "earlier layouts, e.g. %s", sorted(layouts) or "none", cfg.shard_count, cfg.name, len(earlier),
                 ", ".join(earlier[:3]), extra={"event": "fencing", "ids": len(ids)})
    done = set(first)
    _fence(cfg, [i for i in ids if i not in done])
    return len(ids)


def _listed(cfg: ReplicatorConfig, names: set[str]) -> list[str]:
    try:
        return transactional_ids.listed(cfg, names)
    except Exception as e:  # noqa: BLE001 - kafka-python's errors; any of them means "not proven fenced"
        raise transactional_ids.FenceError(
            f"cannot list the target's transactions to find earlier writers of job(s) {sorted(names)}: {e}") from None


def _fence(cfg: ReplicatorConfig, ids: list[str]) -> None:
    try:
        transactional_ids.fence(cfg, ids)
    except transactional_ids.FenceError as e:
        for txn_id, cause in e.failures:
            if permissions.is_authorization_error(kafka_clients.kafka_error(cause)):
                raise RuntimeFailure(str(permissions.transactional_id_denied(cfg, txn_id))) from None
        raise


def fence_current_layout(cfg: ReplicatorConfig, timeout: float | None = None) -> int:
    """At exit: abort whatever an interrupted task left open now, not at the transaction timeout.
    Returns how many ids it fenced; FenceError names those it could not within `timeout`."""
    if not cfg.exactly_once:
        return 0
    ids = [transactional_ids.shard_id(cfg.name, s) for s in range(cfg.shard_count)]
    if timeout is None:
        transactional_ids.fence(cfg, ids)
    else:
        transactional_ids.fence(cfg, ids, timeout)
    return len(ids)
