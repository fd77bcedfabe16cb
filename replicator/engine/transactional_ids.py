"""The job's transactional ids: which ones to fence, and fencing them (`names` spells and parses them;
`shard_id` and `parse` here are those, under the names the engine calls them by).

Every shard writes under one static id, `<name>-shard-<n>`. Whatever could still hold one of the
job's ids (a zombie of an earlier layout, a run that died before its first commit, a run under an
earlier `--name` that shared the offsets group) must be fenced before the first record moves:
`init_transactions()` on an id bumps its epoch, which refuses the old holder's next write and
aborts the transaction it left open.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaException

from replicator.clients import kafka_clients
from replicator.clients.client_errors import Outcome, classify, while_retriable
from replicator.config import ReplicatorConfig
from replicator.names import parse_shard_transactional_id as parse
from replicator.names import shard_transactional_id as shard_id
from replicator.names import transactional_id_sort_key as _sort_key

log = logging.getLogger("replicator.transactional_ids")  # the log's public name, kept when the module moved

_FENCE_TIMEOUT_S = 60.0
_FENCE_THREADS = 16


class FenceError(RuntimeError):
    """A transactional id could not be fenced: a zombie holding it might still commit."""

    def __init__(self, message: str, failures: list[tuple[str, BaseException]] | None = None) -> None:
        super().__init__(message)
        self.failures = failures or []  # (transactional id, what init_transactions() raised)


def listed(cfg: ReplicatorConfig, names: Iterable[str]) -> list[str]:
    """Ids of jobs `names` that the target's transaction coordinators know (KIP-664 ListTransactions).

    Coordinators remember an id from its first `init_transactions()` until
    `transactional.id.expiration.ms` after its last use, so this also finds the ids of a layout that
    never committed anything, which the fake group cannot name. librdkafka has no ListTransactions;
    kafka-python does (as `verify` uses it).
    """
    from kafka import KafkaAdminClient

    from replicator.clients.kafka_python_clients import client_settings

    names = sorted(set(names))
    admin = KafkaAdminClient(**client_settings(cfg.client_properties("target"), cfg.target_bootstrap_servers))
    try:
        per_broker = while_retriable(admin.list_transactions, _FENCE_TIMEOUT_S, "listing the target's transactions")
    finally:
        admin.close()
    rows = [t for listing in per_broker.values() for t in listing]
    return sorted({t.transactional_id for t in rows if any(parse(n, t.transactional_id) is not None for n in names)},
                  key=_sort_key)


def to_fence(cfg: ReplicatorConfig, layouts: Iterable[tuple[str, int]], listed_ids: Iterable[str]) -> list[str]:
    """Every id a predecessor could hold: the current layout's, each recorded layout's (name, shard
    count) from the fake group, and whatever the coordinators list for those names."""
    ids = {shard_id(cfg.name, s) for s in range(cfg.shard_count)}
    for name, shards in layouts:
        ids.update(shard_id(name, s) for s in range(shards))
    ids.update(listed_ids)
    return sorted(ids, key=_sort_key)


def fence(cfg: ReplicatorConfig, ids: list[str], timeout: float = _FENCE_TIMEOUT_S) -> None:
    """init_transactions() on every id, in parallel; raises FenceError naming each id that failed.

    A failure is never swallowed: an id left unfenced is an id a zombie may still commit under.
    """
    if not ids:
        return
    with ThreadPoolExecutor(max_workers=min(_FENCE_THREADS, len(ids)), thread_name_prefix="fence") as pool:
        results = list(pool.map(lambda i: _fence_one_safely(cfg, i, timeout), ids))
    failures = [(i, e) for i, e in zip(ids, results, strict=True) if e is not None]
    if failures:
        listing = "; ".join(f"{i}: {_describe(e)}" for i, e in failures)
        raise FenceError(f"could not fence {len(failures)} of {len(ids)} transactional ids on the target, so an "
                         f"earlier instance could still commit under them: {listing}", failures)


def _fence_one_safely(cfg: ReplicatorConfig, txn_id: str, timeout: float) -> BaseException | None:
    try:
        init_producer(cfg, txn_id, timeout)
    except Exception as e:  # noqa: BLE001 - every failure is reported by fence(), never dropped
        return e
    return None


def init_producer(cfg: ReplicatorConfig, txn_id: str, timeout: float):
    """A transactional producer for `txn_id` after init_transactions(), retrying what is transient.

    The one way the job initialises its ids (shard tasks, fencing, offset refresh), so all of them
    retry the same errors for as long as they are given."""
    producer = kafka_clients.target_producer(cfg, txn_id)
    deadline = time.monotonic() + timeout
    while True:
        try:
            producer.init_transactions(max(1.0, min(30.0, deadline - time.monotonic())))
            return producer
        except KafkaException as e:
            if classify(e.args[0]) is not Outcome.RETRY or time.monotonic() > deadline:
                raise


def _describe(e: BaseException) -> str:
    err = kafka_clients.kafka_error(e)
    return err.str() if err is not None else f"{type(e).__name__}: {e}"
