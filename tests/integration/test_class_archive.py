"""Faster restarts by default: a run on a fresh install (no class-data archive in its cache folder)
has one recorded in the background, and the next start, after a crash too, maps it (half the JVM's
start-up CPU, replicator.engine.class_recorder), replicating as before."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from tests.engine_checks import caught_up
from tests.kafka_helpers import assert_identical, create_topic, produce_transactional
from tests.replicator_process import ReplicatorProcess, wait_until

PARTITIONS = 2


def _spark_jvm(job: ReplicatorProcess) -> psutil.Process:
    jvms = [p for p in psutil.Process(job.pid).children(recursive=True) if p.name() == "java"]
    assert len(jvms) == 1, jvms
    return jvms[0]


def _cmdline(proc: psutil.Process) -> list[str]:
    """A child that exited but is not yet reaped (a Python worker, say) has no command line."""
    try:
        return proc.cmdline()
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return []


def _maps(proc: psutil.Process, path: Path) -> bool:
    return str(path) in Path(f"/proc/{proc.pid}/maps").read_text()


def _group_of(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except ProcessLookupError:
        return None


def _zombie(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _records(start: int, n: int) -> list[tuple]:
    # Recent timestamps: with 2023 ones, the second batch rolled the first segment and the brokers'
    # 7-day retention deleted it mid-test (on source and target at different moments), which read as
    # "source has 250 records, target 500" in a clean-clone run.
    now = int(time.time() * 1000)
    return [(i % PARTITIONS, f"k{i}".encode(), f"v{i}".encode(), [("h", b"1")], now + i)
            for i in range(start, start + n)]


def test_a_fresh_install_records_the_archive_in_the_background_and_the_restart_uses_it(sandbox, unique, tmp_path):
    topic, name, cache = f"cds-{unique}", f"cds-{unique}", tmp_path / "cache"
    create_topic(sandbox.source.bootstrap, topic, PARTITIONS)
    env = {"REPLICATOR_SPARK_CLASS_CACHE": str(cache)}  # nothing else: the default of a pip install
    produce_transactional(sandbox.source.bootstrap, topic, _records(0, 500), f"cds-w-{unique}")

    done = caught_up(sandbox, topic, f"__replicator.{name}", PARTITIONS)
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "run1.log", env=env) as job:
        wait_until(done, 400, "run 1 to copy", job)
        # A low-priority JVM on a shared 2-core machine: a minute alone, over ten when other suites
        # run beside it (load average 45).
        ended = ("recorded the Spark class-data archive", "could not be recorded in the background")
        wait_until(lambda: any(line in job.log() for line in ended), 2400, "the background recording to end", job)
        assert "recorded the Spark class-data archive" in job.log(), job.tail()
        archives = list(cache.glob("*.jsa"))
        assert len(archives) == 1 and archives[0].stat().st_size > 10 * 2**20, archives
        assert not list(cache.glob("*.tmp")), "the archive is published by rename, nothing half-written stays"
        assert job.running(), "the run went on copying while the archive was recorded"
        job.sigkill()  # a crash: the next start is the restart the archive is for
    written = archives[0].stat().st_mtime

    produce_transactional(sandbox.source.bootstrap, topic, _records(500, 500), f"cds-w-{unique}")
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "run2.log", env=env) as job:
        wait_until(lambda: bool(psutil.Process(job.pid).children(recursive=True)), 60, "the Spark JVM", job)
        time.sleep(2)
        assert _maps(_spark_jvm(job), archives[0]), "the restarted JVM maps the recorded archive"
        wait_until(done, 400, "run 2 to copy the new records", job)
        assert job.sigterm() == 0
        assert "recording the Spark class-data archive" not in job.log(), "an archive there is not recorded again"
    assert archives[0].stat().st_mtime == written, "an archive in use is not rewritten"
    assert_identical(sandbox.source.bootstrap, sandbox.target.bootstrap, topic, PARTITIONS)


def test_a_stop_during_the_recording_ends_it_and_leaves_nothing_behind(sandbox, unique, tmp_path):
    topic, name, cache = f"cdss-{unique}", f"cdss-{unique}", tmp_path / "cache"
    create_topic(sandbox.source.bootstrap, topic, PARTITIONS)
    produce_transactional(sandbox.source.bootstrap, topic, _records(0, 100), f"cdss-w-{unique}")
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "run.log",
                           env={"REPLICATOR_SPARK_CLASS_CACHE": str(cache)}) as job:
        wait_until(lambda: "recording the Spark class-data archive" in job.log(), 400, "the recording to start", job)
        recorders = [p for p in psutil.Process(job.pid).children(recursive=True) if "spark-warmup" in _cmdline(p)]
        assert len(recorders) == 1, recorders
        wait_until(lambda: recorders[0].nice() == 19, 60, "the recorder to run at the lowest CPU priority", job)
        group = recorders[0].pid  # the recorder leads a process group of its own: it and its JVM
        assert job.sigterm() == 0
    # Exited processes not yet reaped (zombies) hold no CPU, memory or files: reaping them is the
    # init process's part (here the sandbox machine's PID 1 may not be one that reaps).
    left = [p for p in psutil.process_iter() if _group_of(p) == group and not _zombie(p)]
    assert not left, f"the stop ended the recorder and its JVM: {left}"
    assert not list(cache.glob("*.jsa")) and not list(cache.glob("*.tmp")), list(cache.iterdir())
