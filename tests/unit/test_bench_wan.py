"""Which clients the WAN link sits in front of (bench/wan.py), and compression applied to both copiers alike."""

from pathlib import Path

import pytest

from bench import wan
from bench.contenders import Job, MirrorMaker


def _job(**kw) -> Job:
    return Job("127.0.0.1:21092", "127.0.0.1:31092", "t", 8, 100, 1024, "x1", Path("/tmp"), **kw)


def test_near_target_puts_the_source_across_the_link_and_the_bench_still_reads_directly():
    j = wan.through(_job(), "near-target", "127.0.0.1:21099")
    assert (j.copier_source, j.copier_target) == ("127.0.0.1:21099", "127.0.0.1:31092")
    assert (j.source, j.target) == ("127.0.0.1:21092", "127.0.0.1:31092")  # the watcher's and end offsets'


def test_near_source_puts_the_target_across_the_link():
    j = wan.through(_job(), "near-source", "127.0.0.1:31099")
    assert (j.copier_source, j.copier_target) == ("127.0.0.1:21092", "127.0.0.1:31099")


def test_mirrormaker_reaches_the_clusters_where_the_copier_does_and_compresses_as_asked():
    j = wan.through(_job(compression="lz4"), "near-source", "127.0.0.1:31099")
    props = MirrorMaker(True, 2).properties(j, 8083)
    assert "x1.bootstrap.servers = 127.0.0.1:21092\n" in props
    assert "tgt.bootstrap.servers = 127.0.0.1:31099\n" in props
    assert "tgt.producer.compression.type = lz4\n" in props
    assert "compression" not in MirrorMaker(True, 2).properties(_job(), 8083)  # its default otherwise


def test_a_broker_started_without_its_proxied_listener_is_named(tmp_path):
    (tmp_path / "server.properties").write_text("listeners=PLAINTEXT://127.0.0.1:21092\n")
    cluster = type("C", (), {"name": "source", "dir": tmp_path})()
    box = type("B", (), {"source": cluster})()
    with pytest.raises(RuntimeError, match="source broker runs without its proxied listener"):
        wan.across(box, "near-target")
