"""Translation back across a failover, for a reverse job that `failback` prepared.

The reverse job reads the new primary, whose partitions up to the failover cut hold the forward
job's copies of the old source's records, and writes back to the old source. Its own index starts at
the cut, so an application group before the cut on the new primary sits in data the reverse job
never copied. That position translates through the forward job's index on the new primary, read
backwards: the entry whose copies hold target offset X gives the source offset of the same record
(`IndexEntry.source_of`), where a consumer on the old source reads next what it would read next at X
on the new primary. The cut itself maps to the marker's source offset. Up to the cut the old source
holds those same records; beyond it come what `divergence` lists, then the reverse job's copies. So
a group at or before the cut reads the diverged records on the old source, and a group past it
(translated by the reverse job's own index) does not.

Nothing is estimated: a position older than the forward index, in an entry another producer wrote
into, or among records the index does not describe (it was off for a while) is not translated.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from confluent_kafka import Consumer, KafkaException

from replicator import names
from replicator.config import ReplicatorConfig
from replicator.groups import promotion
from replicator.groups.checkpoints import CheckpointStore
from replicator.groups.promotion import CutPoint
from replicator.groups.translate import IndexReader, Translator, read_records

log = logging.getLogger(__name__)
_RETRY_S = 60.0


class BackTranslator:
    """Maps new-primary offsets up to the forward job's cut to old-source offsets. `consumer`
    reads the new primary (the reverse job's source), where the forward job's index and marker are."""

    def __init__(self, cfg: ReplicatorConfig, forward_job: str, consumer: Consumer) -> None:
        self.cfg = cfg
        self.forward_job = forward_job
        self.consumer = consumer
        self.cut: dict[tuple[str, int], CutPoint] = {}
        self.index: IndexReader | None = None
        self.unavailable = ""  # why nothing before the cut can be translated, when so
        # A third leg (failback of a reverse job): the job before the reverse one copied the same
        # direction as ours, into our target; its index answers what the reverse job never copied.
        self.earlier: Translator | None = None
        self._loaded = False
        self._next_try = 0.0

    def _load(self) -> None:
        """The forward job's marker and index, read once; a failure (the new primary not answering
        at the job's start) is retried a minute later rather than turning this off for the run."""
        if self._loaded or time.monotonic() < self._next_try:
            return
        forward = promotion.forward_view(self.cfg, self.forward_job)
        try:
            marker = promotion.read_marker(forward)
            topic = names.index_topic(self.forward_job)
            md = self.consumer.list_topics(topic, timeout=30).topics.get(topic)
            earlier = CheckpointStore(forward, read_only=True).load().forward_job
        except (KafkaException, RuntimeError) as e:
            self._next_try = time.monotonic() + _RETRY_S
            log.warning("the forward job %r's promotion marker could not be read (retried in %.0f s): %s",
                        self.forward_job, _RETRY_S, e, extra={"event": "back_translation_unavailable"})
            return
        self._loaded = True
        if marker is None:
            log.warning("no promotion marker of the forward job %r on the source: groups before its cut are "
                        "not translated", self.forward_job, extra={"event": "back_translation_unavailable"})
            return
        # The reverse job's source topics are the forward job's target topics.
        self.cut = {(c.target_topic, c.partition): c for c in marker.cut}
        if md is not None and md.error is None and md.partitions:
            self.index = IndexReader(self.consumer, self.forward_job, len(md.partitions))
        else:
            self.unavailable = f"the forward job {self.forward_job!r} left no translation index on the source"
        if earlier:
            try:
                self.earlier = Translator(dataclasses.replace(self.cfg, name=earlier, offsets_group=""))
            except (KafkaException, RuntimeError) as e:  # the target not answering: all of it again later
                self._loaded, self._next_try = False, time.monotonic() + _RETRY_S
                log.warning("the job %r before the forward job could not be read (retried in %.0f s): %s",
                            earlier, _RETRY_S, e, extra={"event": "back_translation_unavailable"})

    def close(self) -> None:
        if self.earlier is not None:
            self.earlier.close()

    def before_cut(self, topic: str, partition: int, x: int) -> bool:
        """True for a position in the forward job's copy, up to the cut: this class answers it."""
        self._load()
        c = self.cut.get((topic, partition))
        return c is not None and x <= c.target_end

    def translate(self, topic: str, partition: int, x: int) -> tuple[int | None, str]:
        """(old-source offset, "") for new-primary offset x up to the cut, or (None, why not)."""
        c = self.cut[(topic, partition)]
        if x == c.target_end and c.source_next >= 0:
            return c.source_next, ""  # the cut itself: the marker pairs the two
        why = f"offset {x} is before the failover cut of {self.forward_job!r}"
        if self.index is None:
            return (self._before_the_reverse_copy(topic, partition, x, why) if self.earlier is not None
                    else (None, f"{why}, and {self.unavailable}"))
        found = self.index.last_entry_landing_at_or_before(topic, partition, x)
        if found is None:
            return self._before_the_reverse_copy(topic, partition, x, why)
        offset, e = found
        if not e.contiguous:
            return None, f"{why}, in a transaction of the forward job that another producer wrote into"
        if x >= e.end_target:
            # At the entry's commit marker or past it: exact only if no committed record lies between
            # it and the next entry's first copy (or the cut), which an index switched off leaves.
            nxt = self.index.next_entry(topic, partition, offset)
            stop = nxt[1].first_target if nxt else c.target_end
            if read_records(self.consumer, topic, partition, e.end_target, stop, limit=1):
                return None, f"{why}, among records the forward job's translation index does not describe"
        return e.source_of(x), ""

    def _before_the_reverse_copy(self, topic: str, partition: int, x: int, why: str) -> tuple[int | None, str]:
        """x older than everything the forward (reverse) job copied: in a third leg that is the
        original log, which the job before it copied into our target. Exact there, or refused."""
        if self.earlier is None:
            return None, f"{why}, and older than the forward job's translation index"
        tr = self.earlier.translate(topic, partition, x)
        if tr.target_offset is None or not tr.exact or tr.ahead:
            return None, (f"{why}, older than its translation index, and not exact through the job before it, "
                          f"{self.earlier.cfg.name!r}: {tr.reason or f'{tr.ahead} offsets it never copied'}")
        return tr.target_offset, ""
