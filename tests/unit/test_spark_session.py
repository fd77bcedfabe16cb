"""The Spark session's pure parts: where the class-data archive lives, and Spark's log format."""

from __future__ import annotations

import os
import re
from pathlib import Path

from replicator.config import ReplicatorConfig
from replicator.engine import spark_cache, spark_session


def test_class_cache_off_means_no_archive():
    assert spark_cache.class_archive(ReplicatorConfig(spark_class_cache="off")) is None


def test_auto_is_the_users_cache_folder(monkeypatch, tmp_path):
    auto = ReplicatorConfig()
    assert auto.spark_class_cache == "auto"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert spark_cache.cache_folder(auto) == tmp_path / "xdg" / "replicator"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # invalid by the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert spark_cache.cache_folder(auto) == tmp_path / "home" / ".cache" / "replicator"


def test_archive_named_for_this_jvm_and_spark_and_stale_recordings_removed(tmp_path):
    cfg = ReplicatorConfig(spark_class_cache=str(tmp_path / "cache"))
    archive = spark_cache.class_archive(cfg)
    assert archive is not None and archive.parent == tmp_path / "cache" and archive.suffix == ".jsa"
    assert re.fullmatch(r"spark-[\w.]+-[0-9a-f]{12}\.jsa", archive.name)
    dead = archive.with_name(f"{archive.name}.999999999.tmp")  # no such pid
    live = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    dead.write_bytes(b"x")
    live.write_bytes(b"x")
    assert spark_cache.class_archive(cfg) == archive
    assert not dead.exists() and live.exists(), "only a recording whose process is gone is removed"


def test_an_archive_in_a_read_only_folder_is_used(tmp_path):
    cfg = ReplicatorConfig(spark_class_cache=str(tmp_path))
    archive = spark_cache.class_archive(cfg)
    archive.write_bytes(b"archive")
    tmp_path.chmod(0o555)
    try:
        assert spark_cache.class_archive(cfg) == archive
    finally:
        tmp_path.chmod(0o755)


def test_spark_logs_one_json_object_per_line_in_json_mode():
    props = dict(line.split(" = ", 1) for line in spark_session.log4j2_properties("json").splitlines() if line)
    pattern = props["appender.console.layout.pattern"]
    assert pattern.startswith('{"ts":') and pattern.endswith("}%n")
    assert props["appender.console.layout.alwaysWriteExceptions"] == "false"
    assert props["rootLogger.level"] == "error"
    text = dict(line.split(" = ", 1) for line in spark_session.log4j2_properties("text").splitlines() if line)
    assert text["appender.console.layout.pattern"] == "%d{HH:mm:ss} %p %c: %m%n"


class _Gateway:
    """What `stop()` touches of PySpark's gateway once Spark is stopped: the JVM's process."""

    def __init__(self, code: int, writes: Path | None) -> None:
        self.proc = self
        self.stdin = self
        self._code, self._writes = code, writes

    def shutdown(self) -> None:
        pass

    def close(self) -> None:
        pass

    def wait(self, timeout: float) -> int:
        if self._writes is not None:
            self._writes.write_bytes(b"archive")
        return self._code


class _Spark:
    def stop(self) -> None:
        pass


def _stop_recording(monkeypatch, tmp_path, code: int, writes: bool) -> Path:
    from pyspark import SparkContext

    archive = tmp_path / "spark.jsa"
    pending = tmp_path / "spark.jsa.1.tmp"
    monkeypatch.setattr(SparkContext, "_gateway", _Gateway(code, pending if writes else None), raising=False)
    monkeypatch.setattr(spark_session, "_recording", (pending, archive))
    spark_session.stop(_Spark())
    assert not pending.exists()
    return archive


def test_a_recorded_archive_is_published_when_the_jvm_exits_cleanly(monkeypatch, tmp_path):
    assert _stop_recording(monkeypatch, tmp_path, 0, writes=True).read_bytes() == b"archive"


def test_an_archive_not_recorded_says_why(monkeypatch, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="replicator.spark_session"):
        assert not _stop_recording(monkeypatch, tmp_path, 1, writes=True).exists()
    [record] = caplog.records
    assert "exited with code 1 and wrote an archive" in record.getMessage()
    assert record.event == "class_archive_skipped"


def test_one_recorder_per_archive_across_processes(tmp_path):
    import fcntl

    from replicator.engine import class_recorder

    archive = tmp_path / "spark.jsa"
    with open(tmp_path / "spark.jsa.lock", "w") as held:  # another process's recorder holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert class_recorder.start(ReplicatorConfig(spark_class_cache=str(tmp_path)), archive) is None
    assert not (tmp_path / "spark.jsa.recording.log").exists(), "no second recorder was started"
