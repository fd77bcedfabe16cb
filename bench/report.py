"""BENCHMARKS.md and the throughput chart from bench/results.json."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path

from bench import boxcpu, parts
from bench.contenders import all_contenders

LABELS = {c.key: c.label for c in all_contenders(2)}
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


def half_max_steps(doc: dict, key: str, size: int = 1024) -> list[tuple[int, dict | None, dict]]:
    """(run, highest step at or below half the highest bounded rate or None, highest bounded step) per run."""
    out = []
    for run in sorted({s["run"] for s in doc["steady"] if s["contender"] == key and _size(s) == size}):
        bounded = sorted((s for s in doc["steady"] if s["contender"] == key and s["run"] == run
                          and _size(s) == size and s["bounded"]), key=lambda s: s["rate"])
        if bounded:
            top = bounded[-1]
            half = next((s for s in reversed(bounded) if s["fraction"] <= top["fraction"] / 2 + 1e-9), None)
            out.append((run, half, top))
    return out


def latency_by_rate(doc: dict, key: str, size: int) -> list[tuple[int, float, float, float]]:
    """(rate, p50, p95, p99) medians over runs, per rate step the contender reached."""
    out = []
    for rate in sorted({s["rate"] for s in doc["steady"] if s["contender"] == key and _size(s) == size}):
        xs = [s for s in doc["steady"] if s["contender"] == key and _size(s) == size and s["rate"] == rate]
        out.append((rate, *(statistics.median(s.get(f, float("nan")) for s in xs)
                            for f in ("p50_s", "p95_s", "p99_s"))))
    return out


def latency_chart(doc: dict, path: Path) -> None:
    """p50 and p99 by rate step, ours vs MM2, one panel per record size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({_size(s) for s in doc["steady"]}, reverse=True)
    if not sizes:
        return
    fig, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 5), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        for key in [k for k in ORDER if any(s["contender"] == k for s in doc["steady"])]:
            pts = latency_by_rate(doc, key, size)
            if not pts:
                continue
            color = "tab:blue" if key.startswith("replicator") else "tab:orange" if key.startswith("mm2") else "gray"
            rates = [p[0] for p in pts]
            ax.plot(rates, [p[1] for p in pts], "o-", color=color, label=f"{LABELS[key]} p50")
            ax.plot(rates, [p[3] for p in pts], "s--", color=color, label=f"{LABELS[key]} p99")
        ax.set_yscale("log")
        ax.set_xlabel("produce rate, records/s (rate steps; median over runs)")
        ax.set_ylabel("latency s, source CreateTime -> read_committed on target (log)")
        ax.set_title(f"steady state, {size} B records")
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
    for size in sorted({_size(s) for s in doc["steady"]}, reverse=True):
        out += [f"### Steady state ({size} B records, fixed produce rates, latency = source CreateTime -> "
                "delivered to a read_committed consumer on the target)", "",
                "| contender | rate rec/s | produced rec/s | p50 s | p95 s | p99 s | bounded lag in runs |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for k in keys:
            for rate, p50, p95, p99 in latency_by_rate(doc, k, size):
                xs = [s for s in doc["steady"] if s["contender"] == k and _size(s) == size and s["rate"] == rate]
                produced = [s["produced_per_s"] for s in xs if "produced_per_s" in s]
                prod = statistics.median(produced) if produced else None
                out.append(f"| {LABELS[k]} | {rate:,} | {_fmt(prod, ',.0f')} | {_fmt(p50, '.3f')} | "
                           f"{_fmt(p95, '.3f')} | {_fmt(p99, '.3f')} | {sum(s['bounded'] for s in xs)}/{len(xs)} |")
        out += ["", f"Per run ({size} B): the highest rate whose lag stayed bounded, and the latency at the highest "
                "step at or below half of it:", "",
                "| contender | run | highest bounded rate rec/s | step <= half of it rec/s | p50 s | p99 s |",
                "|---|---:|---:|---:|---:|---:|"]
        for k in keys:
            for run, half, top in half_max_steps(doc, k, size):
                row = f"| {LABELS[k]} | {run} | {top['rate']:,} | "
                out.append(row + (f"{half['rate']:,} | {half['p50_s']:.3f} | {half['p99_s']:.3f} |" if half
                                  else "- | - | - |"))
        out.append("")
    for e in doc.get("steady_errors", []):
        out.append(f"- steady state {e['size']} B, {LABELS.get(e['contender'], e['contender'])}, run {e['run']} "
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
    return out


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


def write(doc: dict, md: Path, png: Path, latency_png: Path | None = None) -> None:
    chart(doc, png)
    latency_png = latency_png or png.with_name("latency.png")
    latency_chart(doc, latency_png)
    head = ["# Benchmarks", "",
            "Generated by `make bench` (`bench/run.py`) from `bench/results.json`; method and analysis below.", ""]
    invocations = [*doc.get("earlier", []), doc]
    if len(invocations) == 1:
        head += _invocation_lines(doc)
    else:  # parts measured by separate invocations (`bench.run --merge`), in the order the tables come
        order = list(parts.PARTS)
        for inv in sorted(invocations, key=lambda i: min(map(order.index, i["parts"]), default=len(order))):
            head.append(f"- **{', '.join(inv['parts']) or 'nothing measured'}**:")
            head += ["  " + line for line in _invocation_lines(inv)]
    head += [
        "", "![throughput by contender and record size](bench/throughput.png)", "",
    ]
    if doc["steady"]:
        head += ["![steady-state latency by rate, ours vs MM2](bench/latency.png)", ""]
    marker = "<!-- analysis -->"
    old = md.read_text() if md.exists() else ""
    analysis = old[old.index(marker):] if marker in old else f"{marker}\n"
    md.write_text("\n".join(head + tables(doc) + steady_tables(doc) + many_tables(doc)) + "\n" + analysis)
