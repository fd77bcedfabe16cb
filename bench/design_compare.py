"""Design check: the engine's fused data path (A) against the Arrow data path the issue recommended (B).

    .venv/bin/python bench/design_compare.py [--small 400000x100] [--large 200000x1024] [--rounds 3]
                                             [--wait-load 3 --wait-minutes 30] [--report bench/DESIGN.md]

A is the real engine (`replicator run`): Spark carries one row per shard describing its ranges, and
the writer task consumes and produces in one Python process. B is bench/design_arrow_prototype.py:
the reader task yields Arrow batches of the records, Spark carries them through the JVM to an Arrow
writer that produces them transactionally. Same planner, clients, shard count, transaction bounds
and Spark settings; only the data path differs.

The script starts its own sandbox (port shift 700, .sandbox-design), preloads one topic per record
size, runs A B A B A B per size (each run a fresh job name, fake group and target topic prefix),
verifies every run's target topic holds exactly the source's records (read_committed, per
partition), stops the sandbox and writes the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file path: make `bench` and `replicator` importable
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402

from bench.kafka_ops import CommittedEnds, create_topic  # noqa: E402
from bench.proctree import Tree  # noqa: E402
from replicator.sandbox import DEFAULT_KAFKA_VERSION, Sandbox  # noqa: E402

PORT_SHIFT = 700
SANDBOX_DIR = ROOT / ".sandbox-design"
PARTITIONS = 4
SHARDS = 2
MASTER = "local[2,4]"
POLL_S = 0.05
VENV_BIN = Path(sys.executable).parent
ENV = {"REPLICATOR_SANDBOX_PORT_SHIFT": str(PORT_SHIFT), "REPLICATOR_SANDBOX_DIR": str(SANDBOX_DIR),
       "PYTHONPATH": str(ROOT)}


@dataclass
class Run:
    design: str  # "A" (engine, fused) or "B" (Arrow prototype)
    size: int
    round: int
    name: str
    records: int
    ok: bool = False
    error: str = ""
    startup_s: float = 0.0  # launch -> first record written to the target (Spark start-up, excluded)
    window_s: float = 0.0  # first record written (committed or not) -> last record committed
    records_per_s: float = 0.0
    committed_window_s: float = 0.0  # first record visible read_committed -> last
    committed_records_per_s: float = 0.0  # records that became visible in that window / window
    transactions_seen: int = 0  # distinct read_committed end offsets observed (commits seen)
    cpu_window_s: float = 0.0  # CPU of the contender's process tree during window_s
    cpu_total_s: float = 0.0  # ... from launch to the last record committed (start-up included)
    broker_cpu_window_s: float = 0.0  # both brokers during window_s
    peak_rss_mb: float = 0.0
    copied: int = -1  # records read back from the target, read_committed
    load_start: float = 0.0  # 1-min load average when the run started / ended
    load_end: float = 0.0
    at: str = ""  # wall-clock start of the run



# -- sources ---------------------------------------------------------------------------------------
def preload(bootstrap: str, topic: str, records: int, size: int) -> float:
    """Keyed records of `size` value bytes, non-transactional and fast (acks=1, big batches)."""
    create_topic(bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                         "batch.size": 1024 * 1024, "queue.buffering.max.kbytes": 512 * 1024,
                         "enable.idempotence": False, "compression.type": "none"})
    pool = os.urandom(size * 64)
    started = time.monotonic()
    for i in range(records):
        value = pool[(i % 63) * size:(i % 63) * size + size]
        while True:
            try:
                producer.produce(topic, value, b"key-%08d" % i, i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"preloading {topic}: records still undelivered after 120 s")
    return time.monotonic() - started


def source_ends(bootstrap: str, topic: str) -> dict[int, int]:
    ends = CommittedEnds(bootstrap, topic, PARTITIONS).ends()
    if len(ends) != PARTITIONS:
        raise RuntimeError(f"could not read the end offsets of {topic}")
    return ends


# -- contenders ------------------------------------------------------------------------------------
def command(design: str, box: Sandbox, topic: str, name: str) -> list[str]:
    if design == "A":
        return [str(VENV_BIN / "replicator"), "run",
                "--source-bootstrap-servers", box.source.bootstrap, "--target-bootstrap-servers", box.target.bootstrap,
                "--topics", topic, "--name", name, "--replication-policy", "prefix", "--source-alias", name,
                "--shards", str(SHARDS), "--master", MASTER, "--metrics-port", "0"]
    return [sys.executable, "-m", "bench.design_arrow_prototype", "--source", box.source.bootstrap,
            "--target", box.target.bootstrap, "--topics", topic, "--name", name, "--alias", name,
            "--shards", str(SHARDS), "--master", MASTER]


class GroupWatch:
    """The fake group's stable offsets: a run is complete when they reach the source's ends."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False, "isolation.level": "read_committed"})
        self.tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    def reached(self, ends: dict[int, int]) -> bool:
        try:
            got = self.consumer.committed(self.tps, timeout=5)
        except KafkaException:
            return False  # coordinator loading, topic not created yet
        return all(tp.error is None and tp.offset == ends[tp.partition] for tp in got)

    def close(self) -> None:
        self.consumer.close()


