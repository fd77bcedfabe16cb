"""`make bench`: every contender on the same sandbox clusters, interleaved run by run, then the report.

    .venv/bin/python -m bench.run [--quick] [--runs 3] [--only key,key] [--sizes ...] [--no-catchup]
        [--no-steady | --restart-only | --no-restart] [--steady-sizes 1024,100] [--steady-shapes keyed,keyless,skewed]
        [--steady-fractions ...]
        [--steady-step-s S] [--max-rate ...] [--first-s 60] [--first-rate 2000]
        [--no-many] [--many-shapes 100x8[,625x8]] [--idle-s S]
        [--no-wan] [--wan-rtts 0,10,50,100] [--wan-placements near-target,near-source] [--wan-records N]
        [--wan-cap-mbit 200] [--wan-cap-rtt 50] [--merge]

Parts, in this order: catch-up (every contender, preloaded topics), steady state + restart (replicator
and MM2 exactly-once; per load shape and record size: the first minute after the start at a fixed
rate, then fixed rate steps; restart at the first size and shape only), many partitions (replicator
and MM2 exactly-once, TOPICSxPARTITIONS small topics), WAN (replicator and MM2 exactly-once catch-up
through a delayed link per placement and round trip, a bandwidth-capped link with compressed text
records, and the link's own ceiling; bench/wan.py).

Run r measures every contender for every record size before run r+1 starts, so a slow minute on
this shared machine hits every contender alike and the ratios stay meaningful; the order rotates from
run to run (A B C, B C A, C A B), so no contender is always first after a topic deletion.
Results go to bench/results.json after every measurement and to BENCHMARKS.md + bench/throughput.png
at the end. With --merge, the parts this invocation skips (--no-catchup, --no-steady or --restart-only, --no-restart,
--no-many, --no-wan or --wan-steady-only) keep the rows bench/results.json already holds, and the report names the
command that measured each part; a steady series measured again replaces only its own rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from bench import catchup, kafka_ops, many, parts, reaper, report, shapes, steady, wan
from bench.contenders import BaseCheckout, Job, all_contenders
from replicator.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results.json"
PARTITIONS = 8
# Long enough for a copy of ours to run ~10 s on this box: at 1M x 1 KiB it took 2 s, where one 0.1 s
# poll of the catch-up watch and one transaction's commit at the end are 5 % of the rate, and the
# exactly-once / at-least-once line (>= 0.97) cannot be told from noise (BENCHMARKS.md, "How it is measured").
FULL_SIZES = [(1024, 5_000_000), (100, 10_000_000)]
QUICK_SIZES = [(1024, 200_000), (100, 400_000)]


# A target broker with the sandbox's 512 MiB heap ran out of memory serving 625 topics x 8 partitions
# (OutOfMemoryError building a DescribeConfigs response for all of them, twice in two tries).
LARGE_SHAPE_PARTITIONS = 1_000
LARGE_SHAPE_HEAP = "-Xms512m -Xmx2g"


def _broker_heap(args: argparse.Namespace) -> str | None:
    """The sandbox brokers' heap: the default unless a many-partitions shape is large."""
    if args.no_many:
        return None
    shapes = [[int(x) for x in shape.split("x")] for shape in args.many_shapes.split(",")]
    return LARGE_SHAPE_HEAP if max(t * p for t, p in shapes) > LARGE_SHAPE_PARTITIONS else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small record counts, one run: a smoke test")
    p.add_argument("--runs", type=int, help="interleaved runs per contender (default 3, quick 1)")
    p.add_argument("--only", help="comma-separated contender keys (default: all)")
    p.add_argument("--base-checkout", type=Path, metavar="DIR",
                   help="A/B: also run DIR's own job (DIR/.venv/bin/replicator, e.g. a clone at the commit before a "
                        "change) as contender replicator-eos-base; the steady and WAN steady parts take it when --only "
                        "names it")
    p.add_argument("--sizes", help="comma-separated SIZExCOUNT, e.g. 1024x1000000,100x2000000")
    p.add_argument("--tasks", type=int, default=2, help="MirrorMaker 2 tasks.max (default 2: our shards)")
    p.add_argument("--no-catchup", action="store_true")
    p.add_argument("--no-steady", action="store_true")
    p.add_argument("--restart-only", action="store_true",
                   help="measure the restart alone: each contender starts on the first steady series, runs its rate "
                        "steps and is killed, and only the restart is kept (with --merge, the steady rows stay)")
    p.add_argument("--no-restart", action="store_true",
                   help="steady series without the restart measurement (with --merge, the restart rows stay)")
    p.add_argument("--steady-step-s", type=float, help="seconds per steady-state rate step (default 15, quick 10)")
    p.add_argument("--steady-sizes", default="1024,100", help="record sizes of the steady-state series "
                                                             "(default 1024,100; restart is measured at the first)")
    p.add_argument("--steady-fractions", default=",".join(str(f) for f in steady.FRACTIONS),
                   help="rate steps as fractions of the maximum rate (default %(default)s)")
    p.add_argument("--max-rate", help="100%% rate of the steady-state steps, records/s: one number (the first "
                                      "size) or SIZE=RATE,...; default per size: this run's replicator "
                                      "exactly-once catch-up median at that size")
    p.add_argument("--steady-shapes", default=",".join(shapes.SHAPES),
                   help="load shapes of the steady-state series, comma-separated (default %(default)s; "
                        "bench/shapes.py)")
    p.add_argument("--first-s", type=float, help="the first minute after each steady-state start, seconds "
                                                 "(default 60, quick 20; 0: not measured)")
    p.add_argument("--first-rate", type=float, default=steady.FIRST_MINUTE_RATE,
                   help="records/s during the first minute (default %(default)s)")
    p.add_argument("--no-many", action="store_true", help="skip the many-partitions shape")
    p.add_argument("--many-shapes", default="100x8", help="TOPICSxPARTITIONS of the many-partitions shape, "
                                                         "comma-separated (default 100x8; 625x8 = 5,000 partitions)")
    p.add_argument("--many-records", type=int, default=200, help="records per partition (default 200)")
    p.add_argument("--many-size", type=int, default=512, help="record size of the many-partitions shape")
    p.add_argument("--no-wan", action="store_true", help="skip the WAN link part")
    p.add_argument("--wan-rtts", default=",".join(str(r) for r in wan.RTTS_MS),
                   help="round trips of the WAN link, ms (default %(default)s)")
    p.add_argument("--wan-placements", default=",".join(wan.PLACEMENTS),
                   help="where the copier runs: near-target (source across the link), near-source (target "
                        "across it); default %(default)s")
    p.add_argument("--wan-size", type=int, default=1024, help="record size of the WAN catch-up (default 1024)")
    p.add_argument("--wan-records", type=int, help="records of the WAN catch-up (default 2,000,000, quick 100,000)")
    p.add_argument("--wan-cap-mbit", type=float, default=200.0,
                   help="bandwidth cap per direction of the capped link, Mbit/s (default 200; 0: no capped link)")
    p.add_argument("--wan-cap-rtt", type=float, default=50.0, help="round trip of the capped link, ms (default 50)")
    p.add_argument("--wan-steady-rate", type=float, default=wan.STEADY_RATE,
                   help="keyed records/s of the steady-state latency cell through the link, per placement "
                        "(default %(default)s; 0: none)")
    p.add_argument("--wan-steady-rtt", type=float, default=wan.STEADY_RTT_MS,
                   help="round trip of the steady-state cell, ms (default %(default)s)")
    p.add_argument("--wan-steady-only", action="store_true",
                   help="of the WAN part, only the steady-state cells (no link ceiling, no catch-up)")
    p.add_argument("--idle-s", type=float, help="idle window after catch-up, seconds (default 60, quick 20)")
    p.add_argument("--timeout", type=float, default=900.0, help="per catch-up measurement")
    p.add_argument("--no-report", action="store_true", help="keep BENCHMARKS.md as it is")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="the results document to write (and --merge from); default bench/results.json. A quick "
                        "functional run goes elsewhere with --no-report, so the measured document stays as it is")
    p.add_argument("--merge", action="store_true",
                   help="keep the rows bench/results.json holds for the parts this run skips (--no-catchup, "
                        "--no-steady, --no-many, --no-wan): one part re-measured, the report still shows all of them")
    p.add_argument("--target-transaction-version", type=int, choices=(0, 1, 2),
                   help="set the target cluster's transaction.version for this run, restored after. MirrorMaker "
                        "2's Java producer uses version 2 (KIP-890) where the cluster offers it; librdkafka, "
                        "ours, speaks the older protocol either way (BENCHMARKS.md, 'What bounds latency')")
    return p.parse_args(argv)


