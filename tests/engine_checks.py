"""The engine's exactly-once checks on real brokers, shared by the single-version tests
(tests/integration/test_engine.py) and the Kafka version matrix (tests/integration/test_versions.py):
the sample records, live source traffic, SIGKILLed runs and the final clean catch-up."""

from __future__ import annotations

import glob
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.kafka_helpers import end_offsets, fake_group_offsets
from tests.replicator_process import ReplicatorProcess, wait_until

PARTITIONS = 4


def sample_records(n: int, start: int = 0, partitions: int = PARTITIONS) -> list[tuple]:
    """Keys, null keys, null values (tombstones), repeated header keys, explicit timestamps."""
    base_ts = int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(start, start + n):
        key = None if i % 10 == 0 else f"key-{i % 97}".encode()
        value = None if i % 13 == 0 else f"value-{i}-".encode() + bytes(i % 50)
        headers = [("h", b"first"), ("h", f"{i}".encode()), ("empty", None)] if i % 3 else None
        out.append((i % partitions, key, value, headers, base_ts + i))
    return out


def caught_up(sandbox, topic: str, group: str, partitions: int = PARTITIONS, target_topic: str | None = None):
    def check() -> bool:
        ends = end_offsets(sandbox.source.bootstrap, topic, partitions)
        committed = fake_group_offsets(sandbox.target.bootstrap, group)
        return all(committed.get((target_topic or topic, p), -1) == ends[p] for p in range(partitions))
    return check


def target_is_stable(sandbox, topic: str, partitions: int = PARTITIONS) -> None:
    """No transaction left open on the target: last stable offset == high watermark everywhere."""
    lso = end_offsets(sandbox.target.bootstrap, topic, partitions, committed=True)
    hw = end_offsets(sandbox.target.bootstrap, topic, partitions, committed=False)
    assert lso == hw, f"open transaction left on the target: LSO {lso} != HW {hw}"


@contextmanager
def feeding(feed: Callable[[threading.Event], None]) -> Iterator[Callable[[], None]]:
    """Runs `feed(stop)` in a thread (live source traffic) for the block. Yields `halt`, which sets
    `stop` and waits for the thread; it runs again on the way out, whatever happened."""
    stop = threading.Event()
    thread = threading.Thread(target=feed, args=(stop,))
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join()

    try:
        yield halt
    finally:
        halt()


def leftover_scratch(name: str) -> None:
    # What a SIGKILLed run leaves behind (Spark checkpoint, temp dirs) is deleted: never needed.
    for path in glob.glob(f"{tempfile.gettempdir()}/replicator-{name}-*"):
        shutil.rmtree(path, ignore_errors=True)


def run_then_crash(sandbox, topic: str, name: str, log: Path, seconds: float, *args: str,
                   start_timeout: float = 180) -> None:
    """Runs the job until it replicates, lets it work `seconds` more, then SIGKILLs it and deletes
    what it left behind (its Spark checkpoint)."""
    job = ReplicatorProcess(sandbox, topic, name, log, *args).start()
    wait_until(lambda: "progress:" in job.log(), start_timeout, "the job to run", job)
    time.sleep(seconds)
    job.sigkill()
    leftover_scratch(name)


def final_catch_up(sandbox, topic: str, name: str, log: Path, timeout: float, what: str) -> None:
    """A clean two-shard run after the crashes: it catches up with the source and stops cleanly."""
    with ReplicatorProcess(sandbox, topic, name, log, "--shards", "2") as job:
        wait_until(caught_up(sandbox, topic, f"__replicator.{name}"), timeout, what, job)
        assert job.sigterm() == 0
