"""The class-data archive recorded in the background: a run that finds none starts a recorder so that
the next start, a restart after a crash included, maps one (spark_session).

Java 17 cannot record an archive and map it in one go (-XX:+AutoCreateSharedArchive is JDK 19+), and
the JVM writes a dynamic archive only as it exits: the job's own JVM could only record at its stop,
which a crash or a kill never reaches and which it would delay by seconds to minutes. So the
recorder is a separate short-lived process (`replicator spark-warmup --background`, spark_warmup):
a JVM with the job's classpath and options, at the lowest CPU priority so the run's own start keeps
the cores, which loads what a start loads and exits. Its archive is published by rename only after a
clean exit. A lock file keeps it to one recorder per archive across processes. A failed recording is
logged once and tried again at the next start, never in a loop within a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from replicator.config import ReplicatorConfig

log = logging.getLogger("replicator.spark_session")  # the archive's lines keep the session's logger name

_STOP_WAIT_S = 10.0


class Recorder:
    """One background recording; its outcome is logged once, when the process ends."""

    def __init__(self, proc: subprocess.Popen, archive: Path, output: Path) -> None:
        self.proc, self.archive, self.output = proc, archive, output
        self._started = time.monotonic()
        self._stopping = False
        self._watch = threading.Thread(target=self._report, daemon=True, name="class-archive-recorder")
        self._watch.start()

    def stop(self) -> None:
        """Ends a recording still under way (the run stops), its JVM included: the next start records
        again."""
        if self.proc.poll() is None:
            self._stopping = True
            _signal_group(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(_STOP_WAIT_S)
            # Whatever of its group is left: a JVM still starting when the recorder went lives on otherwise.
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._watch.join(_STOP_WAIT_S)

    def _report(self) -> None:
        code = self.proc.wait()
        took = time.monotonic() - self._started
        if code == 0 and self.archive.is_file():
            log.info("recorded the Spark class-data archive %s in the background in %.0f s: later starts load "
                     "Spark faster", self.archive, took, extra={"event": "class_archive_written"})
            with contextlib.suppress(OSError):
                self.output.unlink()
        elif self._stopping:
            log.info("the stop ended the recording of the Spark class-data archive; the next start records it",
                     extra={"event": "class_archive_skipped"})
        else:
            log.warning("the Spark class-data archive could not be recorded in the background (exit code %s after "
                        "%.0f s: %s; output in %s); this run is not affected, the next start tries again",
                        code, took, _last_line(self.output), self.output, extra={"event": "class_archive_skipped"})


def start(cfg: ReplicatorConfig, archive: Path) -> Recorder | None:
    """Starts recording `archive` unless another process is recording it already."""
    lock = archive.with_name(f"{archive.name}.lock")
    output = archive.with_name(f"{archive.name}.recording.log")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        log.info("the Spark class-data archive cannot be recorded: %s", e, extra={"event": "class_archive_skipped"})
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # the other recorder publishes it; this start runs without
        os.close(fd)
        return None
    # The recorder inherits the locked descriptor: the lock lasts exactly as long as that process,
    # however it ends (this process may be killed before it). Only Spark's settings go to it: the
    # clusters' settings, secrets among them, are none of its business.
    settings = {"spark_class_cache": cfg.spark_class_cache, "spark": dict(cfg.spark),
                "log_format": cfg.log_format, "log_level": cfg.log_level}
    try:
        with open(output, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "replicator.cli", "spark-warmup", "--background"],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, pass_fds=(fd,),
                # A group of its own, so the stop can end its JVM with it; a signal meant for the job's
                # group does not reach it, and a recording a crash left goes on to publish its archive.
                start_new_session=True)
    except OSError as e:
        log.warning("the Spark class-data archive could not be recorded in the background: %s", e,
                    extra={"event": "class_archive_skipped"})
        return None
    finally:
        os.close(fd)
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(json.dumps(settings).encode())
        proc.stdin.close()
    log.info("recording the Spark class-data archive %s in the background (a low-priority JVM); the next start "
             "maps it", archive, extra={"event": "class_archive_recording"})
    return Recorder(proc, archive, output)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    return lines[-1][:300] if lines else "no output"