def rotated(contenders: list, run: int) -> list:
    """The contenders in a different order in each run (run 1 as given, run 2 from the second, ...):
    in a fixed order the one measured first always found the target freshly emptied by the deletion of
    the previous measurement's topics, and the one measured last the box warmest."""
    k = (run - 1) % len(contenders) if contenders else 0
    return contenders[k:] + contenders[:k]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    sizes = ([tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")] if args.sizes
             else QUICK_SIZES if args.quick else FULL_SIZES)
    contenders = all_contenders(args.tasks)
    if args.base_checkout:
        contenders.append(BaseCheckout(args.base_checkout))
    if args.only:
        keys = args.only.split(",")
        contenders = [c for c in contenders if c.key in keys]
    box = Sandbox(heap=_broker_heap(args), proxied_target=not args.no_wan)
    if not args.no_wan:  # the near-target placement puts the source across the link
        box.source = dataclasses.replace(box.source, proxied=True)
    logdir = box.source.root / "bench-logs" / time.strftime("%Y%m%d-%H%M%S")
    logdir.mkdir(parents=True, exist_ok=True)
    reaper.start(logdir / "started.pids")
    started_box = not (box.source.running() and box.target.running())
    box.up()
    if started_box:  # a sandbox the user already ran is theirs to keep
        for cluster in (box.source, box.target):
            if cluster.pid():
                reaper.watch(cluster.pid())
    if started_box:
        _tidy(lambda: _delete_at_once(box))
    stamp = f"{int(time.time()) % 100000:05d}"
    doc = {"command": " ".join([".venv/bin/python -m bench.run", *(argv if argv is not None else sys.argv[1:])]),
           "machine": report.machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "runs": runs,
           "quick": args.quick, "partitions": PARTITIONS, "catchup": [], "steady": [], "restart": [],
           "steady_errors": [], "first_minute": [], "many": [], "many_size": args.many_size, "wan": [],
           "link_ceiling": [], "wan_steady": [], "load": [],
           "broker_heap": box.source.heap}
    seq = 0
    measured_now = parts.measured(args.no_catchup, args.no_steady, args.no_many, args.no_wan, args.restart_only,
                                  bool(args.wan_steady_rate), args.wan_steady_only, args.no_restart)
    earlier = json.loads(args.results.read_text()) if args.merge and args.results.exists() else None

    def job(topic: str, size: int, records: int, **kw) -> Job:
        nonlocal seq
        seq += 1
        brokers = tuple(p for c in (box.source, box.target) for p in c.pids() if p)
        return Job(box.source.bootstrap, box.target.bootstrap, topic, PARTITIONS, records, size,
                   f"x{stamp}{seq:03d}", logdir, broker_pids=brokers, **kw)

    def save() -> None:
        args.results.write_text(json.dumps(parts.merged(doc, measured_now, earlier), indent=1))

    print(f"logs: {logdir}", flush=True)
    restore_tv = None
    try:
        if args.target_transaction_version is not None:
            restore_tv = kafka_ops.set_transaction_version(box.target.bootstrap, args.target_transaction_version)
            doc["target_transaction_version"] = args.target_transaction_version
            print(f"target transaction.version {restore_tv} -> {args.target_transaction_version} for this run",
                  flush=True)
        if any(c.key.startswith("replicator") for c in contenders):
            _tidy(_record_class_archive)
        if not args.no_catchup:
            topics = {size: _preloaded(box, size, records, logdir) for size, records in sizes}
            if not args.quick:
                _warm_up(contenders[0], {size: job(topics[size], size, records) for size, records in sizes},
                         box, args.timeout)
            for run in range(1, runs + 1):
                for size, records in sizes:
                    for c in rotated(contenders, run):
                        r = _catch_up(box, c, job(topics[size], size, records), run, args.timeout, doc["load"])
                        doc["catchup"].append(r.to_dict())
                        save()
                        status = (f"{r.records_per_s:10.0f} rec/s {r.mb_per_s:7.1f} MB/s "
                                  f"{r.cpu_s_per_gb:6.1f} CPU-s/GB rss {r.peak_rss_mb:5.0f} MiB"
                                  if r.ok else f"FAILED: {r.error}")
                        print(f"run {run} {size:5d} B {c.key:16} {status}  load {os.getloadavg()[0]:.2f}",
                              flush=True)
                        if r.peak_rss_by_role:
                            print("    at the RSS peak: " + ", ".join(
                                f"{k} {v['mib']:.0f} MiB {v['each']}" for k, v in r.peak_rss_by_role.items()),
                                flush=True)
        if not args.no_steady:
            step = _step_s(args)
            fractions = tuple(float(f) for f in args.steady_fractions.split(","))
            steady_sizes = [int(x) for x in args.steady_sizes.split(",")]
            rates = _max_rates(args.max_rate, steady_sizes, doc["catchup"])
            steady_contenders = [c for c in contenders
                                 if c.key in steady.CONTENDERS or (args.only and c.key in steady.ON_REQUEST)]
            load_shapes = args.steady_shapes.split(",")
            first_s = args.first_s if args.first_s is not None else (20.0 if args.quick else steady.FIRST_MINUTE_S)
            if args.no_catchup and not args.quick and steady_contenders:
                first_size, first_shape = steady_sizes[0], load_shapes[0]
                _steady_warm_up(steady_contenders[0], job(f"steady-{stamp}-{seq + 1:03d}", first_size, 0,
                                                           shape=first_shape), rates[first_size] * fractions[0], box)
            for run in range(1, runs + 1):
                # Rotated like the contenders: no series always runs first on freshly started brokers.
                for size, shape in rotated([(size, shape) for shape in load_shapes for size in steady_sizes], run):
                    for c in rotated(steady_contenders, run):
                        restart_too = size == steady_sizes[0] and shape == load_shapes[0] and not args.no_restart
                        if (c.key in steady.RESTART_ONLY or args.restart_only) and not restart_too:
                            continue
                        j = job(f"steady-{stamp}-{seq + 1:03d}", size, 0, shape=shape)
                        _settle(box)
                        doc["load"].append([time.time(), *os.getloadavg()])
                        s, r, first = _guarded(
                            lambda: steady.measure(c, j, run, rates[size], step, fractions,  # noqa: B023
                                                   restart_too, args.first_rate, first_s),  # noqa: B023
                            lambda e: ([], {"contender": c.key, "run": run,  # noqa: B023
                                            "peak_rss_mb": 0.0, "error": f"bench error: {e}"}, None))
                        _tidy(lambda: kafka_ops.delete_topics(j.target, j.tag))  # noqa: B023
                        _tidy(lambda: kafka_ops.delete_topics(j.source, j.topic))  # noqa: B023
                        if c.key in steady.RESTART_ONLY or args.restart_only:
                            s, first = [], None
                        doc["steady"] += s
                        if first:
                            doc["first_minute"].append(first)
                        if restart_too:
                            doc["restart"].append({**r, "size": size, "shape": shape})
                        elif "error" in r:  # the series itself failed (no restart is measured at this size)
                            doc["steady_errors"].append({"contender": c.key, "run": run, "size": size,
                                                         "shape": shape, "error": r["error"]})
                        save()
                        if first:
                            print(f"run {run} first minute {size:5d} B {shape:7} {c.key:16} {first['rate']}/s "
                                  f"p50 {first['p50_s']:.3f}s p99 {first['p99_s']:.3f}s worst 10 s window p99 "
                                  f"{first['worst_window_p99_s']:.3f}s (from {first['worst_window_from_s']:.0f}s)",
                                  flush=True)
                        for x in s:
                            print(f"run {run} steady {size:5d} B {shape:7} {c.key:16} {x['rate']:8.0f}/s (produced "
                                  f"{x['produced_per_s']:8.0f}/s) p50 {x['p50_s']:.3f}s p95 {x['p95_s']:.3f}s "
                                  f"p99 {x['p99_s']:.3f}s behind {x['behind_end']:7d} bounded {x['bounded']} "
                                  f"(watcher lag {x['lag_end']:7d})", flush=True)
                        if restart_too:
                            print(f"run {run} restart {c.key:16} {r.get('restart_s')} s rss "
                                  f"{r.get('peak_rss_mb', 0):.0f} MiB {r.get('error', '')}", flush=True)
        if not args.no_many:
            idle_s = args.idle_s if args.idle_s is not None else (20.0 if args.quick else 60.0)
            many_contenders = [c for c in contenders if c.key in many.CONTENDERS]
            for shape in args.many_shapes.split(",") if many_contenders else []:
                topics, partitions = (int(x) for x in shape.split("x"))
                mstamp = f"{stamp}{seq + 1:03d}"
                total = topics * partitions * args.many_records
                try:
                    took = many.prepare(box.source.bootstrap, mstamp, topics, partitions, args.many_records,
                                        args.many_size)
                    print(f"many partitions: {topics} topics x {partitions} partitions, {total} x {args.many_size} "
                          f"B created and filled in {took:.1f}s", flush=True)
                    for run in range(1, runs + 1):
                        for c in rotated(many_contenders, run):
                            j = job(f"many-{mstamp}", args.many_size, total)
                            j = dataclasses.replace(j, partitions=partitions,
                                                    topics_regex=f"many-{mstamp}-[0-9]+")
                            doc["load"].append([time.time(), *os.getloadavg()])
                            m = _guarded(lambda: many.measure(c, j, run, topics, idle_s, args.timeout),  # noqa: B023
                                         lambda e: many.Many(c.key, topics, partitions, total, run,  # noqa: B023
                                                             error=f"bench error: {e}"))
                            _tidy(lambda: kafka_ops.delete_topics(j.target, j.tag))  # noqa: B023
                            doc["many"].append(m.to_dict())
                            save()
                            status = (f"all visible after {m.visible_s:6.1f}s, idle {m.idle_cpu_pct:5.1f} % of a core, "
                                      f"idle rss {m.idle_peak_rss_mb:5.0f} MiB" if m.ok else f"FAILED: {m.error}")
                            print(f"run {run} many {topics}x{partitions} {c.key:16} {status}  "
                                  f"load {os.getloadavg()[0]:.2f}", flush=True)
                except Exception as e:  # noqa: BLE001 - set-up failed: say so, go on with what is left
                    traceback.print_exc()
                    doc["many"].append(many.Many("setup", topics, partitions, total, 0,
                                                 error=f"creating/filling the source topics: {e}").to_dict())
                finally:
                    _tidy(lambda: kafka_ops.delete_topics(box.source.bootstrap, f"many-{mstamp}-"))  # noqa: B023
        if not args.no_wan:
            _wan_part(args, box, contenders, runs, job, doc, save, logdir)
    finally:
        doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        save()
        if restore_tv is not None:
            _tidy(lambda: kafka_ops.set_transaction_version(box.target.bootstrap, restore_tv))
        if started_box:
            box.down()
    if not args.no_report:
        report.write(parts.merged(doc, measured_now, earlier), ROOT / "BENCHMARKS.md",
                     ROOT / "bench" / "throughput.png")
    return 0


def _wan_part(args: argparse.Namespace, box: Sandbox, contenders: list, runs: int, job, doc: dict, save,
              logdir: Path) -> None:
    """Per run: the link's ceiling, then every placement x round trip with the contenders interleaved
    in each cell, then the capped link with compressed text records (bench/wan.py)."""
    size = args.wan_size
    records = args.wan_records or (100_000 if args.quick else 2_000_000)
    rtts = [float(x) for x in args.wan_rtts.split(",")]
    placements = args.wan_placements.split(",")
    unknown = [p for p in placements if p not in wan.PLACEMENTS]
    if unknown:
        raise SystemExit(f"--wan-placements: unknown {unknown[0]!r}; known: {', '.join(wan.PLACEMENTS)}")
    cap = args.wan_cap_mbit * 1e6 / 8 if args.wan_cap_mbit else None
    wan_contenders = [c for c in contenders if c.key in wan.CONTENDERS or (args.only and c.key in wan.ON_REQUEST)]
    catch_up = not args.wan_steady_only
    topic = _preloaded(box, size, records, logdir) if catch_up else ""
    text_topic = _preloaded(box, size, records, logdir, text=True) if catch_up and cap and wan_contenders else None
    settings = {"size": size, "records": records, "cap_mb_per_s": cap / 1e6 if cap else None,
                "cap_rtt_ms": args.wan_cap_rtt, "compression": wan.COMPRESSION,
                "link": "bench/wanproxy (Go), 256 KiB reads, up to 256 MiB in flight per direction"}
    if catch_up:
        doc["wan_settings"] = settings
    step_s = _step_s(args)

    def one(measure, key: str, **where) -> dict:
        _settle(box)
        doc["load"].append([time.time(), *os.getloadavg()])
        return _guarded(measure, lambda e: {"contender": key, "ok": False, "size": size, "records": records,
                                            "error": f"bench error: {e}", **where})

    for run in range(1, runs + 1):
        for tool in ("produce", "consume") if catch_up else ():
            for rtt in (None, 0.0):
                j = job(topic, size, records)
                where = {"run": run, "tool": tool, "via": "direct" if rtt is None else "link", "rtt_ms": rtt or 0}
                row = one(lambda: wan.ceiling(box, j, tool, rtt, run, args.timeout), tool, **where)  # noqa: B023
                _tidy(lambda: kafka_ops.delete_topics(j.target, j.tag))  # noqa: B023
                doc["link_ceiling"].append(row)
                save()
                print(f"run {run} link ceiling {tool:7} {where['via']:6} "
                      f"{_wan_status(row)}  load {os.getloadavg()[0]:.2f}", flush=True)
        cells = [(p, rtt, None, topic) for p in placements for rtt in rtts] if catch_up else []
        cells += [(p, args.wan_cap_rtt, cap, text_topic) for p in placements] if text_topic else []
        for placement, rtt, capped, source_topic in cells:
            for c in rotated(wan_contenders, run):
                j = job(source_topic, size, records, compression=wan.COMPRESSION if capped else "")
                where = {"run": run, "placement": placement, "rtt_ms": rtt,
                         "cap_mb_per_s": capped / 1e6 if capped else None}
                row = one(lambda: wan.measure(box, c, j, placement, rtt, capped, run, args.timeout),  # noqa: B023
                          c.key, **where)
                _tidy(lambda: kafka_ops.delete_topics(j.target, j.tag))  # noqa: B023
                doc["wan"].append(row)
                save()
                print(f"run {run} wan {placement:11} {rtt:5.0f} ms{' capped' if capped else '       '} {c.key:16} "
                      f"{_wan_status(row)}  load {os.getloadavg()[0]:.2f}", flush=True)
        for placement in placements if args.wan_steady_rate else ():
            for c in rotated(wan_contenders, run):
                j = job(f"wansteady-{int(time.time() * 1000) % 10**9}", 1024, 0, shape="keyed")
                where = {"run": run, "placement": placement, "rtt_ms": args.wan_steady_rtt}
                row = one(lambda: wan.steady_cell(box, c, j, placement, args.wan_steady_rtt,  # noqa: B023
                                                  args.wan_steady_rate, step_s, run), c.key, **where)  # noqa: B023
                _tidy(lambda: kafka_ops.delete_topics(j.target, j.tag))  # noqa: B023
                _tidy(lambda: kafka_ops.delete_topics(j.source, j.topic))  # noqa: B023
                doc["wan_steady"].append(row)
                save()
                status = (f"p50 {row['p50_s']:.3f}s p99 {row['p99_s']:.3f}s bounded {row['bounded']}"
                          if row.get("ok") else f"FAILED: {row.get('error')}")
                print(f"run {run} wan steady {placement:11} {args.wan_steady_rtt:5.0f} ms {c.key:16} "
                      f"{args.wan_steady_rate:.0f}/s keyed 1024 B {status}  load {os.getloadavg()[0]:.2f}", flush=True)


def _wan_status(row: dict) -> str:
    if not row.get("ok"):
        return f"FAILED: {row.get('error', '')[:300]}"
    return (f"{row['records_per_s']:10.0f} rec/s {row['mb_per_s']:7.1f} MB/s {row['cpu_s_per_gb']:6.1f} CPU-s/GB"
            + (f" link {row['link_cpu_s_per_gb']:.1f} CPU-s/GB, {row['link_bytes_per_payload_byte']:.2f} B per "
               "payload B" if "link_cpu_s_per_gb" in row else ""))


def _record_class_archive() -> None:
    """The "with caches" runs of ours map a Spark class-data archive recorded before the first
    measurement, as make test's and the image's (replicator spark-warmup), unless it exists."""
    from replicator.config import ReplicatorConfig
    from replicator.engine import spark_cache

    archive = spark_cache.class_archive(ReplicatorConfig())
    if archive is None or archive.is_file():
        return
    subprocess.run([str(Path(sys.executable).with_name("replicator")), "spark-warmup"], check=False, timeout=900)
    print(f"class-data archive {'recorded' if archive.is_file() else 'NOT recorded'}: {archive}", flush=True)


def _catch_up(box: Sandbox, contender, j: Job, run: int, timeout: float, loads: list) -> catchup.CatchUp:
    """One catch-up measurement on a settled box (the load average at its start goes to `loads`),
    its target topics deleted afterwards."""
    _settle(box)
    loads.append([time.time(), *os.getloadavg()])
    r = _guarded(lambda: catchup.measure(contender, j, run, timeout),
                 lambda e: catchup.CatchUp(contender.key, j.size, j.records, run, ok=False, error=f"bench error: {e}"))
    _tidy(lambda: kafka_ops.delete_topics(j.target, j.tag))
    return r


def _warm_up(contender, jobs: dict, box: Sandbox, timeout: float) -> None:
    """One catch-up per record size that counts for nothing before run 1. The first catch-up on
    freshly started brokers copied 137k-229k rec/s against 235k-390k later in 4 of the 6 bench
    invocations without it (BENCHMARKS.md, "How it is measured"), and run 1 starts with the first
    contender given, so it was always ours."""
    for size, j in jobs.items():
        r = _catch_up(box, contender, j, 0, timeout, [])
        print(f"warm-up {size:5d} B {contender.key:16} "
              f"{f'{r.records_per_s:10.0f} rec/s (not counted)' if r.ok else f'FAILED: {r.error}'}", flush=True)


def _step_s(args: argparse.Namespace) -> float:
    """Seconds per steady-state rate step, in the steady part and the WAN steady cells alike."""
    return args.steady_step_s or (10.0 if args.quick else 15.0)


def _steady_warm_up(contender, j: Job, rate: float, box: Sandbox) -> None:
    """One 10 s step that counts for nothing before run 1 of a steady part that no catch-up preceded:
    the first contender on freshly started brokers read p50 0.10-0.14 s at 30k keyed records/s where
    every later job read 0.026-0.037 (three invocations, --first-s 0), and run 1 starts with ours."""
    _settle(box)
    steps, r, _ = _guarded(lambda: steady.measure(contender, j, 0, rate, 10.0, (1.0,), restart_too=False),
                           lambda e: ([], {"error": f"bench error: {e}"}, None))
    _tidy(lambda: kafka_ops.delete_topics(j.target, j.tag))
    _tidy(lambda: kafka_ops.delete_topics(j.source, j.topic))
    status = f"p50 {steps[0]['p50_s']:.3f}s (not counted)" if steps else f"FAILED: {r.get('error')}"
    print(f"warm-up steady {j.size:5d} B {j.shape:7} {contender.key:16} {rate:.0f}/s {status}", flush=True)


def _delete_at_once(box: Sandbox) -> None:
    """Deleted topics' files go at once instead of a minute later (log.segment.delete.delay.ms,
    set on the bench's own brokers only). Every measurement deletes the ~1 GB it wrote; a minute
    later the broker removed those files during whichever measurement ran then, and that one paid
    for it: replicator exactly-once copied 1 KiB at 249k-253k rec/s against 377k-411k with the
    deletions kept out, the brokers' CPU per GB 3.5 against 1.8-2.0 (BENCHMARKS.md, "How it
    is measured")."""
    for cluster in (box.source, box.target):
        a = kafka_ops.admin(cluster.bootstrap)
        nodes = a.describe_cluster(request_timeout=30).result().nodes
        entry = ConfigEntry("log.segment.delete.delay.ms", "0", incremental_operation=AlterConfigOpType.SET)
        for f in a.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, str(n.id),
                                                             incremental_configs=[entry]) for n in nodes]).values():
            f.result()


