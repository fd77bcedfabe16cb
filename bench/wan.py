"""Across regions: catch-up through a delayed (and optionally bandwidth-capped) WAN link, for both
placements of the copier, and the link's own ceiling.

Placements (which cluster the copier reaches across the link, bench/link.py):
- near-target: the copier runs in the target's region; its source consumers cross the link.
- near-source: it runs in the source's region; its producers, transaction and offset commits (and
  MirrorMaker 2's Connect internal topics, which live on the target) cross the link.

The bench's own observers (end offsets, watcher) reach both clusters directly: they stand for
readers in each cluster's own region, so the link delays the copier only.

The steady-state cell: a fixed keyed rate through the link in each placement, latency as in
`bench/steady.py` (the load producer and the watcher in their clusters' regions).

The link's ceiling: Kafka's ProducerPerformance into the target and ConsumerPerformance from the
source, directly and through the link at 0 ms: if the link is what limits a copier, these show it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bench import catchup, link, steady
from bench.contenders import ConsumerPerf, Contender, Job, ProducerPerf

CONTENDERS = ("replicator-eos", "mm2-eos")
# Measured only when `--only` names them, as in the steady part: an A/B base (`--base-checkout`).
ON_REQUEST = ("replicator-eos-base",)
PLACEMENTS = {"near-target": "source", "near-source": "target"}  # placement -> the cluster across the link
RTTS_MS = (0, 10, 50, 100)
STEADY_RATE, STEADY_RTT_MS = 10_000, 50.0  # the steady-state cell: keyed records/s, link round trip
COMPRESSION = "lz4"  # the capped link's records: compressed alike by every copier's producer (and the loader)


def across(box, placement: str):
    """The cluster a placement reaches across the link; refuses one whose broker lacks the listener."""
    cluster = getattr(box, PLACEMENTS[placement])
    for node in getattr(cluster, "nodes", [cluster]):
        if "PROXIED://" not in (node.dir / "server.properties").read_text():
            raise RuntimeError(f"the {cluster.name} broker runs without its proxied listener: stop the bench "
                               "sandbox (`replicator sandbox down` with the same port shift) and run again")
    return cluster


def through(job: Job, placement: str, bootstrap: str) -> Job:
    """`job` with the copier reaching the far cluster at `bootstrap`."""
    side = PLACEMENTS[placement]
    return dataclasses.replace(job, **{f"{side}_via": bootstrap})


def measure(box, contender: Contender, job: Job, placement: str, rtt_ms: float, cap_bytes_per_s: float | None,
            run: int, timeout: float) -> dict:
    """One catch-up of `job` by `contender` with the far cluster `rtt_ms` away."""
    far = across(box, placement)
    with link.Link(far, rtt_ms, cap_bytes_per_s, job.log("link")) as wan:
        cpu0 = wan.cpu_s()
        r = catchup.measure(contender, through(job, placement, wan.bootstrap), run, timeout)
        link_cpu = wan.cpu_s() - cpu0
    gb = job.records * job.size / 1e9
    return {**r.to_dict(), "placement": placement, "rtt_ms": rtt_ms,
            "cap_mb_per_s": cap_bytes_per_s / 1e6 if cap_bytes_per_s else None,
            "compression": job.compression or "none",
            # The forwarder's CPU over the contender's whole life (start-up included) per GB of payload.
            "link_cpu_s_per_gb": link_cpu / gb if gb else 0.0,
            "link_up_mb": wan.forwarded[0] / 1e6, "link_down_mb": wan.forwarded[1] / 1e6,
            # Bytes the link carried (both directions) per byte of payload copied: above 1 / compression
            # ratio, the copier moves data across the link more than once (refetches, retries).
            "link_bytes_per_payload_byte": sum(wan.forwarded) / (gb * 1e9) if gb else 0.0}


def steady_cell(box, contender: Contender, job: Job, placement: str, rtt_ms: float, rate: float,
                step_s: float, run: int) -> dict:
    """Latency at a fixed keyed rate with the far cluster `rtt_ms` away: a reader in the target's region
    (the watcher) sees each record this long after its producer in the source's region created it."""
    with link.Link(across(box, placement), rtt_ms, None, job.log("link")) as wan:
        steps, start, _ = steady.measure(contender, through(job, placement, wan.bootstrap), run, rate, step_s,
                                         (1.0,), restart_too=False)
    where = {"placement": placement, "rtt_ms": rtt_ms}
    if not steps:
        return {"contender": contender.key, "run": run, "ok": False, **where,
                "error": start.get("error", "no step measured")}
    return {**steps[0], "ok": True, **where}


def ceiling(box, job: Job, tool: str, rtt_ms: float | None, run: int, timeout: float) -> dict:
    """ProducerPerformance into the target (`tool` "produce") or ConsumerPerformance from the source
    ("consume"), directly (`rtt_ms` None) or through the link at `rtt_ms`."""
    contender: Contender = ProducerPerf(False) if tool == "produce" else ConsumerPerf()
    placement = "near-source" if tool == "produce" else "near-target"
    if rtt_ms is None:
        r = catchup.measure(contender, job, run, timeout)
        return {**r.to_dict(), "tool": tool, "via": "direct", "rtt_ms": 0}
    with link.Link(across(box, placement), rtt_ms, None, job.log("link")) as wan:
        r = catchup.measure(contender, through(job, placement, wan.bootstrap), run, timeout)
    payload = job.records * job.size
    return {**r.to_dict(), "tool": tool, "via": "link", "rtt_ms": rtt_ms,
            "link_bytes_per_payload_byte": sum(wan.forwarded) / payload if payload else 0.0}


def text_payload_file(size: int, path: Path) -> Path:
    """ProducerPerformance's --payload-file of compressible payloads (bench/shapes.py)."""
    from bench import shapes

    path.write_bytes(b"\n".join(shapes.text_payloads(size)) + b"\n")
    return path
