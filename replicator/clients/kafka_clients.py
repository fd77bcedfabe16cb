"""confluent-kafka client factories (the engine, `groups`, `access` and `topics` build their clients
here): the settings exactly-once depends on, and user pass-through.

User properties (`source:` / `target:` in the config: TLS, SASL, tuning) come first; the keys the
guarantee rests on are set last and cannot be overridden (config validation rejects them).
"""

from __future__ import annotations

import contextlib
import logging

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from replicator import names
from replicator.config import ReplicatorConfig
from replicator.logs import RepeatFilter

# librdkafka's own lines ("Connect to ... failed", PID retries) go through our logging, in the job's
# log format, instead of straight to stderr as "%4|...|GETPID|..."; clients serve them when polled.
LIBRDKAFKA_LOG = logging.getLogger("replicator.librdkafka")
LIBRDKAFKA_LOG.addFilter(RepeatFilter())


def with_logging(props: dict) -> dict:
    return {**props, "logger": LIBRDKAFKA_LOG}


# Kafka 4 broker default for message.max.bytes is 1,048,588; librdkafka's client default is lower.
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def source_admin(cfg: ReplicatorConfig, errors: list[str] | None = None) -> AdminClient:
    return AdminClient(with_logging(_admin_props(cfg.client_properties("source"), cfg.source_bootstrap_servers,
                                             errors)))


def target_admin(cfg: ReplicatorConfig, errors: list[str] | None = None) -> AdminClient:
    return AdminClient(with_logging(_admin_props(cfg.client_properties("target"), cfg.target_bootstrap_servers,
                                             errors)))


def _admin_props(props, servers: str, errors: list[str] | None) -> dict:
    out = {**props, "bootstrap.servers": servers}
    if errors is not None:
        # Why a connection failed (SASL handshake, TLS, refused) reaches only the error callback; the
        # failing call itself just says "transport failure".
        out["error_cb"] = lambda err: errors.append(err.str())
    return out


def source_consumer(cfg: ReplicatorConfig, across_a_link: bool = False) -> Consumer:
    """Reads assigned ranges only; never subscribes and never commits on the source. With
    `across_a_link`, its fetches and queue are sized for a source a long round trip away
    (`clients.source_link`)."""
    return Consumer(with_logging(_source_reader(cfg, across_a_link)))


def source_peeker(cfg: ReplicatorConfig) -> Consumer:
    """A source consumer that reads a record or so at each assigned position and is then closed (the
    age of the oldest record still to copy, `ops.lag.with_ages`)."""
    return Consumer(with_logging({
        **_source_reader(cfg),
        # With the copy's sizes, each lookup prefetched 4 MiB per lagging partition and fetched again
        # before the loop had paused them: 46 MB through a WAN link for one record in each of 8
        # partitions, every 5 s progress line while a backlog lasts, which doubled the bytes a
        # catch-up pulled across the link (BENCHMARKS.md, "Running across regions"). librdkafka
        # doubles a partition's fetch size by itself when its first batch does not fit. Set after
        # the user's properties: their fetch tuning is the copy's.
        "fetch.max.bytes": _PEEK_FETCH_BYTES,
        "max.partition.fetch.bytes": 64 * 1024,
        "queued.min.messages": 1,
        "queued.max.messages.kbytes": _PEEK_FETCH_BYTES // 1024,
    }))


# librdkafka refuses a fetch.max.bytes below message.max.bytes (default 1,000,000).
_PEEK_FETCH_BYTES = 1024 * 1024

# The copy consumer's fetch and queue sizes where the source is a link away (`clients.source_link`):
# beside the target at a 100 ms round trip, twice the sizes copied 15-20 % more; on loopback they were
# slower (BENCHMARKS.md, "Running across regions"). A partition's part of a response is not bounded
# below the response there: the broker cuts each partition's part at its bound in the middle of a
# batch, and the client drops that partial batch and fetches it again. Reading 1 KiB lz4 records in
# 1 MiB batches, the consumer received 9 % more bytes than the log held at 4 MiB per partition, 6 % at
# 8 and 1 % at 32; across a link priced by bandwidth those are bytes paid for.
_LINK_FETCH_SCALE = 2