def _settle(box: Sandbox, timeout_s: float = 60.0) -> None:
    """Before a measurement: the files of deleted topics are gone, and what the last one wrote is
    on disk, so neither is done during this one."""
    deadline = time.monotonic() + timeout_s
    dirs = [Path(d) for c in (box.source, box.target) for d in c.data_dirs()]
    while time.monotonic() < deadline and any(p.name.endswith("-delete") for d in dirs for p in d.glob("*/*")):
        time.sleep(0.5)
    os.sync()


def _guarded(measure, on_error):
    """A contender or harness failure is a result to report, never the end of the whole run."""
    try:
        return measure()
    except Exception as e:  # noqa: BLE001 - whatever failed is written into the results
        traceback.print_exc()
        return on_error(f"{type(e).__name__}: {e}")


def _tidy(action) -> None:
    try:
        action()
    except Exception as e:  # noqa: BLE001 - a leftover topic only costs disk
        print(f"cleanup failed (continuing): {e}", flush=True)


def _max_rates(arg: str | None, sizes: list[int], catchup_rows: list[dict]) -> dict[int, float]:
    """100 % rate of the steady steps per record size: given, else the replicator exactly-once
    catch-up median of this run, else a rate this box sustains at any size."""
    given: dict[int, float] = {}
    for part in (arg or "").split(","):
        if "=" in part:
            size, rate = part.split("=")
            given[int(size)] = float(rate)
        elif part:
            given[sizes[0]] = float(part)
    return {size: given.get(size) or report.median_rate(catchup_rows, "replicator-eos", size) or 20_000
            for size in sizes}


def _preloaded(box: Sandbox, size: int, records: int, logdir: Path, text: bool = False) -> str:
    """The source topic of a record size, loaded once and reused by every run and later invocations.
    `text`: compressible payloads in lz4 batches (the capped WAN link's records)."""
    topic = f"bench-{'text-' if text else ''}{size}b-{records}"
    ends = kafka_ops.CommittedEnds(box.source.bootstrap, topic, PARTITIONS)
    have = ends.total() if kafka_ops.topic_exists(box.source.bootstrap, topic) else 0
    if have != records:
        if have:
            kafka_ops.delete_topics(box.source.bootstrap, topic)
            time.sleep(2)
        extra = ({"payload_file": wan.text_payload_file(size, logdir / f"text-{size}b.payloads"),
                  "compression": wan.COMPRESSION} if text else {})
        took = kafka_ops.preload(box.source.bootstrap, topic, PARTITIONS, records, size, logdir / "preload.log",
                                 **extra)
        print(f"preloaded {records} x {size} B into {topic} in {took:.1f}s", flush=True)
    return topic


if __name__ == "__main__":
    sys.exit(main())
