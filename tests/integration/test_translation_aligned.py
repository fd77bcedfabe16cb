"""Source offsets the translation index does not reach (it was enabled late, or holds no entry for a
partition) translate by an aligned read of both logs back from the nearest known pair: exact, or
refused with the reason; never a guess."""

from __future__ import annotations

import re

from confluent_kafka import Producer

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups import translate
from replicator.groups.index_topic import ensure_index_topic
from replicator.groups.translate import Translator
from replicator.topics import sync as topic_sync
from tests.engine_checks import sample_records
from tests.index_helpers import next_record_view, positions_of_every_kind, read_index
from tests.kafka_helpers import create_topic, end_offsets, produce_transactional, read_all


def _exact(translator: Translator, src: str, dst: str, topic: str, x: int, method: str) -> None:
    tr = translator.translate(topic, 0, x)
    assert tr.exact and tr.method == method and tr.target_offset is not None, (x, tr)
    assert next_record_view(dst, topic, 0, tr.target_offset) == next_record_view(src, topic, 0, x), (x, tr)


def test_offsets_the_index_does_not_reach_translate_by_an_aligned_read(sandbox, unique, monkeypatch):
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    late, foreign, bare = (f"xa-{kind}-{unique}" for kind in ("late", "foreign", "bare"))
    name = f"xa-{unique}"
    for n, topic in enumerate((late, foreign, bare)):
        create_topic(src, topic, 1)
        # Aborted transactions and markers all through the log: the two logs' offsets drift apart.
        produce_transactional(src, topic, sample_records(1_200, start=n * 10_000, partitions=1), f"s{n}-{unique}",
                              per_txn=40, abort_every=3)
    settings = {"source_bootstrap_servers": src, "target_bootstrap_servers": dst, "name": name, "shards": 1,
                "topics": "|".join(re.escape(t) for t in (late, foreign, bare)), "max_records_per_transaction": 100}
    off = config.load({**settings, "translation_index": False}, environ={})
    on = config.load(settings, environ={})
    source, target = kafka_clients.source_admin(on), kafka_clients.target_admin(on)
    topic_sync.ensure_target_topics(on, source, target, topic_sync.discover(on, source))
    ensure_index_topic(on, target, [late, foreign, bare])
    ends = {t: end_offsets(src, t, 1)[0] for t in (late, foreign, bare)}
    half = {t: ends[t] // 2 for t in (late, foreign)}

    # The first half copied with the index off, then someone else writes into one target partition,
    # then the job runs with the index on; one topic is never indexed at all.
    ShardCopier(off, 0).copy([CopyRange(t, t, 0, 0, half[t]) for t in (late, foreign)]
                             + [CopyRange(bare, bare, 0, 0, ends[bare])])
    intruder = Producer({"bootstrap.servers": dst})
    intruder.produce(foreign, value=b"not from the source", partition=0)
    intruder.flush(30)
    ShardCopier(on, 0).copy([CopyRange(t, t, 0, 0, ends[t]) for t in (late, foreign)])
    entries = read_index(dst, name)
    assert (bare, 0) not in entries
    first = entries[(late, 0)][0]
    assert 0 < first.begin <= half[late]

    translator = Translator(on)
    try:
        # Enabled late: every kind of position below the first entry, exact by an aligned read;
        # above it, by the index.
        records = read_all(src, late, 1)[0]
        below = [m for m in records if m.offset() < first.begin]
        kinds = positions_of_every_kind(below, 0, first.begin)
        for x in sorted({*kinds.values(), first.begin - 1, below[-1].offset()} - {first.begin}):
            _exact(translator, src, dst, late, x, "aligned-read")
        _exact(translator, src, dst, late, first.begin, "index")
        _exact(translator, src, dst, late, ends[late] - 1, "index")

        # Never indexed: aligned back from the last pair the fake group's commit metadata records.
        records = read_all(src, bare, 1)[0]
        for x in sorted({*positions_of_every_kind(records, 0, ends[bare]).values(), records[-1].offset()}):
            _exact(translator, src, dst, bare, x, "aligned-read")

        # A record no source holds sits between the two halves: nothing below it is translatable.
        tr = translator.translate(foreign, 0, 0)
        assert tr.target_offset is None and not tr.exact and "not aligned" in tr.reason, tr
        assert "older than the translation index" in tr.reason

    finally:
        translator.close()
    # Too far back to compare: refused, not estimated (a new translator: answers are remembered).
    monkeypatch.setattr(translate, "MAX_ALIGNED_RECORDS", 10)
    translator = Translator(on)
    try:
        tr = translator.translate(late, 0, 0)
        assert tr.target_offset is None and "over 10 records" in tr.reason, tr
    finally:
        translator.close()
