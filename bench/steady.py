"""Steady state (fixed produce rates: end-to-end latency, bounded lag) and restart (SIGKILL -> first
new committed record) for one contender on a fresh source topic of `job.size`-byte records."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from array import array
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench import kafka_ops, reaper
from bench.contenders import Contender, Job
from bench.proctree import Tree
from replicator.clients.kafka_clients import with_logging
from replicator.engine import heap

CONTENDERS = ("replicator-eos", "mm2-eos", "replicator-eos-fresh", "replicator-eos-fresh-norecord")
# Measured only when `--only` names them: what the translation index costs a record's latency.
ON_REQUEST = ("replicator-eos-noindex", "replicator-eos-base")
# Measured for their restart only: the same start, first minute and steps before the kill as the
# others (the time a fresh install's background recording has), none of it reported.
RESTART_ONLY = ("replicator-eos-fresh", "replicator-eos-fresh-norecord")
# Fractions of the maximum rate: coarse at the bottom, 12.5 % apart near the top, so the highest
# bounded rate of two contenders is not decided by a doubling step.
FRACTIONS = (0.25, 0.5, 0.75, 0.875, 1.0, 1.125)
LOAD_PROCESS_RATE = 60_000  # records/s one paced Python producer is asked for at most; more: several
# A step is bounded when, at its end, the replica's last stable offsets (what any read_committed reader
# could have read) are within this many seconds of input of the source's.
BOUNDED_LAG_S = 2.0
READY_TIMEOUT_S = 240.0
DRAIN_S = 20.0
# The first minute after a start: how long, and the width of the windows whose worst p99 is reported
# (a stall of a few seconds disappears in a whole minute's p99 when it hits under 1 % of the records).
FIRST_MINUTE_S = 60.0
FIRST_MINUTE_RATE = 2_000  # records/s: the rate of the user's probe in issue 51
WINDOW_S = 10.0
RESTART_TIMEOUT_S = 240.0
# The longest a fresh install's background recording of the class-data archive is waited for before
# its restart (bench.contenders.Replicator.before_restart).
ARCHIVE_TIMEOUT_S = 900.0


class Watcher:
    """A read_committed consumer on the replica: when each record became visible, and how late.

    It runs in a process of its own. As a thread of the bench process it shared one GIL with the
    process-tree sampler and the load bookkeeping, and on a saturated box it fell 0.4 M records
    behind records already visible on the target (BENCHMARKS.md, "How it is measured"): its backlog counted
    as the contender's latency. Only the count, the restart probe and the percentiles cross over."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        # spawn, not fork: the bench process already runs librdkafka and kafka-python threads.
        ctx = mp.get_context("spawn")
        self._count = ctx.Value("q", 0, lock=False)
        self._hit = ctx.Value("d", 0.0, lock=False)
        self._stop = ctx.Event()
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_watch, name="bench-watcher", daemon=True,
                                 args=(bootstrap, topic, partitions, self._count, self._hit, self._stop, child))

    def start(self) -> None:
        self._proc.start()
        reaper.watch(self._proc.pid)

    def count(self) -> int:
        return self._count.value

    def probe(self, ends: dict[int, int]) -> None:
        """From now on, `probe_hit()` is when the first record at or past `ends` became visible."""
        self._conn.send(("probe", ends))

    def probe_hit(self) -> float | None:
        return self._hit.value or None

    def percentiles(self, t0: float, t1: float) -> dict:
        """Latency percentiles of the records created in [t0, t1), and how many there were."""
        self._conn.send(("percentiles", t0, t1))
        while not self._conn.poll(1.0):
            if not self._proc.is_alive():
                return {"p50_s": float("nan"), "p95_s": float("nan"), "p99_s": float("nan"), "received": 0,
                        "error": f"the watcher process exited with {self._proc.exitcode}"}
        return self._conn.recv()

    def stop(self) -> None:
        self._stop.set()
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)


def _watch(bootstrap: str, topic: str, partitions: int, count, hit, stop, conn) -> None:
    os.setsid()  # its own process group, which the reaper kills if the bench dies without stopping it
    # The watcher's reads promoted their records into the old generation, and the full collections
    # that followed (up to ~460 ms at 100k records/s of 100 B) stopped it while records arrived:
    # their latency was the bench's own, for every contender alike.
    heap.spare_batches(kafka_ops.READ_MOST)
    while not kafka_ops.topic_exists(bootstrap, topic):
        if stop.wait(0.5):
            return
    ts = array("d")  # source CreateTime, seconds
    seen = array("d")  # wall time the record was delivered here
    probe: dict[int, int] | None = None
    c = Consumer(with_logging({"bootstrap.servers": bootstrap, "group.id": "bench-watcher",
                               "enable.auto.commit": False, "isolation.level": "read_committed",
                               "fetch.wait.max.ms": 10,
                               # librdkafka's default pauses a partition's fetches for 1 s once its
                               # local queue is full: a reader that is behind would stay behind.
                               "fetch.queue.backoff.ms": 10}))
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        while not stop.is_set():
            while conn.poll():
                ask = conn.recv()
                if ask[0] == "probe":
                    probe = ask[1]
                else:
                    conn.send(_percentiles(ts, seen, ask[1], ask[2]))
            msgs = kafka_ops.arrived(c, 0.05)
            if not msgs:
                continue
            now = time.time()
            for m in msgs:
                if m.error() is not None:
                    continue
                ts.append(m.timestamp()[1] / 1000)
                seen.append(now)
                if probe is not None and not hit.value and m.offset() >= probe.get(m.partition(), 0):
                    hit.value = now
            count.value = len(seen)
    finally:
        c.close()