def broker_cpu(box: Sandbox) -> float:
    total = 0.0
    for cluster in box.clusters:
        pid = cluster.pid()
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
    return total


def measure(design: str, box: Sandbox, topic: str, size: int, rnd: int, name: str, ends: dict[int, int],
            logdir: Path, timeout: float) -> Run:
    records = sum(ends.values())
    run = Run(design, size, rnd, name, records, load_start=os.getloadavg()[0], at=time.strftime("%H:%M:%S"))
    target_topic = f"{name}.{topic}"
    offsets = CommittedEnds(box.target.bootstrap, target_topic, PARTITIONS)
    group = GroupWatch(box.target.bootstrap, f"__replicator.{name}", target_topic)
    launched = time.monotonic()
    tree = Tree(command(design, box, topic, name), logdir / f"{name}.log", env=ENV)
    first_written = first_visible = None  # (time, cpu, broker cpu) / (time, visible records)
    commits: set[int] = set()
    try:
        while True:
            now = time.monotonic()
            cpu, _ = tree.sample()
            if first_written is None and offsets.total(committed=False) > 0:
                first_written = (now, cpu, broker_cpu(box))
            visible = offsets.total()
            if visible > 0:
                commits.add(visible)
                if first_visible is None:
                    first_visible = (now, visible)
            if first_written is not None and group.reached(ends):
                break
            if now - launched > timeout:
                run.error = f"timed out after {timeout:.0f}s with {visible} offsets visible"
                return run
            if not tree.running():
                run.error = f"exited {tree.proc.returncode} before finishing: {tree.tail(6)}"
                return run
            time.sleep(POLL_S)
        t0, cpu0, broker0 = first_written
        run.startup_s = t0 - launched
        run.window_s = now - t0
        run.records_per_s = records / run.window_s if run.window_s > 0 else 0.0
        # The last commit can land between the offsets poll and the group poll.
        tv, v0 = first_visible or (now, records)
        run.committed_window_s = now - tv
        # Offsets here count the commit markers too (one per partition and transaction): an estimate.
        run.committed_records_per_s = (records - v0) / run.committed_window_s if now > tv else 0.0
        run.transactions_seen = len(commits)
        run.cpu_window_s = cpu - cpu0
        run.cpu_total_s = cpu
        run.broker_cpu_window_s = broker_cpu(box) - broker0
    finally:
        group.close()
        tree.stop(grace=120)
        run.peak_rss_mb = tree.peak_rss / 2**20
        run.load_end = os.getloadavg()[0]
    run.copied = count_committed(box.target.bootstrap, target_topic, ends)
    run.ok = run.copied == records
    if not run.ok:
        run.error = f"target holds {run.copied} records read_committed, expected {records}"
    return run