def _source_reader(cfg: ReplicatorConfig, across_a_link: bool = False) -> dict:
    scale = _LINK_FETCH_SCALE if across_a_link else 1
    response = scale * 16 * 1024 * 1024
    return {
        # How long the broker holds a fetch that has nothing to return: arriving data (or a source
        # commit moving the last stable offset) answers it at once, so the wait sets only how often
        # idle partitions are fetched again (CPU on both sides, per partition: librdkafka has no
        # incremental fetch sessions, KIP-227). 2 s instead of librdkafka's 500 ms: a job idle at
        # 5,000 partitions used 3.2-5.7 % of a core (median 5.6) instead of 6.7-7.4 (BENCHMARKS.md,
        # "Many partitions"). What it costs: partitions assigned while a fetch is in flight (a
        # task's start, a retry) wait for its answer, up to 2 s when nothing arrives on the others.
        # Not longer: at 5 s a task's end-of-partition events (which move its position over the
        # markers at the end) came after 5 s tasks had ended (BENCHMARKS.md, "Many partitions").
        "fetch.wait.max.ms": 2000,
        # Prefetch sized to what a shard needs to keep its producer busy (issue 13). The records of a
        # fetch response share its buffer, which lives until the last of them is copied, and the 100 B
        # catch-up prefetched up to queued.min.messages (default 100,000) per partition: with 16/4 MiB
        # responses and 20,000 records per partition instead of 64/16 MiB and 100,000, each shard
        # worker peaked at ~190 MiB instead of ~330 at the same throughput (docs/design.md,
        # "The data path"). 16 MiB of queue instead of 64 was faster and ~100 MiB lighter (queue A/B).
        # Across a link, one fetch per round trip must carry what the copy needs in that time, and
        # no partition is bounded below the whole response: see `_LINK_FETCH_SCALE`.
        "fetch.max.bytes": response,
        "max.partition.fetch.bytes": response if across_a_link else 4 * 1024 * 1024,
        "queued.min.messages": 20_000,
        "queued.max.messages.kbytes": scale * 16 * 1024,
        # librdkafka postpones fetching a partition whose local queue is over its threshold by this
        # much (default 1 s); the copy loop drains a full queue in a few ms and then sat idle, which
        # cost 20 % of catch-up throughput and made exactly-once look 10 % slower (it pauses to commit).
        "fetch.queue.backoff.ms": 20,
        **cfg.client_properties("source"),
        "bootstrap.servers": cfg.source_bootstrap_servers,
        "group.id": names.source_reader_group(cfg.name),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        # An out-of-range start means retention overtook replication: surface it, never reset silently.
        "auto.offset.reset": "error",
    }


def target_producer(cfg: ReplicatorConfig, transactional_id: str | None) -> Producer:
    props = {
        "linger.ms": 20,
        "batch.size": 1024 * 1024,
        "queue.buffering.max.messages": 1_000_000,
        # Every commit first flushes what is queued, and the loop copies nothing meanwhile: a queue
        # that catch-up keeps full made each commit wait for 128 MiB to drain (catch-up 10-20 % faster
        # at 64 or 16 MiB, BENCHMARKS.md, queue A/B). Not below the largest record: one that does not
        # fit an empty queue is refused as "queue full" forever.
        "queue.buffering.max.kbytes": _MAX_MESSAGE_BYTES // 1024,
        "message.max.bytes": _MAX_MESSAGE_BYTES,
        "compression.type": "none",
        # A fresh producer per task: librdkafka holds its first broker connection back for half of
        # this (default 100 ms), which was most of init_transactions()' 55 ms. Retries still back
        # off exponentially up to reconnect.backoff.max.ms.
        "reconnect.backoff.ms": 10,
        **cfg.client_properties("target"),
        "bootstrap.servers": cfg.target_bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
    }
    props = with_logging(props)
    if transactional_id is None:
        return Producer(props)
    props["transactional.id"] = transactional_id
    props["transaction.timeout.ms"] = cfg.transaction_timeout_ms
    producer = Producer(props)
    # Connected before init_transactions(): without a broker connection yet, librdkafka retries the
    # coordinator lookup on a 500 ms timer (measured: half of all micro-batches paid it).
    with contextlib.suppress(KafkaException):  # unreachable: init_transactions() retries, reports it
        producer.list_topics(timeout=10)
    return producer


