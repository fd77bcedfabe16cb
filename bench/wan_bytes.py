"""The WAN cells of `bench.run` for a few contenders and round trips, without the link's ceiling and
the report: catch-up rate and the bytes the link carried per payload byte (bench/wan.py), printed
per run. For checking a change to what crosses the link; `make bench` measures the full matrix.

    PYTHONPATH=. .venv/bin/python -m bench.wan_bytes replicator-eos,mm2-eos 0,50 2 [--records 200000]
        [--placement near-target]

Uses (and starts when needed) the bench's sandbox, with both clusters' proxied listeners; leaves it
running for the next invocation (`replicator sandbox down` stops it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

from bench import kafka_ops, wan
from bench import run as bench_run
from bench.contenders import Job, all_contenders
from replicator.sandbox import Sandbox

SIZE = 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("contenders", help="comma-separated keys, e.g. replicator-eos,mm2-eos")
    p.add_argument("rtts", help="comma-separated round trips, ms")
    p.add_argument("runs", type=int)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--placement", default="near-target", choices=list(wan.PLACEMENTS))
    p.add_argument("--timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    by_key = {c.key: c for c in all_contenders(2)}
    contenders = [by_key[k] for k in args.contenders.split(",")]
    box = Sandbox(proxied_target=True)
    box.source = dataclasses.replace(box.source, proxied=True)
    logdir = box.source.root / "bench-logs" / f"wan-bytes-{time.strftime('%Y%m%d-%H%M%S')}"
    logdir.mkdir(parents=True, exist_ok=True)
    box.up()
    bench_run._delete_at_once(box)
    topic = bench_run._preloaded(box, SIZE, args.records, logdir)
    stamp, seq, rows = f"{int(time.time()) % 100000:05d}", 0, []
    for run in range(1, args.runs + 1):
        for rtt in (float(x) for x in args.rtts.split(",")):
            for c in bench_run.rotated(contenders, run):
                seq += 1
                brokers = tuple(pid for cl in (box.source, box.target) for pid in cl.pids() if pid)
                job = Job(box.source.bootstrap, box.target.bootstrap, topic, bench_run.PARTITIONS, args.records,
                          SIZE, f"w{stamp}{seq:03d}", logdir, broker_pids=brokers)
                bench_run._settle(box)
                row = wan.measure(box, c, job, args.placement, rtt, None, run, args.timeout)
                bench_run._tidy(lambda: kafka_ops.delete_topics(job.target, job.tag))  # noqa: B023
                rows.append(row)
                print(f"run {run} {args.placement} {rtt:4.0f} ms {c.key:16} "
                      + (f"{row['records_per_s']:9.0f} rec/s {row['link_bytes_per_payload_byte']:.3f} B per "
                         f"payload B" if row["ok"] else f"FAILED: {row['error'][:300]}")
                      + f"  load {os.getloadavg()[0]:.1f}", flush=True)
    for key in dict.fromkeys(r["contender"] for r in rows):
        for rtt in dict.fromkeys(r["rtt_ms"] for r in rows):
            cell = [r for r in rows if r["contender"] == key and r["rtt_ms"] == rtt and r["ok"]]
            if cell:
                print(f"median {key:16} {rtt:4.0f} ms: "
                      f"{statistics.median(r['records_per_s'] for r in cell):9.0f} rec/s "
                      f"{statistics.median(r['link_bytes_per_payload_byte'] for r in cell):.3f} B per payload B "
                      f"({len(cell)} runs)")
    Path(logdir / "rows.json").write_text(json.dumps(rows, indent=1))
    print(f"logs: {logdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
