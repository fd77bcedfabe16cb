"""Nothing the benchmark starts outlives it, whatever ends it (SIGKILL and segfaults included).

A watchdog in its own session polls the benchmark's process. Once that is gone, the watchdog kills
every process group the benchmark registered (each contender, preload and sandbox broker is a
session leader) that still is the process that was registered (same PID and start time, so a
recycled PID is never hit). A clean exit has already stopped them all, and the watchdog finds
nothing left to do.

    .venv/bin/python -m bench.reaper OWNER_PID OWNER_START_TIME REGISTRY   (started by `start`, not by hand)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

_registry: Path | None = None


def start(registry: Path) -> None:
    """Watches this process from now on; `watch` registers what it must not leave behind."""
    global _registry
    _registry = registry
    registry.touch()
    me = os.getpid()
    subprocess.Popen([sys.executable, "-m", "bench.reaper", str(me), str(psutil.Process(me).create_time()),
                      str(registry)],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, cwd=Path(__file__).resolve().parents[1])
    # SIGTERM ends the run through its finally blocks (which stop contenders and the sandbox) instead
    # of killing the interpreter where it stands.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def watch(pid: int) -> None:
    """Registers a session leader started by the benchmark (no-op outside `make bench`)."""
    if _registry is None:
        return
    with contextlib.suppress(psutil.Error), open(_registry, "a") as f:
        f.write(f"{pid} {psutil.Process(pid).create_time()}\n")


def _same(pid: int, created: float) -> psutil.Process | None:
    try:
        p = psutil.Process(pid)
        return p if abs(p.create_time() - created) < 0.01 else None
    except psutil.Error:
        return None


def main(owner_pid: int, owner_created: float, registry: Path) -> None:
    # The owner may already be gone by the time this process is up (killed right after starting).
    while (owner := _same(owner_pid, owner_created)) is not None:
        with contextlib.suppress(psutil.Error):
            if owner.status() == psutil.STATUS_ZOMBIE:
                break
        time.sleep(0.5)
    for line in registry.read_text().splitlines() if registry.exists() else []:
        pid_text, created_text = line.split()
        if _same(int(pid_text), float(created_text)) is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid_text), signal.SIGKILL)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3]))
