"""Catch-up: a preloaded topic, a contender started cold, first->last record visible on the target."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from bench import boxcpu, kafka_ops
from bench.contenders import ConsumerPerf, Contender, Job, parse_consumer_perf

POLL_S = 0.1


@dataclass
class CatchUp:
    contender: str
    size: int
    records: int
    run: int
    ok: bool
    records_per_s: float = 0.0
    mb_per_s: float = 0.0
    cpu_s_per_gb: float = 0.0
    first_visible_s: float = 0.0  # launch -> first record written (start-up cost, not in the rate)
    measured_records: int = 0
    peak_rss_mb: float = 0.0
    peak_pss_mb: float = 0.0
    peak_rss_by_role: dict = field(default_factory=dict)  # proctree.Tree.peak_by_role
    # The rest of the box over the same window (bench/boxcpu.py): what caps the ratio between contenders.
    brokers_cpu_s_per_gb: float = 0.0
    box_idle_share: float = 0.0
    box_steal_share: float = 0.0
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def measure(contender: Contender, job: Job, run: int, timeout: float) -> CatchUp:
    result = CatchUp(contender.key, job.size, job.records, run, ok=False)
    if not contender.copies:
        return _measure_reader(contender, job, result, timeout)
    (topic, partitions), *more = contender.outputs(job)
    ends = kafka_ops.CommittedEnds(job.target, topic, partitions, tuple(more))
    launched = time.monotonic()
    tree = contender.launch(job)
    first = None  # (time, visible, cpu)
    box0 = None
    try:
        while True:
            now = time.monotonic()
            cpu, _ = tree.sample()
            # Start: the first record written to the target (committed or not), so a contender's
            # first transaction counts in full; end: the last record visible to read_committed.
            if first is None and ends.total(committed=False) > 0:
                first = (now, 0, cpu)
                box0 = boxcpu.sample(job.broker_pids)
            visible = ends.total()
            if visible >= job.records:
                break
            if now - launched > timeout:
                result.error = f"timed out after {timeout:.0f}s with {visible} of {job.records} visible"
                return result
            if not tree.running() and tree.proc.returncode != 0:
                result.error = f"exited {tree.proc.returncode} with {visible} visible: {tree.tail(8)}"
                return result
            time.sleep(POLL_S)
        t0, n0, cpu0 = first
        n = job.records - n0
        if now <= t0:
            result.error = "everything appeared within one poll: no rate to measure"
            return result
        result.ok = True
        result.first_visible_s = t0 - launched
        result.measured_records = n
        result.records_per_s = n / (now - t0)
        result.mb_per_s = result.records_per_s * job.size / 1e6
        result.cpu_s_per_gb = (cpu - cpu0) / (n * job.size / 1e9)
        box = boxcpu.between(box0, boxcpu.sample(job.broker_pids), n * job.size / 1e9)
        result.brokers_cpu_s_per_gb = box.brokers_cpu_s_per_gb
        result.box_idle_share, result.box_steal_share = box.idle_share, box.steal_share
        return result
    finally:
        tree.stop()
        result.peak_rss_mb = tree.peak_rss / 2**20
        result.peak_pss_mb = tree.peak_pss / 2**20
        result.peak_rss_by_role = tree.peak_by_role


def _measure_reader(contender: Contender, job: Job, result: CatchUp, timeout: float) -> CatchUp:
    assert isinstance(contender, ConsumerPerf)
    launched = time.monotonic()
    tree = contender.launch(job)
    cpu = 0.0
    try:
        while tree.running() and time.monotonic() - launched < timeout:
            cpu, _ = tree.sample()
            time.sleep(POLL_S)
    finally:
        tree.stop()
    parsed = parse_consumer_perf(tree.log.read_text(errors="replace"))
    result.peak_rss_mb = tree.peak_rss / 2**20
    result.peak_pss_mb = tree.peak_pss / 2**20
    result.peak_rss_by_role = tree.peak_by_role
    if tree.proc.returncode != 0 or parsed is None:
        result.error = f"exited {tree.proc.returncode}: {tree.tail(8)}"
        return result
    seconds, rate = parsed
    result.ok = True
    result.records_per_s = rate
    result.mb_per_s = rate * job.size / 1e6
    result.measured_records = job.records
    # The whole JVM's CPU (start-up included): an upper bound for a reader.
    result.cpu_s_per_gb = cpu / (job.records * job.size / 1e9)
    result.first_visible_s = time.monotonic() - launched - seconds
    return result
