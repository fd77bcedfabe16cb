"""BENCHMARKS.md and the throughput chart from bench/results.json."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path

from bench import boxcpu, parts, shapes, wan
from bench.contenders import BaseCheckout, all_contenders

LABELS = {c.key: c.label for c in all_contenders(2)} | {BaseCheckout.key: BaseCheckout.label}
ORDER = list(LABELS)
# Exactly-once with the consumer-group translation index on -> the same with it off (issue 12: <= 2 % cost).
INDEX_OFF = {"replicator-eos": "replicator-eos-noindex", "bare-python-eos": "bare-python-eos-noindex"}


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    from confluent_kafka import libversion

    from replicator.sandbox import DEFAULT_KAFKA_VERSION
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1), "kernel": platform.release(),
            "python": platform.python_version(), "java": java[0] if java else "",
            "kafka": DEFAULT_KAFKA_VERSION, "librdkafka": libversion()[0]}


def _ok(rows: list[dict], key: str, size: int) -> list[dict]:
    return [r for r in rows if r["contender"] == key and r["size"] == size and r["ok"]]


def median_rate(rows: list[dict], key: str, size: int) -> float | None:
    ok = _ok(rows, key, size)
    return statistics.median(r["records_per_s"] for r in ok) if ok else None


def paired_ratio(rows: list[dict], a: str, b: str, size: int) -> tuple[float | None, list[float]]:
    """Median over runs of rate(a)/rate(b), each ratio taken within one interleaved run."""
    ra = {r["run"]: r["records_per_s"] for r in _ok(rows, a, size)}
    rb = {r["run"]: r["records_per_s"] for r in _ok(rows, b, size)}
    ratios = [ra[k] / rb[k] for k in sorted(ra) if k in rb and rb[k] > 0]
    return (statistics.median(ratios) if ratios else None), ratios


def _median(xs) -> float | None:
    xs = list(xs)
    return statistics.median(xs) if xs else None


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None or x != x else format(x, spec)  # x != x: NaN (not measured)


def chart(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["catchup"]
    sizes = sorted({r["size"] for r in rows}, reverse=True)
    if not sizes:
        return
    keys = [k for k in ORDER if any(r["contender"] == k for r in rows)]
    fig, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 5), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        meds, lo, hi = [], [], []
        for k in keys:
            vals = [r["mb_per_s"] for r in _ok(rows, k, size)]
            m = statistics.median(vals) if vals else 0
            meds.append(m)
            lo.append(m - min(vals) if vals else 0)
            hi.append(max(vals) - m if vals else 0)
        colors = ["tab:blue" if k.startswith(("replicator", "bare")) else
                  "tab:orange" if k.startswith("mm2") else "tab:gray" for k in keys]
        ax.barh(range(len(keys)), meds, xerr=[lo, hi], color=colors)
        ax.set_yticks(range(len(keys)), [LABELS[k] for k in keys], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("MB/s of payload (median, min-max whiskers)")
        n = max((r["records"] for r in rows if r["size"] == size), default=0)
        ax.set_title(f"catch-up, {n:,} x {size} B, 8 partitions")
        for i, m in enumerate(meds):
            rps = median_rate(rows, keys[i], size)
            ax.text(m + hi[i], i, f" {_fmt(m, '.1f')} MB/s, {_fmt(rps, ',.0f')} rec/s", va="center", fontsize=7)
        ax.set_xlim(0, max(m + h for m, h in zip(meds, hi, strict=True)) * 1.6 or 1)
    fig.suptitle(f"{doc['machine']['cores']} cores, {doc['runs']} interleaved runs, {doc['started']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tables(doc: dict) -> list[str]:
    rows = doc["catchup"]
    out = []
    for size in sorted({r["size"] for r in rows}, reverse=True):
        n = max(r["records"] for r in rows if r["size"] == size)
        out += [f"### Catch-up, {n:,} records x {size} B, {doc['partitions']} partitions", "",
                "| contender | records/s | MB/s | CPU s/GB | peak RSS MiB | peak PSS MiB | "
                "start-up to first record written s | "
                "vs MM2 EOS | vs txn produce ceiling | vs parallel txn producers ceiling | index on / off | runs ok |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k in ORDER:
            all_runs = [r for r in rows if r["contender"] == k and r["size"] == size]
            if not all_runs:
                continue
            ok = _ok(rows, k, size)

            def med(f: str, ok: list[dict] = ok) -> float | None:
                return _median(r[f] for r in ok if f in r)  # older results lack newer fields
            vs_mm2, _ = paired_ratio(rows, k, "mm2-eos", size)
            vs_txn, _ = paired_ratio(rows, k, "produce-txn", size)
            vs_par, _ = paired_ratio(rows, k, "produce-txn-parallel", size)
            index = paired_ratio(rows, k, INDEX_OFF[k], size)[0] if k in INDEX_OFF else None
            out.append(f"| {LABELS[k]} | {_fmt(med('records_per_s'), ',.0f')} | {_fmt(med('mb_per_s'), '.1f')} | "
                       f"{_fmt(med('cpu_s_per_gb'), '.1f')} | {_fmt(med('peak_rss_mb'), '.0f')} | "
                       f"{_fmt(med('peak_pss_mb'), '.0f')} | "
                       f"{_fmt(med('first_visible_s'), '.1f')} | {_fmt(vs_mm2)} | {_fmt(vs_txn)} | {_fmt(vs_par)} | "
                       f"{'' if k not in INDEX_OFF else _fmt(index, '.3f')} | {len(ok)}/{len(all_runs)} |")
        out.append("")
        out += box_table(rows, size)
        for (on, off), what in zip(INDEX_OFF.items(), ("replicator exactly-once", "bare loop"), strict=True):
            ratio, each = paired_ratio(rows, on, off, size)
            if ratio is not None:
                out += [f"Translation index cost, {what}: throughput index on / off = {ratio:.3f} (median of "
                        f"paired runs: {', '.join(f'{r:.3f}' for r in each)}).", ""]
    return out


def box_table(rows: list[dict], size: int) -> list[str]:
    """The rest of the box over each contender's measured window (bench/boxcpu.py), and the ratio
    to MirrorMaker 2 a saturated box would allow at these CPU costs: the cap on "vs MM2 EOS"."""
    have = [r for r in rows if r["size"] == size and r["ok"] and r.get("brokers_cpu_s_per_gb")]
    if not have:
        return []  # results from before these fields
    out = ["While each copied (medians): the two brokers' CPU per GB copied, and the box's CPU time idle "
           "or stolen by the hypervisor. On a saturated box (idle near 0) \"vs MM2 EOS\" cannot exceed "
           "(MM2's CPU s/GB + the brokers' while it copied) / (ours + the brokers' while we copied), the cap "
           "column.", "",
           "| contender | brokers CPU s/GB | box idle % | box steal % | cap vs MM2 EOS, saturated box |",
           "|---|---:|---:|---:|---:|"]

    def med(f: str, of: list[dict]) -> float | None:
        return _median(r[f] for r in of)
    mm2 = [r for r in have if r["contender"] == "mm2-eos"]
    theirs = (med("cpu_s_per_gb", mm2), med("brokers_cpu_s_per_gb", mm2)) if mm2 else None
    for k in ORDER:
        mine = [r for r in have if r["contender"] == k]
        if not mine:
            continue
        cap = (boxcpu.ratio_cap(med("cpu_s_per_gb", mine), med("brokers_cpu_s_per_gb", mine), *theirs)
               if theirs else None)
        out.append(f"| {LABELS[k]} | {_fmt(med('brokers_cpu_s_per_gb', mine), '.1f')} | "
                   f"{_fmt(100 * med('box_idle_share', mine), '.0f')} | "
                   f"{_fmt(100 * med('box_steal_share', mine), '.1f')} | {_fmt(cap)} |")
    return [*out, ""]


def _size(s: dict) -> int:
    return s.get("size", 1024)  # results from before the 100 B series were all 1 KiB


def _shape(s: dict) -> str:
    return s.get("shape", "keyless")  # results from before the load shapes were all keyless (sticky)


def _series(doc: dict) -> list[tuple[str, int]]:
    """(shape, size) of every steady-state series, the default shape and the largest size first."""
    have = {(_shape(s), _size(s)) for s in doc["steady"]}
    return sorted(have, key=lambda x: (shapes.SHAPES.index(x[0]) if x[0] in shapes.SHAPES else 99, -x[1]))


def _of(doc: dict, key: str, size: int, shape: str | None) -> list[dict]:
    return [s for s in doc["steady"] if s["contender"] == key and _size(s) == size
            and (shape is None or _shape(s) == shape)]


def half_max_steps(doc: dict, key: str, size: int = 1024,
                   shape: str | None = None) -> list[tuple[int, dict | None, dict]]:
    """(run, highest step at or below half the highest bounded rate or None, highest bounded step) per run."""
    out = []
    mine = _of(doc, key, size, shape)
    for run in sorted({s["run"] for s in mine}):
        bounded = sorted((s for s in mine if s["run"] == run and s["bounded"]), key=lambda s: s["rate"])
        if bounded:
            top = bounded[-1]
            half = next((s for s in reversed(bounded) if s["fraction"] <= top["fraction"] / 2 + 1e-9), None)
            out.append((run, half, top))
    return out


def latency_by_rate(doc: dict, key: str, size: int, shape: str | None = None) -> list[tuple[int, float, float, float]]:
    """(rate, p50, p95, p99) medians over runs, per rate step the contender reached."""
    out = []
    mine = _of(doc, key, size, shape)
    for rate in sorted({s["rate"] for s in mine}):
        xs = [s for s in mine if s["rate"] == rate]
        out.append((rate, *(statistics.median(s.get(f, float("nan")) for s in xs)
                            for f in ("p50_s", "p95_s", "p99_s"))))
    return out


def latency_chart(doc: dict, path: Path) -> None:
    """p50 and p99 by rate step, ours vs MM2, one panel per record size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = _series(doc)
    if not series:
        return
    fig, axes = plt.subplots(1, len(series), figsize=(7 * len(series), 5), squeeze=False)
    for ax, (shape, size) in zip(axes[0], series, strict=True):
        for key in [k for k in ORDER if any(s["contender"] == k for s in doc["steady"])]:
            pts = latency_by_rate(doc, key, size, shape)
            if not pts:
                continue
            color = "tab:blue" if key.startswith("replicator") else "tab:orange" if key.startswith("mm2") else "gray"
            rates = [p[0] for p in pts]
            ax.plot(rates, [p[1] for p in pts], "o-", color=color, label=f"{LABELS[key]} p50")
            ax.plot(rates, [p[3] for p in pts], "s--", color=color, label=f"{LABELS[key]} p99")
        ax.set_yscale("log")
        ax.set_xlabel("produce rate, records/s (rate steps; median over runs)")
        ax.set_ylabel("latency s, source CreateTime -> read_committed on target (log)")
        ax.set_title(f"steady state, {shape} load, {size} B records")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{doc['machine']['cores']} cores, {doc['runs']} interleaved runs, {doc['started']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def steady_tables(doc: dict) -> list[str]:
    if not doc["steady"] and not doc["restart"]:
        return []
    out = []
    keys = [k for k in ORDER if any(s["contender"] == k for s in doc["steady"])]
    out += first_minute_table(doc)
    for shape, size in _series(doc):
        out += [f"### Steady state ({shape} load, {size} B records, fixed produce rates, latency = source "
                "CreateTime -> delivered to a read_committed consumer on the target)", "",
                "| contender | rate rec/s | produced rec/s | p50 s | p95 s | p99 s | bounded lag in runs |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for k in keys:
            for rate, p50, p95, p99 in latency_by_rate(doc, k, size, shape):
                xs = [s for s in _of(doc, k, size, shape) if s["rate"] == rate]
                produced = [s["produced_per_s"] for s in xs if "produced_per_s" in s]
                prod = statistics.median(produced) if produced else None
                out.append(f"| {LABELS[k]} | {rate:,} | {_fmt(prod, ',.0f')} | {_fmt(p50, '.3f')} | "
                           f"{_fmt(p95, '.3f')} | {_fmt(p99, '.3f')} | {sum(s['bounded'] for s in xs)}/{len(xs)} |")
        out += ["", f"Per run ({shape}, {size} B): the highest rate whose lag stayed bounded, and the latency at "
                "the highest step at or below half of it:", "",
                "| contender | run | highest bounded rate rec/s | step <= half of it rec/s | p50 s | p99 s |",
                "|---|---:|---:|---:|---:|---:|"]
        for k in keys:
            for run, half, top in half_max_steps(doc, k, size, shape):
                row = f"| {LABELS[k]} | {run} | {top['rate']:,} | "
                out.append(row + (f"{half['rate']:,} | {half['p50_s']:.3f} | {half['p99_s']:.3f} |" if half
                                  else "- | - | - |"))
        out.append("")
    for e in doc.get("steady_errors", []):
        out.append(f"- steady state {_shape(e)} {e['size']} B, {LABELS.get(e['contender'], e['contender'])}, "
                   f"run {e['run']} "
                   f"failed: {e['error'][:300]}")
    if doc.get("steady_errors"):
        out.append("")
    if not doc["restart"]:
        return out
    out += ["### Restart (SIGKILL of the whole process tree under load -> first new committed record "
            "on the target)", "", "| contender | restart s (median) | runs | peak RSS MiB (steady + restart) | "
            "peak PSS MiB |", "|---|---:|---|---:|---:|"]
    for k in [k for k in ORDER if any(r["contender"] == k for r in doc["restart"])]:
        xs = [r for r in doc["restart"] if r["contender"] == k]
        ok = [r["restart_s"] for r in xs if "restart_s" in r]
        out.append(f"| {LABELS[k]} | {_fmt(statistics.median(ok) if ok else None, '.1f')} | "
                   f"{', '.join(f'{x:.1f}' for x in ok)} ({len(ok)}/{len(xs)} ok) | "
                   f"{max(r.get('peak_rss_mb', 0) for r in xs):.0f} | "
                   f"{_fmt(max((r.get('peak_pss_mb', 0) for r in xs), default=None) or None, '.0f')} |")
    out.append("")
    recorded = [r for r in doc["restart"] if "archive_recorded" in r]
    if recorded:
        after = [r["archive_after_s"] for r in recorded if r["archive_recorded"]]
        out += [f"A fresh install starts with an empty Spark cache; with the background recording, its restart "
                f"is measured once the archive is published: {len(after)} of {len(recorded)} runs recorded it, "
                f"{', '.join(f'{x:.0f}' for x in after) or '-'} s after the first start. Recording off, a restart "
                f"loads Spark without an archive, as every start did before.", ""]
    return out


def first_minute_table(doc: dict) -> list[str]:
    rows = doc.get("first_minute", [])
    if not rows:
        return []
    out = ["### The first minute after a start (fixed rate from the first record the contender copied; "
           "latency as in steady state)", "",
           "Each steady-state series starts with it: the contender is launched, 100 records/s run until its first "
           "record is visible on the target, then the rate below for the span shown. p50/p99 over the whole span; "
           "the worst 10 s window is the window, counted from the first record created, with the highest p99 "
           "(median over runs, and every run's value with the second it started at).", "",
           "| load | size | contender | rate rec/s | span s | p50 s | p99 s | worst 10 s window p99 s | "
           "per run: worst window p99 s @ from s | runs |", "|---|---:|---|---:|---:|---:|---:|---:|---|---:|"]
    series = sorted({(_shape(r), _size(r)) for r in rows},
                    key=lambda x: (shapes.SHAPES.index(x[0]) if x[0] in shapes.SHAPES else 99, -x[1]))
    for shape, size in series:
        for k in [k for k in ORDER if any(r["contender"] == k for r in rows)]:
            xs = sorted((r for r in rows if r["contender"] == k and _shape(r) == shape and _size(r) == size),
                        key=lambda r: r["run"])
            if not xs:
                continue

            def med(f: str, xs: list[dict] = xs) -> float | None:
                return _median(r[f] for r in xs if r.get(f) == r.get(f))  # NaN: nothing received
            each = ", ".join(f"{_fmt(r['worst_window_p99_s'], '.2f')} @ {_fmt(r['worst_window_from_s'], '.0f')}"
                             for r in xs)
            out.append(f"| {shape} | {size} | {LABELS.get(k, k)} | {_fmt(med('rate'), ',.0f')} | "
                       f"{_fmt(med('seconds'), '.0f')} | {_fmt(med('p50_s'), '.3f')} | {_fmt(med('p99_s'), '.3f')} | "
                       f"{_fmt(med('worst_window_p99_s'), '.3f')} | {each} | {len(xs)} |")
    return [*out, ""]


def _wan_rows(doc: dict) -> list[dict]:
    return [r for r in doc.get("wan", []) if r.get("placement")]


def wan_paired(rows: list[dict], key: str, other: str = "mm2-eos") -> tuple[float | None, list[float]]:
    """Median over runs of rate(key)/rate(other) within one cell (same placement, RTT, cap) and run."""
    theirs = {r["run"]: r["records_per_s"] for r in rows if r["contender"] == other and r.get("ok")}
    ratios = [r["records_per_s"] / theirs[r["run"]] for r in rows
              if r["contender"] == key and r.get("ok") and theirs.get(r["run"])]
    return (statistics.median(ratios) if ratios else None), ratios


def wan_tables(doc: dict) -> list[str]:
    rows = _wan_rows(doc)
    out: list[str] = []
    ceiling = doc.get("link_ceiling", [])
    settings = doc.get("wan_settings", {})
    if ceiling:
        out += ["### The WAN link's own ceiling (Kafka's ProducerPerformance into the target, ConsumerPerformance "
                "read_committed from the source; directly and through the link at 0 ms)", "",
                f"Link: {settings.get('link', 'bench/wanproxy')}. Same records as the WAN catch-up below; "
                "\"link / direct\" is the median of the per-run ratios.", "",
                "| tool | via | records/s | MB/s | link / direct | link bytes / payload | runs ok |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for tool in ("produce", "consume"):
            for via in ("direct", "link"):
                xs = [r for r in ceiling if r.get("tool") == tool and r.get("via") == via]
                if not xs:
                    continue
                ok = [r for r in xs if r.get("ok")]
                direct = {r["run"]: r["records_per_s"] for r in ceiling
                          if r.get("tool") == tool and r.get("via") == "direct" and r.get("ok")}
                ratio = _median(r["records_per_s"] / direct[r["run"]] for r in ok if direct.get(r["run"]))
                carried = [r["link_bytes_per_payload_byte"] for r in ok if "link_bytes_per_payload_byte" in r]
                name = ("ProducerPerformance (acks=all, idempotent)" if tool == "produce"
                        else "ConsumerPerformance read_committed")
                out.append(f"| {name} | {via}{' 0 ms' if via == 'link' else ''} | "
                           f"{_fmt(_median(r['records_per_s'] for r in ok), ',.0f')} | "
                           f"{_fmt(_median(r['mb_per_s'] for r in ok), '.1f')} | "
                           f"{'' if via == 'direct' else _fmt(ratio)} | {_fmt(_median(carried))} | "
                           f"{len(ok)}/{len(xs)} |")
        out.append("")
    if not rows:
        return out
    out += [f"### Across regions: catch-up of {settings.get('records', 0):,} records x {settings.get('size', 0)} B "
            "through the WAN link", "",
            "near-target: the copier runs in the target's region, its source reads cross the link; near-source: it "
            "runs in the source's region, its produce, transaction and offset-commit requests cross it. RTT is the "
            "link's round trip (half of it each way). \"vs MM2 EOS\" is the median of the per-run ratios within "
            "the same cell. \"link CPU\" is the forwarder's CPU over the copier's whole run per GB of payload; "
            "\"link bytes / payload\" is what crossed the link, both directions, per byte of payload copied "
            "(about 1 uncompressed; more: records crossed it more than once).", "",
            "| placement | RTT ms | cap MB/s | compression | contender | records/s | MB/s | CPU s/GB | vs MM2 EOS | "
            "link CPU s/GB | link bytes / payload | start-up to first record s | runs ok |",
            "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cells = sorted({(r["placement"], r["rtt_ms"], r.get("cap_mb_per_s") or 0.0) for r in rows},
                   key=lambda c: (c[2] > 0, _placement_rank(c[0]), c[1]))
    for placement, rtt, cap in cells:
        cell = [r for r in rows if r["placement"] == placement and r["rtt_ms"] == rtt
                and (r.get("cap_mb_per_s") or 0.0) == cap]
        for k in [k for k in ORDER if any(r["contender"] == k for r in cell)]:
            xs = [r for r in cell if r["contender"] == k]
            ok = [r for r in xs if r.get("ok")]

            def med(f: str, ok: list[dict] = ok) -> float | None:
                return _median(r[f] for r in ok if f in r)
            vs = wan_paired(cell, k)[0] if k != "mm2-eos" else None
            errors = "; ".join(r.get("error", "")[:120] for r in xs if not r.get("ok"))
            out.append(f"| {placement} | {rtt:g} | {_fmt(cap, '.1f') if cap else '-'} | "
                       f"{xs[0].get('compression', 'none')} | {LABELS.get(k, k)} | "
                       f"{_fmt(med('records_per_s'), ',.0f')} | "
                       f"{_fmt(med('mb_per_s'), '.1f')} | {_fmt(med('cpu_s_per_gb'), '.1f')} | "
                       f"{'' if k == 'mm2-eos' else _fmt(vs)} | {_fmt(med('link_cpu_s_per_gb'), '.2f')} | "
                       f"{_fmt(med('link_bytes_per_payload_byte'))} | "
                       f"{_fmt(med('first_visible_s'), '.1f')} | {len(ok)}/{len(xs)}"
                       f"{' (' + errors + ')' if errors else ''} |")
    return [*out, ""]


def _placement_rank(placement: str) -> int:
    """WAN rows in the order of bench/wan.py's placements (an unknown one last)."""
    return list(wan.PLACEMENTS).index(placement) if placement in wan.PLACEMENTS else len(wan.PLACEMENTS)


def wan_steady_table(doc: dict) -> list[str]:
    rows = doc.get("wan_steady", [])
    if not rows:
        return []
    rate = _median(r["rate"] for r in rows if "rate" in r)
    out = [f"### Across regions: steady state through the WAN link (keyed load, 1024 B records, "
           f"{_fmt(rate, ',.0f')} records/s; latency as in steady state)", "",
           "The producer and the read_committed reader sit in their clusters' regions; only the copier crosses the "
           "link. p50 and p99 are medians of the runs' values.", "",
           "| placement | RTT ms | contender | p50 s | p99 s | p99 of each run s | bounded lag in runs |",
           "|---|---:|---|---:|---:|---|---|"]
    cells = sorted({(r["placement"], r["rtt_ms"]) for r in rows},
                   key=lambda c: (_placement_rank(c[0]), c[1]))
    for placement, rtt in cells:
        cell = [r for r in rows if r["placement"] == placement and r["rtt_ms"] == rtt]
        for k in [k for k in ORDER if any(r["contender"] == k for r in cell)]:
            xs = [r for r in cell if r["contender"] == k]
            ok = [r for r in xs if r.get("ok")]
            errors = "; ".join(r.get("error", "")[:120] for r in xs if not r.get("ok"))
            each = ", ".join(f"{r['p99_s']:.3f}" for r in ok)
            bounded = sum(bool(r.get("bounded")) for r in ok)
            p50, p99 = _median(r["p50_s"] for r in ok), _median(r["p99_s"] for r in ok)
            out.append(f"| {placement} | {rtt:g} | {LABELS.get(k, k)} | {_fmt(p50, '.3f')} | {_fmt(p99, '.3f')} | "
                       f"{each} | {bounded}/{len(xs)}{' (' + errors + ')' if errors else ''} |")
    return [*out, ""]


def wan_chart(doc: dict, path: Path) -> bool:
    """Catch-up MB/s by round trip, one panel per placement, a line per contender (uncapped link)."""
    rows = [r for r in _wan_rows(doc) if not r.get("cap_mb_per_s")]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    placements = [p for p in wan.PLACEMENTS if any(r["placement"] == p for r in rows)]
    fig, axes = plt.subplots(1, len(placements), figsize=(7 * len(placements), 5), squeeze=False)
    for ax, placement in zip(axes[0], placements, strict=True):
        for key in [k for k in ORDER if any(r["contender"] == k for r in rows)]:
            xs = [r for r in rows if r["placement"] == placement and r["contender"] == key and r.get("ok")]
            rtts = sorted({r["rtt_ms"] for r in xs})
            if not rtts:
                continue
            meds = [statistics.median(r["mb_per_s"] for r in xs if r["rtt_ms"] == t) for t in rtts]
            color = "tab:blue" if key.startswith("replicator") else "tab:orange" if key.startswith("mm2") else "gray"
            ax.plot(rtts, meds, "o-", color=color, label=LABELS.get(key, key))
            for t, m in zip(rtts, meds, strict=True):
                ax.annotate(f"{m:.0f}", (t, m), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        ax.set_xlabel("link round trip, ms")
        ax.set_ylabel("catch-up MB/s of payload (median over runs)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{placement}: {'source' if placement == 'near-target' else 'target'} across the link")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    settings = doc.get("wan_settings", {})
    fig.suptitle(f"{settings.get('records', 0):,} x {settings.get('size', 0)} B, {doc['machine']['cores']} cores, "
                 f"{doc['runs']} interleaved runs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def many_tables(doc: dict) -> list[str]:
    rows = doc.get("many", [])
    out = []
    for shape in sorted({(r["topics"], r["partitions"]) for r in rows}):
        xs = [r for r in rows if (r["topics"], r["partitions"]) == shape]
        total, size = xs[0]["records"], doc.get("many_size", 512)
        out += [f"### Many partitions: {shape[0]} topics x {shape[1]} partitions ({shape[0] * shape[1]:,} "
                f"partitions), {total:,} records x {size} B", "",
                "| contender | launch -> all visible s | vs MM2 EOS | idle CPU % of a core | idle peak RSS MiB | "
                "peak RSS MiB | peak PSS MiB | runs ok |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for k in [k for k in ORDER if any(r["contender"] == k for r in xs)]:
            ok = [r for r in xs if r["contender"] == k and r["ok"]]
            n = sum(r["contender"] == k for r in xs)

            def med(f: str, ok: list[dict] = ok) -> float | None:
                return _median(r[f] for r in ok if f in r)  # older results lack newer fields
            mm2 = {r["run"]: r["visible_s"] for r in xs if r["contender"] == "mm2-eos" and r["ok"]}
            ratios = [mm2[r["run"]] / r["visible_s"] for r in ok if r["run"] in mm2 and r["visible_s"] > 0]
            errors = "; ".join(r["error"][:120] for r in xs if r["contender"] == k and not r["ok"])
            out.append(f"| {LABELS[k]} | {_fmt(med('visible_s'), '.1f')} | "
                       f"{_fmt(statistics.median(ratios) if ratios else None)} | {_fmt(med('idle_cpu_pct'), '.1f')} | "
                       f"{_fmt(med('idle_peak_rss_mb'), '.0f')} | {_fmt(med('peak_rss_mb'), '.0f')} | "
                       f"{_fmt(med('peak_pss_mb'), '.0f')} | "
                       f"{len(ok)}/{n}{' (' + errors + ')' if errors else ''} |")
        out += ["", "\"vs MM2 EOS\" here is MM2's time to all visible / ours, per run (> 1: we are sooner).", ""]
        out += [f"Set-up failed: {e['error'][:300]}\n" for e in xs if e["contender"] not in LABELS]
    return out


def _max_heap(jvm_options: str) -> str:
    """"-Xms512m -Xmx2g" -> "2 GiB" (documents from before the heap was recorded ran with 512 MiB)."""
    xmx = next((o[4:] for o in jvm_options.split() if o.startswith("-Xmx")), "512m")
    return f"{xmx[:-1]} {'GiB' if xmx[-1] in 'gG' else 'MiB'}" if xmx[-1] in "gGmM" else xmx


def _invocation_lines(inv: dict) -> list[str]:
    """What one `bench.run` invocation was: command, machine, when, and how loaded the box was."""
    m = inv["machine"]
    loads = [x[1] for x in inv["load"]]
    return [
        f"- command: `{inv['command']}`",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, Python "
        f"{m['python']}, {m['java']}, Kafka {m['kafka']} (both sandbox clusters: one KRaft broker each, "
        f"{_max_heap(inv.get('broker_heap', '-Xmx512m'))} heap, same box), librdkafka {m['librdkafka']}",
        f"- when: {inv['started']} .. {inv.get('finished', '?')}; {inv['runs']} interleaved runs"
        + (" (--quick smoke run)" if inv["quick"] else "")
        + (f"; the target's transaction.version set to {inv['target_transaction_version']}"
           if "target_transaction_version" in inv else ""),
        f"- 1-minute load average at the start of each measurement: min {min(loads, default=0):.2f}, "
        f"median {statistics.median(loads) if loads else 0:.2f}, max {max(loads, default=0):.2f} "
        "(2 cores)",
    ]


def write(doc: dict, md: Path, png: Path, latency_png: Path | None = None, wan_png: Path | None = None) -> None:
    chart(doc, png)
    latency_png = latency_png or png.with_name("latency.png")
    latency_chart(doc, latency_png)
    wan_png = wan_png or png.with_name("wan.png")
    has_wan_chart = wan_chart(doc, wan_png)
    head = ["# Benchmarks", "",
            "Generated by `make bench` (`bench/run.py`) from `bench/results.json`; method and analysis below.", ""]
    invocations = [{**inv, "parts": parts.named(inv.get("parts", []))} for inv in [*doc.get("earlier", []), doc]]
    if len(invocations) == 1:
        head += _invocation_lines(doc)
    else:  # parts measured by separate invocations (`bench.run --merge`), in the order the tables come
        order = list(parts.PARTS)
        for inv in sorted(invocations, key=lambda i: min(map(order.index, i["parts"]), default=len(order))):
            series = f" (steady series: {', '.join(inv['series'])})" if inv.get("series") else ""
            head.append(f"- **{', '.join(inv['parts']) or 'nothing measured'}**{series}:")
            head += ["  " + line for line in _invocation_lines(inv)]
    head += [
        "", "![throughput by contender and record size](bench/throughput.png)", "",
    ]
    if doc["steady"]:
        head += ["![steady-state latency by rate, ours vs MM2](bench/latency.png)", ""]
    if has_wan_chart:
        head += ["![catch-up throughput by link round trip, ours vs MM2](bench/wan.png)", ""]
    marker = "<!-- analysis -->"
    old = md.read_text() if md.exists() else ""
    analysis = old[old.index(marker):] if marker in old else f"{marker}\n"
    md.write_text("\n".join(head + tables(doc) + steady_tables(doc) + many_tables(doc) + wan_tables(doc)
                            + wan_steady_table(doc)) + "\n"
                  + analysis)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.report [RESULTS]`: BENCHMARKS.md and the charts again from a results document
    (default bench/results.json), e.g. after a change to the tables, without measuring anything."""
    import argparse
    import json

    root = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("results", nargs="?", type=Path, default=root / "bench" / "results.json")
    args = p.parse_args(argv)
    write(json.loads(args.results.read_text()), root / "BENCHMARKS.md", root / "bench" / "throughput.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
