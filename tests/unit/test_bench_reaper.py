"""`make bench` leaves nothing running, whatever ends it: a SIGKILLed benchmark's contenders die too."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def test_contenders_of_a_killed_benchmark_are_killed(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, time
        from pathlib import Path
        from bench import reaper
        from bench.proctree import Tree
        reaper.start(Path({str(tmp_path / "pids")!r}))
        Tree(["bash", "-c", "sleep 600 & echo $! $$ > {tmp_path / "started"}; wait"],
             Path({str(tmp_path / "tree.log")!r}))
        while not Path({str(tmp_path / "started")!r}).exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    started = [psutil.Process(int(pid)) for pid in (tmp_path / "started").read_text().split()]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        alive = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return
        time.sleep(0.2)
    raise AssertionError(f"left running after the benchmark was killed: {[p.cmdline() for p in alive]}")
