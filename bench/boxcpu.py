"""What the rest of the box spent while a contender copied: the sandbox brokers' CPU, and the share of
the box's CPU time that stayed idle or that the hypervisor stole.

A catch-up ratio between two contenders can only be as large as the box lets it be. When the box is
saturated (idle near 0), records/s is about cores / (brokers' + contender's CPU-s per record), and
the brokers' share is about the same for every contender: the ratio is capped at
(theirs + brokers) / (ours + brokers), whatever our loop does with the time it waits.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class BoxSample:
    brokers_cpu_s: float
    idle_s: float  # idle + iowait, all cores
    steal_s: float
    total_s: float  # every state but guest time (already counted as user)


def sample(broker_pids: tuple[int, ...]) -> BoxSample:
    t = psutil.cpu_times()
    brokers = 0.0
    for pid in broker_pids:
        with contextlib.suppress(psutil.Error):  # a broker that is gone adds nothing
            c = psutil.Process(pid).cpu_times()
            brokers += c.user + c.system
    total = sum(getattr(t, f) for f in t._fields if f not in ("guest", "guest_nice"))
    return BoxSample(brokers, t.idle + getattr(t, "iowait", 0.0), getattr(t, "steal", 0.0), total)


@dataclass(frozen=True)
class BoxShare:
    brokers_cpu_s_per_gb: float
    idle_share: float
    steal_share: float


def between(a: BoxSample, b: BoxSample, gigabytes: float) -> BoxShare:
    """From sample `a` to the later sample `b`, over `gigabytes` copied."""
    total = b.total_s - a.total_s
    if total <= 0 or gigabytes <= 0:
        return BoxShare(0.0, 0.0, 0.0)
    return BoxShare((b.brokers_cpu_s - a.brokers_cpu_s) / gigabytes,
                    (b.idle_s - a.idle_s) / total, (b.steal_s - a.steal_s) / total)


def ratio_cap(ours: float, ours_brokers: float, theirs: float, theirs_brokers: float) -> float:
    """The highest throughput ratio ours/theirs a saturated box allows, from CPU-s per GB copied: the
    contender's own and what the brokers spent serving it (batching changes the brokers' share)."""
    return (theirs + theirs_brokers) / (ours + ours_brokers)
