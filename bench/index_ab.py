"""The translation index's cost (issue 12: exactly-once throughput may drop <= 2 %), A/B on the bare loop.

    .venv/bin/python -m bench.index_ab [--runs 6] [--sizes 1024x1000000,100x2000000]
        [--max-records-per-transaction N]

`bench.bare_loop` (the engine's ShardCopier, no Spark: Spark's start-up and scheduling noise would
hide a 2 % effect) copies the preloaded `make bench` source topics exactly once, with the index on
and off, alternately: run r measures on-then-off for odd r and off-then-on for even r, so a load
change on this shared box or an order effect (warm page cache) hits both sides alike. Per pair: the
copy's records/s, on/off ratio, the copier process's CPU (user+system of every thread, librdkafka's
included) per GB, and from inside the loop the copy thread's CPU spent in `_produce_index`
(time.thread_time), the index entries and bytes written, and the wall time of ending each
transaction (send_offsets_to_transaction + commit_transaction, which waits for the index records'
delivery). Results: bench/index_ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import kafka_ops, run
from replicator.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "index_ab.json"


def _copy(box: Sandbox, topic: str, tag: str, index: str, max_records: int | None, log: Path) -> dict:
    cmd = [sys.executable, "-m", "bench.bare_loop", "--source", box.source.bootstrap, "--target",
           box.target.bootstrap, "--topic", topic, "--alias", tag, "--translation-index", index]
    if max_records:
        cmd += ["--max-records-per-transaction", str(max_records)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        _, status, usage = os.wait4(proc.pid, 0)
    text = log.read_text(errors="replace")
    line = next((x for x in text.splitlines() if x.startswith("bare-loop-cost ")), None)
    if status != 0 or line is None:
        raise RuntimeError(f"bare loop failed (status {status}): {text[-2000:]}")
    doc = json.loads(line.split(" ", 1)[1])
    doc["process_cpu_s"] = usage.ru_utime + usage.ru_stime
    return doc


def _per_txn_ms(doc: dict) -> float:
    """Mean wall time of send_offsets_to_transaction + commit_transaction per transaction."""
    return 1000 * doc.get("commit_wall_s", 0.0) / max(1, doc["transactions"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--sizes", default="1024x1000000,100x2000000")
    p.add_argument("--max-records-per-transaction", type=int, help="default: the replicator's (200,000)")
    args = p.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    box = Sandbox()
    started_box = not (box.source.running() and box.target.running())
    box.up()
    try:
        return _measure(args, sizes, box)
    finally:
        if started_box:  # a sandbox the user already ran is theirs to keep
            box.down()


def _measure(args: argparse.Namespace, sizes: list[tuple[int, int]], box: Sandbox) -> int:
    logdir = box.source.root / "bench-logs" / f"index-ab-{time.strftime('%Y%m%d-%H%M%S')}"
    logdir.mkdir(parents=True, exist_ok=True)
    stamp = f"{int(time.time()) % 100000:05d}"
    doc = {"command": " ".join([".venv/bin/python -m bench.index_ab", *args.argv]),
           "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "pairs": []}
    topics = {size: run._preloaded(box, size, records, logdir) for size, records in sizes}
    seq = 0
    for r in range(1, args.runs + 1):
        for size, records in sizes:
            pair = {"run": r, "size": size, "records": records, "load": os.getloadavg()[0]}
            for index in (("on", "off") if r % 2 else ("off", "on")):
                seq += 1
                tag = f"ab{stamp}{seq:03d}"
                try:
                    pair[index] = _copy(box, topics[size], tag, index, args.max_records_per_transaction,
                                        logdir / f"{tag}-{index}.log")
                finally:
                    kafka_ops.delete_topics(box.target.bootstrap, tag)
            on, off = pair["on"], pair["off"]
            gb = size * records / 1e9
            pair["ratio"] = (on["records"] / on["wall_s"]) / (off["records"] / off["wall_s"])
            pair["cpu_ratio"] = on["process_cpu_s"] / off["process_cpu_s"]
            doc["pairs"].append(pair)
            RESULTS.write_text(json.dumps(doc, indent=1))
            print(f"run {r} {size:5d} B  on {on['records'] / on['wall_s']:9.0f} rec/s "
                  f"{on['process_cpu_s'] / gb:6.1f} CPU-s/GB | off {off['records'] / off['wall_s']:9.0f} rec/s "
                  f"{off['process_cpu_s'] / gb:6.1f} CPU-s/GB | on/off {pair['ratio']:.3f} cpu {pair['cpu_ratio']:.3f} "
                  f"| index {on['index_entries']} entries {on['index_bytes']} B {on['index_cpu_s']:.4f} s "
                  f"of {on['loop_cpu_s']:.2f} s loop CPU | {on['transactions']} txns, ending one "
                  f"{_per_txn_ms(on):.1f} / {_per_txn_ms(off):.1f} ms | load {pair['load']:.1f}", flush=True)
    for size, _ in sizes:
        pairs = [x for x in doc["pairs"] if x["size"] == size]
        share = statistics.median(x["on"]["index_cpu_s"] / x["on"]["loop_cpu_s"] for x in pairs)
        # What ending a transaction took longer with the index, as a share of the copy's wall time.
        wall = statistics.median((_per_txn_ms(x["on"]) - _per_txn_ms(x["off"])) * x["on"]["transactions"]
                                 / 1000 / x["on"]["wall_s"] for x in pairs)
        print(f"{size} B: median on/off throughput {statistics.median(x['ratio'] for x in pairs):.3f}, "
              f"median on/off process CPU {statistics.median(x['cpu_ratio'] for x in pairs):.3f}, "
              f"index CPU share of the copy thread {share:.5f}, extra transaction-end wall share {wall:+.5f}",
              flush=True)
    doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    RESULTS.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