def count_committed(bootstrap: str, topic: str, ends: dict[int, int]) -> int:
    """Records a read_committed consumer sees in `topic`, or -1 if a partition's count differs from
    its source partition's (a duplicate in one and a loss in another would cancel out in the sum)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"design-count-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    counts = dict.fromkeys(range(PARTITIONS), 0)
    pending = set(range(PARTITIONS))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    deadline = time.monotonic() + 300
    try:
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 1.0):
                if m.error() is None:
                    counts[m.partition()] += 1
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
                else:
                    raise KafkaException(m.error())
    finally:
        consumer.close()
    if pending:
        return -1
    # The source is non-transactional from offset 0: its end offset is its record count.
    return sum(counts.values()) if all(counts[p] == ends[p] for p in counts) else -1


# -- load --------------------------------------------------------------------------------------------
def wait_for_load(threshold: float, minutes: float) -> list[tuple[str, float]]:
    history = []
    deadline = time.monotonic() + minutes * 60
    while True:
        load = os.getloadavg()[0]
        history.append((time.strftime("%H:%M:%S"), load))
        print(f"load average (1 min) {load:.2f}", flush=True)
        if load < threshold or time.monotonic() >= deadline:
            return history
        time.sleep(min(120.0, max(1.0, deadline - time.monotonic())))


# -- report ------------------------------------------------------------------------------------------
def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import confluent_kafka
    import pyarrow
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return (f"{os.cpu_count()} cores ({cpu}), {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"{platform.system()} {platform.release()}; Python {platform.python_version()}, "
            f"PySpark {pyspark.__version__}, pyarrow {pyarrow.__version__}, confluent-kafka "
            f"{confluent_kafka.__version__} / librdkafka {confluent_kafka.libversion()[0]}, "
            f"{java[0] if java else 'java ?'}, Kafka {DEFAULT_KAFKA_VERSION} (two single-node KRaft brokers)")


def pairs(runs: list[Run], size: int) -> list[tuple[Run, Run]]:
    a = {r.round: r for r in runs if r.size == size and r.design == "A"}
    b = {r.round: r for r in runs if r.size == size and r.design == "B"}
    return [(a[k], b[k]) for k in sorted(a) if k in b]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(runs: list[Run], sizes: list[tuple[int, int]], cmdline: str, load_wait: list, started: str,
           preload_s: dict[str, float]) -> str:
    lines = [
        "# Design check: fused consume→produce (engine) vs Arrow records through Spark (issue's proposal)",
        "",
        "Generated by `bench/design_compare.py`; numbers below are from the run described here.",
        "",
        "**A (engine)**: `replicator run` — the reader task emits one row per shard describing its source "
        "ranges; the writer task consumes them with confluent-kafka and produces to the target in the same "
        "Python process (`replicator/spark_source.py` + `replicator/shard_copy.py`). Each record is touched "
        "once in Python and never enters the JVM.",
        "",
        "**B (proposal)**: `bench/design_arrow_prototype.py` — the same planner (subclass of the engine's "
        "`ReplicationPlanner`), but `read()` consumes the ranges and yields `pyarrow.RecordBatch`es of "
        "(topic, partition, offset, key, value, headers, timestamp); Spark moves them through the JVM to a "
        "`DataSourceStreamArrowWriter` whose task fences the shard's static transactional.id "
        "(`init_transactions`), re-reads the fake group, drops records below its offsets, produces, and "
        "commits the next offsets with `send_offsets_to_transaction`.",
        "",
        f"Both: {SHARDS} shards, Spark `{MASTER}`, the engine's default transaction bounds (200,000 records "
        "/ 10 s) and admission control (1,000,000 records per micro-batch), the engine's clients "
        "(`kafka_clients.source_consumer` / `target_producer`: linger 20 ms, 1 MiB batches, acks=all, "
        "idempotent, no compression) and Spark session settings (`spark_session.spark_session`), commit metadata "
        "with the last source→target offset pair. Each run has a fresh job name, fake group and target "
        "topic (`<name>.<topic>`, prefix policy), so every run copies everything.",
        "",
        "## Method",
        "",
        f"* Source: one topic per record size, {PARTITIONS} partitions, preloaded before any run with keyed "
        "records (12-byte keys, no headers) by a non-transactional producer (acks=1).",
        "* Runs interleaved A B A B A B per record size, so a busy minute on the shared box hits both.",
        "* **Window** = first record written to the target topic (its high watermark > 0, committed or not) "
        "→ the fake group holds the source's end offsets for every partition (the last transaction is "
        "committed, so every record is visible read_committed). Spark start-up, pre-flight and the "
        "shutdown are outside it. **records/s** = records / window.",
        "* The literal \"first record visible read_committed → last\" window is also recorded "
        "(`committed window`), but with the default bounds a shard commits only once or twice per run "
        "(a transaction holds up to 200,000 records), so the first commit already contains about half the "
        "data and that window mostly measures how far apart the two shards finish: it is listed, not used "
        "for the ratio.",
        "* **CPU s** = user+system CPU of the contender's whole process tree (driver, Spark JVM, every "
        "Python worker; psutil, sampled every 50 ms) during the window; **total CPU s** from launch. "
        "**brokers** = both Kafka JVMs during the window.",
        "* **Verified**: after each run the target topic is read back read_committed from offset 0; every "
        "partition must hold exactly its source partition's record count (no loss, no duplicate).",
        "* **ratio B/A** = B's records/s ÷ A's records/s of the same round (< 1: the proposal is slower).",
        "",
        "## Results",
        "",
        "| size | round | design | records | startup s | window s | records/s | MB/s | CPU s (window) | "
        "CPU µs/record | total CPU s | brokers CPU s | committed window s | commits seen | peak RSS MiB | "
        "verified | load 1m start→end | ratio B/A |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = []
    for _, size in sizes:
        ratios, cpu_ratios = [], []
        for a, b in pairs(runs, size):
            ratio = b.records_per_s / a.records_per_s if a.ok and b.ok and a.records_per_s else float("nan")
            if a.ok and b.ok:
                ratios.append(ratio)
                cpu_ratios.append(b.cpu_window_s / a.cpu_window_s if a.cpu_window_s else float("nan"))
            for r in (a, b):
                label = "A engine (fused)" if r.design == "A" else "B proposal (Arrow)"
                verified = f"yes ({r.copied:,})" if r.ok else f"NO: {r.error[:80]}"
                lines.append(
                    f"| {size} B | {r.round} | {label} | {r.records:,} | {r.startup_s:.1f} | {r.window_s:.2f} | "
                    f"{r.records_per_s:,.0f} | {r.records_per_s * size / 1e6:.1f} | {r.cpu_window_s:.1f} | "
                    f"{1e6 * r.cpu_window_s / r.records if r.records else 0:.1f} | {r.cpu_total_s:.1f} | "
                    f"{r.broker_cpu_window_s:.1f} | {r.committed_window_s:.2f} | {r.transactions_seen} | "
                    f"{r.peak_rss_mb:,.0f} | {verified} | {r.load_start:.1f}→{r.load_end:.1f} | "
                    f"{f'{ratio:.2f}' if r.design == 'B' else ''} |")
        a_rates = [r.records_per_s for r in runs if r.size == size and r.design == "A" and r.ok]
        b_rates = [r.records_per_s for r in runs if r.size == size and r.design == "B" and r.ok]
        summary.append((size, _median(a_rates), _median(b_rates), _median(ratios), ratios, _median(cpu_ratios)))
    lines += ["", "## Medians", "",
              "| size | A records/s | B records/s | median ratio B/A (per-round ratios) | median CPU ratio B/A |",
              "|---|---|---|---|---|"]
    for size, a_med, b_med, r_med, ratios, c_med in summary:
        lines.append(f"| {size} B | {a_med:,.0f} | {b_med:,.0f} | **{r_med:.2f}** "
                     f"({', '.join(f'{x:.2f}' for x in ratios)}) | {c_med:.2f} |")
    loads = [r.load_start for r in runs] + [r.load_end for r in runs] or [float("nan")]
    stamps = [r.at for r in runs if r.at]
    lines += ["", "## Reading", "", *reading(runs, sizes)]
    lines += [
        "",
        "## Conditions",
        "",
        f"* Command: `{cmdline}`",
        f"* Invoked {started}{f'; runs from {stamps[0]} to {stamps[-1]}' if stamps else ''}; machine: {machine()}.",
        f"* Preload: {', '.join(f'{k} in {v:.1f} s' for k, v in preload_s.items())}.",
        f"* 1-min load average while waiting to start: "
        f"{', '.join(f'{t} {v:.2f}' for t, v in load_wait) or 'not waited'}; during the runs: "
        f"{min(loads):.1f}–{max(loads):.1f} (per run in the table). The box has 2 cores shared with other "
        "engineers' Spark test runs, so absolute rates are depressed and noisy; the interleaved per-round "
        "ratio is the figure to read.",
        "",
        "## What limits the conclusion",
        "",
        "* One shared 2-core machine, brokers on the same cores: every design is CPU-starved, which favours "
        "whichever burns less CPU per record; on a box with idle cores B's extra JVM/Arrow work would cost "
        "CPU more than wall time.",
        "* The prototype is written for this measurement: vectorised where Arrow allows (`pa.array` per "
        "column, `to_pylist` per column), but the Kafka clients are per-record Python calls on both sides "
        "in either design. Spark's Arrow batch size is its default "
        "(`spark.sql.execution.arrow.maxRecordsPerBatch` = 10,000).",
        "* Records have keys and no headers; a header-heavy workload adds Arrow list<struct> conversion "
        "to B only.",
        "* Catch-up of a preloaded backlog only: it measures throughput, not end-to-end latency at low rates.",
        f"* Short windows: the shortest here is {min((r.window_s for r in runs if r.ok), default=0):.2f} s, "
        f"so the {POLL_S * 1000:.0f} ms poll alone is worth a few per cent, and a load spike inside one "
        "window swings that run's rate: read the per-round ratios and CPU per record together, not one run.",
    ]
    return "\n".join(lines) + "\n"


def reading(runs: list[Run], sizes: list[tuple[int, int]]) -> list[str]:
    """What the numbers say, computed from them (so a re-run cannot leave a stale conclusion)."""
    out = []
    for _, size in sizes:
        done = [(a, b) for a, b in pairs(runs, size) if a.ok and b.ok]
        if not done:
            out.append(f"* {size} B: no complete A/B pair.")
            continue
        ratios = [b.records_per_s / a.records_per_s for a, b in done]
        slower = sum(x < 1 for x in ratios)
        a_us = [1e6 * a.cpu_window_s / a.records for a, _ in done]
        b_us = [1e6 * b.cpu_window_s / b.records for _, b in done]
        out.append(
            f"* {size} B: B was {'slower' if slower == len(done) else 'faster' if slower == 0 else 'mixed'} "
            f"in {max(slower, len(done) - slower)} of {len(done)} rounds; throughput ratio B/A "
            f"{min(ratios):.2f}–{max(ratios):.2f} (median {_median(ratios):.2f}, i.e. the engine moved "
            f"{1 / _median(ratios):.1f}× as many records per second). CPU per copied record (whole process "
            f"tree): A {min(a_us):.1f}–{max(a_us):.1f} µs, B {min(b_us):.1f}–{max(b_us):.1f} µs "
            f"(ratio of the medians {_median(b_us) / _median(a_us):.1f}×). CPU per record depends far less on "
            "the other engineers' load than the wall-clock rate does, so it is the steadier of the two figures.")
    failed = [r.name for r in runs if not r.ok]
    out.append(f"* Runs that did not copy exactly the source's records: {', '.join(failed)}." if failed else
               "* Every run of both designs copied exactly the source's records (read back read_committed, "
               "per partition).")
    return out


# -- main ----------------------------------------------------------------------------------------------
def parse_size(text: str) -> tuple[int, int]:
    count, size = text.lower().split("x")
    return int(count.replace("_", "")), int(size)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small", default="400000x100", help="RECORDSxBYTES of the small-record topic")
    p.add_argument("--large", default="200000x1024", help="RECORDSxBYTES of the large-record topic")
    p.add_argument("--rounds", type=int, default=3, help="A B pairs per record size")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--wait-load", type=float, default=0.0,
                   help="wait (up to --wait-minutes) for the 1-min load average to drop below this first")
    p.add_argument("--wait-minutes", type=float, default=30.0)
    p.add_argument("--report", default=str(ROOT / "bench" / "DESIGN.md"), help="'-' prints it instead")
    args = p.parse_args(argv)
    cmdline = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/design_compare.py", *sys.argv[1:]])
    sizes = [(n, s) for n, s in (parse_size(args.small), parse_size(args.large))]
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_wait = wait_for_load(args.wait_load, args.wait_minutes) if args.wait_load > 0 else []
    box = Sandbox(root=SANDBOX_DIR, port_shift=PORT_SHIFT)
    logdir = SANDBOX_DIR / "design-logs" / time.strftime("%Y%m%d-%H%M%S")
    runs: list[Run] = []
    try:
        box.up(fresh=True)
        logdir.mkdir(parents=True, exist_ok=True)
        topics, preload_s = {}, {}
        for records, size in sizes:
            topic = topics[size] = f"design-{size}b"
            preload_s[f"{records:,} x {size} B"] = preload(box.source.bootstrap, topic, records, size)
        k = 0
        for records, size in sizes:
            ends = source_ends(box.source.bootstrap, topics[size])
            if sum(ends.values()) != records:
                raise RuntimeError(f"{topics[size]} holds {sum(ends.values())} records, expected {records}")
            for rnd in range(1, args.rounds + 1):
                k += 1
                for design in ("A", "B"):
                    name = f"{design.lower()}{k}"
                    print(f"[{time.strftime('%H:%M:%S')}] {size} B round {rnd}: {design} ({name}), "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
                    run = measure(design, box, topics[size], size, rnd, name, ends, logdir, args.timeout)
                    runs.append(run)
                    print(f"    {'ok' if run.ok else 'FAILED'}: {run.records_per_s:,.0f} records/s over "
                          f"{run.window_s:.2f} s, CPU {run.cpu_window_s:.1f} s, start-up {run.startup_s:.1f} s"
                          f"{'' if run.ok else ' - ' + run.error}", flush=True)
                    (logdir / "runs.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    finally:
        box.down()
    text = report(runs, sizes, cmdline, load_wait, started, preload_s)
    if args.report == "-":
        print(text)
    else:
        Path(args.report).write_text(text)
        print(f"wrote {args.report}; raw runs in {logdir / 'runs.json'}")
    return 0 if runs and all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