def _member_less(props: dict, bootstrap: str, group: str) -> dict:
    """A consumer under `group`'s id that never joins the group and never commits (unless asked
    to), reading committed data and stable offsets only."""
    return {
        **props,
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        # Stable offsets only: pending transactional commits are waited for, never read.
        "isolation.level": "read_committed",
    }


def group_handle(props: dict, bootstrap: str, group: str) -> Consumer:
    """A member-less handle on any group: reads its committed offsets and commits into it as the
    admin API does (generation -1, refused by the coordinator while the group has members)."""
    return Consumer(with_logging(_member_less(props, bootstrap, group)))


def group_reader(cfg: ReplicatorConfig) -> Consumer:
    """A member-less handle on the fake group (which the job's ACLs cover): reads its committed
    offsets, supplies its metadata."""
    return group_handle(cfg.client_properties("target"), cfg.target_bootstrap_servers, cfg.group)


def group_entries_reader(cfg: ReplicatorConfig) -> Consumer:
    """A member-less handle on the fake group that reads its pending (transactional) commits too:
    for callers that need only the entries' metadata, where a stable read would wait out a
    transaction a killed run left open (librdkafka asks for stable offsets exactly when its
    isolation level is read_committed)."""
    return Consumer(with_logging({**_member_less(cfg.client_properties("target"), cfg.target_bootstrap_servers,
                                                 cfg.group), "isolation.level": "read_uncommitted"}))


def target_pin_handle(cfg: ReplicatorConfig) -> Consumer:
    """A member-less handle on the source group that pins the target's cluster id."""
    return group_handle(cfg.client_properties("source"), cfg.source_bootstrap_servers,
                        names.target_pin_group(cfg.name))


def target_probe(cfg: ReplicatorConfig) -> Consumer:
    """Reads one target partition read_committed from a given offset (a commit in doubt, see
    `commit_outcome`)."""
    return Consumer(with_logging({
        **_member_less(cfg.client_properties("target"), cfg.target_bootstrap_servers, cfg.group),
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 100,
    }))


def reader_to_end(props: dict, bootstrap: str, group: str, fetch_wait_ms: int | None = None) -> Consumer:
    """Reads assigned partitions read_committed from the earliest offset to their end
    (end-of-partition events on), under `group`'s id, never joined or committed. `fetch_wait_ms` is
    a default the user's properties may override (short probes want answers at once)."""
    wait = {} if fetch_wait_ms is None else {"fetch.wait.max.ms": fetch_wait_ms}
    return Consumer(with_logging({
        **wait,
        **_member_less(props, bootstrap, group),
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }))


def translator_reader(cfg: ReplicatorConfig, role: str = "target", fetch_wait_ms: int | None = None) -> Consumer:
    """`reader_to_end` on `role`'s cluster under the translator group's id: the translation,
    checkpoint and promotion-marker reads."""
    servers = cfg.source_bootstrap_servers if role == "source" else cfg.target_bootstrap_servers
    return reader_to_end(cfg.client_properties(role), servers, names.translator_group(cfg.name), fetch_wait_ms)


def target_writer(cfg: ReplicatorConfig, linger_ms: int | None = None) -> Producer:
    """A non-transactional idempotent producer on the target, every write acknowledged by all
    in-sync replicas: the job's own records outside the copy (checkpoints, the promotion marker)."""
    linger = {} if linger_ms is None else {"linger.ms": linger_ms}
    return Producer(with_logging({**cfg.client_properties("target"), "bootstrap.servers": cfg.target_bootstrap_servers,
                                  "enable.idempotence": True, "acks": "all", **linger}))


def kafka_error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None