def _percentiles(ts: array, seen: array, t0: float, t1: float) -> dict:
    pairs = [(t, s) for t, s in zip(ts, seen, strict=False) if t0 <= t < t1]
    lat = sorted(s - t for t, s in pairs)
    return {"p50_s": _pct(lat, 0.50), "p95_s": _pct(lat, 0.95), "p99_s": _pct(lat, 0.99), "received": len(lat),
            "first_created": min((t for t, _ in pairs), default=None)}


class Load:
    """`rate` records/s for `seconds`, split over as many paced producer processes as it needs."""

    def __init__(self, job: Job, rate: float, seconds: float) -> None:
        n = max(1, -(-int(rate) // LOAD_PROCESS_RATE))
        cmd = [sys.executable, "-m", "bench.load", "--bootstrap", job.source, "--topic", job.topic,
               "--size", str(job.size), "--rate", str(rate / n), "--seconds", str(seconds), "--shape", job.shape]
        env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        self.trees = [Tree(cmd, job.log("load"), env=env) for _ in range(n)]

    def running(self) -> bool:
        return any(t.running() for t in self.trees)

    def stop(self) -> None:
        for t in self.trees:
            t.stop()


def _load(job: Job, rate: float, seconds: float) -> Load:
    return Load(job, rate, seconds)


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def windows(t0: float, t1: float, width: float = WINDOW_S) -> list[tuple[float, float]]:
    """[t0, t1) cut into `width`-second windows from t0; a last window shorter than half of `width`
    joins the one before (a 2-record window's p99 says nothing)."""
    out = []
    a = t0
    while a < t1:
        out.append((a, min(a + width, t1)))
        a += width
    if len(out) > 1 and out[-1][1] - out[-1][0] < width / 2:
        out[-2:] = [(out[-2][0], out[-1][1])]
    return out


def worst_window(per_window: list[dict]) -> dict | None:
    """The window with the highest p99 (NaN, an empty window, never wins)."""
    have = [w for w in per_window if w["received"] and w["p99_s"] == w["p99_s"]]
    return max(have, key=lambda w: w["p99_s"]) if have else None


def _first_minute(contender: Contender, job: Job, run: int, tree: Tree, watcher: Watcher,
                  source: kafka_ops.CommittedEnds, rate: float, seconds: float) -> dict:
    """`rate` records/s for `seconds` on a contender that has just started (its first record is
    visible): latency over the whole span and per 10 s window counted from the first record created."""
    t0 = time.time()
    cpu0 = tree.sample()[0]
    load = _load(job, rate, seconds)
    while load.running():
        tree.sample()
        time.sleep(0.2)
    t1 = time.time()
    cpu1 = tree.sample()[0]
    sent = source.total()
    drain_until = time.monotonic() + DRAIN_S
    while watcher.count() < sent and time.monotonic() < drain_until:
        tree.sample()
        time.sleep(0.2)
    whole = watcher.percentiles(t0, t1)
    first = whole.pop("first_created", None) or t0
    per_window = []
    for a, b in windows(first, t1):
        w = watcher.percentiles(a, b)
        w.pop("first_created", None)
        per_window.append({"from_s": a - first, "to_s": b - first, **w})
    worst = worst_window(per_window)
    return {"contender": contender.key, "run": run, "size": job.size, "shape": job.shape, "rate": round(rate),
            "seconds": t1 - first, **whole, "windows": per_window,
            "worst_window_p99_s": worst["p99_s"] if worst else float("nan"),
            "worst_window_from_s": worst["from_s"] if worst else float("nan"), "cpu_s": cpu1 - cpu0}


def measure(contender: Contender, job: Job, run: int, max_rate: float, step_s: float,
            fractions: tuple[float, ...] = FRACTIONS, restart_too: bool = True, first_rate: float = 0.0,
            first_s: float = 0.0) -> tuple[list[dict], dict, dict | None]:
    """If `first_s`: the first minute after the start at `first_rate`; then rate steps (`fractions`
    of `max_rate`, `step_s` each) until one leaves the lag unbounded, then, if `restart_too`, the
    restart measurement at a quarter of `max_rate`."""
    kafka_ops.create_topic(job.source, job.topic, job.partitions)
    source = kafka_ops.CommittedEnds(job.source, job.topic, job.partitions)
    target = kafka_ops.CommittedEnds(job.target, job.replica, job.partitions)
    watcher = Watcher(job.target, job.replica, job.partitions)
    watcher.start()
    tree = contender.launch(job)
    steps: list[dict] = []
    restart: dict = {"contender": contender.key, "run": run}
    first: dict | None = None
    trees = [tree]
    try:
        warm = _load(job, 100, READY_TIMEOUT_S)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while watcher.count() == 0 and time.monotonic() < deadline and tree.running():
            tree.sample()
            time.sleep(0.2)
        warm.stop()
        if watcher.count() == 0:
            restart["error"] = f"no record replicated within {READY_TIMEOUT_S:.0f}s: {tree.tail(8)}"
            return steps, restart, first
        if first_s > 0:
            first = _first_minute(contender, job, run, tree, watcher, source, first_rate, first_s)
        for fraction in fractions:
            rate = round(max_rate * fraction)
            sent0 = source.total()
            t0 = time.time()
            cpu0 = tree.sample()[0]
            load = _load(job, rate, step_s)
            while load.running():
                tree.sample()
                time.sleep(0.2)
            t1 = time.time()
            cpu1 = tree.sample()[0]
            sent = source.total()
            read = watcher.count()
            # Judged on what the replica shows, not on what the watcher has read: on a saturated box
            # the watcher (then a thread of this process) fell 0.4 M records behind records already
            # visible on the target, under our job's larger transactions only, and that counted as
            # the contender's lag (BENCHMARKS.md, "How it is measured"). Transaction markers make `visible`
            # overstate by one per partition and commit: 13-15k by a run's top step there.
            visible = target.total()
            lag = sent - read
            behind = sent - visible
            drain_until = time.monotonic() + DRAIN_S
            while watcher.count() < source.total() and time.monotonic() < drain_until:
                tree.sample()
                time.sleep(0.2)
            lat = watcher.percentiles(t0, t1)
            bounded = behind <= BOUNDED_LAG_S * rate
            # What the load generator really produced: on a saturated box it falls behind the rate asked.
            lat.pop("first_created", None)
            steps.append({"contender": contender.key, "run": run, "size": job.size, "shape": job.shape,
                          "fraction": fraction,
                          "rate": rate, "produced_per_s": (sent - sent0) / max(t1 - t0, 1e-9),
                          **lat, "behind_end": behind, "bounded": bounded,
                          # The watcher's own backlog is in here too; its latencies include it.
                          "lag_end": lag, "visible_unread_end": visible - read,
                          # The contender's whole process tree, during the step (not the drain): CPU per
                          # GB offered, the line issue 13 asks for beside latency.
                          "cpu_s": cpu1 - cpu0,
                          "cpu_s_per_gb": (cpu1 - cpu0) / max((sent - sent0) * job.size / 1e9, 1e-9)})
            if not bounded:
                break  # higher rates cannot be bounded either
        if restart_too:
            restart.update(_restart(contender, job, tree, trees, watcher, target, max_rate))
        return steps, restart, first
    finally:
        watcher.stop()
        for t in trees:
            t.stop()
        restart["peak_rss_mb"] = max(t.peak_rss for t in trees) / 2**20
        restart["peak_pss_mb"] = max(t.peak_pss for t in trees) / 2**20


def _restart(contender: Contender, job: Job, tree: Tree, trees: list[Tree], watcher: Watcher,
             target: kafka_ops.CommittedEnds, max_rate: float) -> dict:
    waited = contender.before_restart(job, ARCHIVE_TIMEOUT_S)
    load = _load(job, round(max_rate * 0.25), RESTART_TIMEOUT_S + 30)
    try:
        time.sleep(5)
        killed = time.time()
        tree.kill()
        time.sleep(1)  # a commit the broker was completing at the kill is visible by now
        ends: dict[int, int] = {}
        while len(ends) < job.partitions:
            ends = target.ends()
        watcher.probe(ends)
        relaunched = contender.launch(job)
        trees.append(relaunched)
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while watcher.probe_hit() is None and time.monotonic() < deadline:
            relaunched.sample()
            time.sleep(0.1)
    finally:
        load.stop()
    hit = watcher.probe_hit()
    if hit is None:
        return {**waited, "error": f"no new record within {RESTART_TIMEOUT_S:.0f}s of the restart: "
                                   f"{relaunched.tail(8)}"}
    return {**waited, "restart_s": hit - killed}
