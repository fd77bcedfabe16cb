"""Runs the real `replicator run` command as a child process (its own process group) for tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).with_name("replicator")


def stop_with_parent() -> None:
    """If the test process dies (crash, CI timeout), the job gets SIGTERM instead of running on."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether the process has a handler for `sig` (/proc's SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    mask = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(mask >> (sig - 1) & 1)


class ReplicatorProcess:
    def __init__(self, sandbox, topics: str, name: str, log_path: Path, *extra: str,
                 env: dict[str, str] | None = None, source=None, target=None) -> None:
        source = source or sandbox.source
        target = target or sandbox.target
        self.args = [str(BIN), "run", "--source-bootstrap-servers", source.bootstrap,
                     "--target-bootstrap-servers", target.bootstrap, "--topics", topics,
                     "--name", name, "--metrics-port", "0", *extra]
        # Test jobs serve /metrics on loopback only (the product default, 0.0.0.0, is for containers).
        self.env = {**os.environ, "REPLICATOR_METRICS_HOST": "127.0.0.1", **(env or {})}
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> ReplicatorProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        # A new session, so signals reach only what the test means to hit (the driver or its group).
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True, preexec_fn=stop_with_parent)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self) -> str:
        """The end of the job's log, for a failure message."""
        return self.log()[-4000:]

    def sigterm(self, timeout: float = 120.0) -> int:
        """Clean stop of the driver only (as Kubernetes does to PID 1); returns the exit code.

        Sent once the driver catches SIGTERM: in its first ~150 ms (the interpreter and the CLI's
        imports) the default action kills it with -15, as it would any process. Nothing is written
        by then, so that is safe, but it is not the clean stop these tests check. It is the likeliest
        cause of a bare exit-code failure in CI: the final catch-up's condition can
        hold before the job has started."""
        assert self.proc is not None
        wait_until(lambda: not self.running() or _catches(self.proc.pid, signal.SIGTERM), 60,
                   "the driver to install its SIGTERM handler", self, interval=0.05)
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.sigkill()
            raise AssertionError(f"replicator did not stop within {timeout}s of SIGTERM") from None
        if code != 0:  # the callers assert on the code: pytest shows this with the failure
            print(f"replicator exited {code} on SIGTERM; its log ends:\n{self.tail()}", file=sys.stderr)
        return code

    def sigkill(self) -> None:
        """Crash: the driver and everything it started (Spark JVM, Python workers) die at once."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def __enter__(self) -> ReplicatorProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.running():
            self.sigkill()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, proc: ReplicatorProcess | None = None,
               interval: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and not proc.running():
            raise AssertionError(f"replicator exited ({proc.proc.returncode}) while waiting for {what}:\n"
                                 f"{proc.tail()}")
        time.sleep(interval)
    tail = proc.tail() if proc is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tail}")
