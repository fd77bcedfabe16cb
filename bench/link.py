"""The WAN link between the two regions: bench/wanproxy (a compiled forwarder) in front of one cluster.

A broker started with its proxied listener (KafkaCluster.proxied) advertises that listener at
`proxy_port`; the forwarder listens there and forwards to `proxied_port`, the listener itself. A
client that bootstraps at `Link.bootstrap` is sent back to the forwarder by every metadata response
and never reaches the broker directly (the same routing as tests/chaos/delayproxy.py).

`rtt_ms` is the round trip: each direction is delayed by half of it. `cap_bytes_per_s` caps each
direction, shared by every connection of the link.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from bench.proctree import Tree

SOURCE = Path(__file__).resolve().parent / "wanproxy" / "main.go"
# Outside the checkout, beside the other tools the project caches (a fresh clone reuses it).
BINARY = Path(os.environ.get("REPLICATOR_BENCH_PROXY", Path.home() / ".cache" / "replicator" / "bin" / "wanproxy"))
READY_TIMEOUT_S = 30.0


def binary() -> Path:
    """The forwarder, built with `go build` (no third-party module) when missing or older than its source."""
    if BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BINARY
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["nice", "-n", "19", "go", "build", "-o", str(BINARY), str(SOURCE)], check=True,
                       stdin=subprocess.DEVNULL, timeout=600, env={**os.environ, "GOFLAGS": "-mod=mod"})
    except FileNotFoundError as e:
        raise RuntimeError("building bench/wanproxy needs the Go toolchain (`go` on PATH)") from e
    return BINARY


def routes(cluster) -> list[str]:
    """LISTEN=UPSTREAM for every broker of `cluster` (one node or a multi-broker cluster)."""
    nodes = getattr(cluster, "nodes", [cluster])
    if not all(n.proxied for n in nodes):
        raise RuntimeError(f"{cluster.name} was started without its proxied listener")
    return [f"{n.host}:{n.proxy_port}={n.host}:{n.proxied_port}" for n in nodes]


def bootstrap(cluster) -> str:
    return ",".join(f"{n.host}:{n.proxy_port}" for n in getattr(cluster, "nodes", [cluster]))


class Link:
    """`with Link(cluster, rtt_ms, cap, log) as link:` a forwarder in front of `cluster` for the block."""

    def __init__(self, cluster, rtt_ms: float, cap_bytes_per_s: float | None, log: Path) -> None:
        self.bootstrap = bootstrap(cluster)
        self.cmd = [str(binary()), "-delay", f"{rtt_ms / 2:g}ms", "-rate", f"{cap_bytes_per_s or 0:.0f}",
                    *(a for r in routes(cluster) for a in ("-route", r))]
        self.log = log
        self.tree: Tree | None = None
        self.forwarded = (0, 0)  # bytes (towards the cluster, from it), known after the block

    def __enter__(self) -> Link:
        start = self.log.stat().st_size if self.log.exists() else 0
        self.tree = Tree(self.cmd, self.log)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "ready " not in self.log.read_text(errors="replace")[start:]:
            if not self.tree.running() or time.monotonic() > deadline:
                self.tree.stop()
                raise RuntimeError(f"the WAN link did not start: {self.tree.tail(5)}")
            time.sleep(0.05)
        return self

    def cpu_s(self) -> float:
        return self.tree.sample()[0] if self.tree else 0.0

    def __exit__(self, *exc) -> None:
        if self.tree is None:
            return
        self.tree.stop(grace=5)  # SIGTERM first: it prints what it forwarded
        self.forwarded = forwarded(self.tree.tail(3))


def forwarded(text: str) -> tuple[int, int]:
    """(up, down) bytes from the forwarder's last `forwarded up=N down=M` line."""
    found = re.findall(r"forwarded up=(\d+) down=(\d+)", text)
    return (int(found[-1][0]), int(found[-1][1])) if found else (0, 0)
