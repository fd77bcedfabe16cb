"""Reading partitions to their end: the job's own topics (index, checkpoints, promotion marker) and
the aligned reads of translation are all read this way, with an end-of-partition consumer
(`kafka_clients.translator_reader`)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition


class ReadError(RuntimeError):
    """A partition could not be read; `error` is the consumer's (None: it stalled)."""

    def __init__(self, message: str, error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.error = error


def read_to_end(consumer: Consumer, starts: Iterable[TopicPartition], stall_s: float = 60.0,
                poll_s: float = 1.0) -> Iterator[Message]:
    """Committed records of the partitions from their start offsets until every one reached its
    end, for a caller that may stop early: close the generator (`contextlib.closing`) to unassign
    at once. ReadError when the consumer reports an error, or returns neither a record nor an end
    for `stall_s`."""
    starts = list(starts)
    what = ", ".join(f"{tp.topic}[{tp.partition}] from {tp.offset}" for tp in starts)
    left = {(tp.topic, tp.partition) for tp in starts}
    consumer.assign(starts)
    deadline = time.monotonic() + stall_s
    try:
        while left:
            # consume(n, timeout) waits out the whole timeout unless n records arrive, even after the
            # partition's end: a probe of a few index records took a full second (a 30-group sync
            # round 160 s). poll() returns at the first record or end-of-partition event; consume
            # with no wait then takes what is already fetched.
            first = consumer.poll(poll_s)
            msgs = [first, *consumer.consume(500, 0)] if first is not None else []
            if not msgs and time.monotonic() > deadline:
                raise ReadError(f"reading {what}: no record and no end in {stall_s:g}s")
            deadline = time.monotonic() + stall_s if msgs else deadline
            for m in msgs:
                err = m.error()
                if err is None:
                    yield m
                elif err.code() == KafkaError._PARTITION_EOF:
                    left.discard((m.topic(), m.partition()))
                    if not left:
                        return  # what follows in the batch arrived after the end was reached
                else:
                    raise ReadError(f"reading {what}: {err.str()}", err)
    finally:
        consumer.unassign()
