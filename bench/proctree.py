"""Contender processes: started in their own session, measured as a tree, stopped by process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from bench import reaper

PSS_INTERVAL_S = 1.0


def _pss(pid: int) -> int:
    """Bytes of proportional set size (/proc/PID/smaps_rollup), 0 for a process that is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def role(p: psutil.Process) -> str:
    """What a member of a tree is, by its command line: where the memory of a peak sits (raises
    psutil.Error for a process that is gone)."""
    cmd = p.cmdline()
    text = " ".join(cmd)
    if cmd and Path(cmd[0]).name == "java":
        return "jvm"
    if "pyspark.daemon" in text:
        # Spark's fork server and the workers it forks share one command line.
        with contextlib.suppress(psutil.Error):
            parent = p.parent()
            if parent is not None and "pyspark.daemon" in " ".join(parent.cmdline()):
                return "python worker (forked by a daemon)"
        return "pyspark daemon"
    if "python_streaming_source_runner" in text:
        return "python streaming source runner"
    if "pyspark.worker" in text or "pyspark.sql.worker" in text:
        return "python worker"
    if len(cmd) > 2 and Path(cmd[1]).name == "replicator":
        return "replicator driver"
    return Path(cmd[0]).name if cmd else "?"


class Tree:
    """One started command and all its descendants (Spark JVM, Python workers, ...)."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.cmd = cmd
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **(env or {})}, start_new_session=True)
        reaper.watch(self.proc.pid)
        self.root = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        # Proportional set size: a page shared by N processes counts 1/N to each, so the tree's sum
        # counts every page once. The RSS sum counts pages a forking parent shares with its children
        # once per process (Spark's Python fork server and its workers, which the job once
        # ran); a single JVM has no such pages.
        self.peak_pss = 0
        # MiB and count of processes per role at the sample with the highest RSS sum.
        self.peak_by_role: dict[str, dict] = {}
        self._pss_at = 0.0
        self._dead_cpu: dict[int, float] = {}

    def members(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def sample(self) -> tuple[float, int]:
        """(CPU seconds of the tree so far, RSS bytes now); updates the peak RSS.

        A descendant that exited keeps the CPU of its last sample (children_* times are not used:
        they would count a reaped child twice); only work between two samples can be missed."""
        rss = 0
        by_pid: dict[int, int] = {}
        for p in self.members():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                self._dead_cpu[p.pid] = t.user + t.system
                by_pid[p.pid] = p.memory_info().rss
                rss += by_pid[p.pid]
        if rss > self.peak_rss:
            self.peak_rss = rss
            # Read now, not when first seen: a forked process shows its parent's command line until
            # it execs (the JVM's launcher script, Spark's Python workers).
            by_role: dict[str, list[int]] = {}
            for pid, n in by_pid.items():
                try:
                    what = role(psutil.Process(pid))
                except psutil.Error:
                    continue  # exited since the sample: its RSS is in the sum, it has no role any more
                by_role.setdefault(what, []).append(n)
            self.peak_by_role = {what: {"mib": round(sum(ns) / 2**20, 1), "processes": len(ns),
                                        "each": sorted((round(n / 2**20) for n in ns), reverse=True)}
                                 for what, ns in by_role.items()}
        now = time.monotonic()
        if now - self._pss_at >= PSS_INTERVAL_S:  # reading smaps costs more than status: once a second
            self._pss_at = now
            self.peak_pss = max(self.peak_pss, sum(_pss(p.pid) for p in self.members()))
        return sum(self._dead_cpu.values()), rss

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group (what a crash or an OOM kill does)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)

    def stop(self, grace: float = 0.0) -> None:
        """SIGTERM to the root only (as Kubernetes does) and up to `grace` s to exit, then SIGKILL
        to the group so nothing it started outlives it."""
        if grace > 0 and self.running():
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        self.kill()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
