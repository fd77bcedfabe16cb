"""A local Spark standalone cluster (one master, N workers) on loopback, from the pyspark installation.

Every daemon runs in its own session, is stopped by its PID with the executors (and their Python
workers) it spawned, and gets SIGTERM if the test process dies: nothing is left running whatever the
test did.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pyspark

from tests.replicator_process import stop_with_parent

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
LOOPBACK = "127.0.0.1"
# Executor log lines (INFO, the executors' default level), e.g. "Running task 1.0 in stage 3.0 (TID 13)".
_TASK = re.compile(r"(Running|Finished) task (\d+)\.(\d+) in stage (\S+) \(TID (\d+)\)")


@dataclass(frozen=True)
class Task:
    """One task attempt an executor ran: `index`.`attempt` in `stage`, as Spark names it."""
    tid: int
    index: int
    attempt: int
    stage: str
    finished: bool


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    log: Path
    port: int
    work_dir: Path | None = None

    def tree(self) -> list[psutil.Process]:
        """The daemon and everything under it (a worker's executors and their Python workers)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def signal_tree(self, sig: signal.Signals) -> None:
        for p in self.tree():
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(sig)

    def kill(self, victims: list[psutil.Process] | None = None) -> list[int]:
        """SIGKILL the daemon's session (its own process group) and every process of its tree at
        once, as a machine failure would; returns the PIDs killed."""
        victims = self.tree() if victims is None else victims
        if self.proc.returncode is None:  # not reaped yet, so the group id cannot have been reused
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        for p in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(victims, timeout=30)
        self.proc.wait(30)
        return [p.pid for p in victims]


@dataclass
class SparkStandalone:
    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": LOOPBACK,
                "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_MEMORY": "256m",
                # Executors' shuffle and block scratch stays in the test's directory.
                "SPARK_LOCAL_DIRS": str(self.root / "local")}

    def _spawn(self, name: str, args: list[str], port: int, work_dir: Path | None = None) -> Daemon:
        log = self.root / f"{name}.log"
        with open(log, "ab") as out:
            # Own session: a signal meant for the test never reaches the cluster, and vice versa.
            proc = subprocess.Popen([str(SPARK_CLASS), *args], stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env(), start_new_session=True, cwd=self.root,
                                    preexec_fn=stop_with_parent)
        daemon = Daemon(name, proc, log, port, work_dir)
        self.daemons.append(daemon)
        return daemon

    def start(self, timeout: float = 180.0) -> SparkStandalone:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "local").mkdir(exist_ok=True)
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                               "--port", str(self.master_port), "--webui-port", str(self.master_ui_port)],
                    self.master_port)
        for n in range(self.workers):
            work, port = self.root / f"worker{n}", free_port()
            work.mkdir(exist_ok=True)
            self._spawn(f"worker{n}", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", LOOPBACK,
                                       "--port", str(port), "--cores", str(self.cores), "--memory", self.memory,
                                       "--webui-port", str(free_port()), "--work-dir", str(work)], port, work)
        self.wait_for(lambda: len(self.alive_workers()) == self.workers, timeout,
                      f"{self.workers} workers to register with the master")
        return self

    def state(self) -> dict:
        """The master's JSON view: workers (state, cores used) and applications."""
        url = f"http://{LOOPBACK}:{self.master_ui_port}/json"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def alive_workers(self) -> list[dict]:
        try:
            return [w for w in self.state()["workers"] if w["state"] == "ALIVE"]
        except OSError:
            return []

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [d.name for d in self.daemons if d.proc.poll() is not None]
            if dead:
                raise AssertionError(f"spark {dead} exited while waiting for {what}:\n{self.logs_tail()}")
            if predicate():
                return
            time.sleep(1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.logs_tail()}")

    def worker(self, n: int) -> Daemon:
        return next(d for d in self.daemons if d.name == f"worker{n}")

    def worker_state(self, n: int) -> dict:
        """The master's record of worker `n` (state ALIVE/DEAD, coresused)."""
        port = self.worker(n).port
        return next(w for w in self.state()["workers"] if w["port"] == port)

    def executor_logs(self, n: int) -> list[Path]:
        """stderr of every executor worker `n` ran (work-dir/<app>/<executor>/stderr)."""
        work = self.worker(n).work_dir
        return sorted(work.glob("*/*/stderr")) if work else []

    def tasks(self, n: int) -> list[Task]:
        """Every task attempt worker `n`'s executors started, from the executors' own logs."""
        started: dict[int, tuple[int, int, str]] = {}
        finished: set[int] = set()
        for path in self.executor_logs(n):
            for event, index, attempt, stage, tid in _TASK.findall(path.read_text(errors="replace")):
                if event == "Running":
                    started[int(tid)] = (int(index), int(attempt), stage)
                else:
                    finished.add(int(tid))
        return [Task(tid, *started[tid], tid in finished) for tid in sorted(started)]

    def logs_tail(self, chars: int = 1500) -> str:
        return "\n".join(f"--- {d.name}\n{d.log.read_text(errors='replace')[-chars:]}" for d in self.daemons)

    def stop(self) -> None:
        """Workers first (their executors with them), then the master; by PID, whatever state."""
        for daemon in reversed(self.daemons):
            tree = daemon.tree()  # before the daemon exits and its executors are re-parented
            if daemon.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    daemon.proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    daemon.proc.wait(20)
            daemon.kill(tree)  # whatever it did not reap itself
