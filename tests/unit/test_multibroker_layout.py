"""The multi-broker sandbox's layout and broker properties (no broker started)."""

from __future__ import annotations

from pathlib import Path

from replicator.sandbox import Sandbox
from replicator.sandbox.cluster import remembered_brokers


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_three_nodes_replication_factor_3_min_isr_2_on_their_own_loopback_addresses(tmp_path: Path):
    box = Sandbox(root=tmp_path, port_shift=0, brokers=3)
    ports = [n.port for c in box.clusters for n in c.nodes] + \
        [n.controller_port for c in box.clusters for n in c.nodes]
    assert len(set(ports)) == 12
    assert box.source.bootstrap == "127.0.0.2:19092,127.0.0.3:19094,127.0.0.4:19096"
    node = box.target.nodes[1]
    p = props(node._properties())
    assert p["node.id"] == "2"
    assert p["controller.quorum.voters"] == "1@127.0.0.2:29093,2@127.0.0.3:29095,3@127.0.0.4:29097"
    assert p["listeners"] == "PLAINTEXT://127.0.0.3:29094,CONTROLLER://127.0.0.3:29095"
    for key in ("default.replication.factor", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor"):
        assert p[key] == "3", key
    assert p["min.insync.replicas"] == p["transaction.state.log.min.isr"] == "2"
    assert len({n.dir for n in box.source.nodes}) == 3
    assert len({n.isolation_gid for c in box.clusters for n in c.nodes}) == 6


def test_a_proxied_target_advertises_the_proxy_port_on_a_listener_of_its_own(tmp_path: Path):
    node = Sandbox(root=tmp_path, port_shift=0, brokers=3, proxied_target=True).target.nodes[2]
    p = props(node._properties())
    assert p["listeners"] == ("PLAINTEXT://127.0.0.4:29096,CONTROLLER://127.0.0.4:29097,"
                              "PROXIED://127.0.0.4:29102")
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.4:29096,PROXIED://127.0.0.4:29103"
    assert p["inter.broker.listener.name"] == "PLAINTEXT"
    single = props(Sandbox(root=tmp_path / "one", port_shift=0).target._properties())
    assert single["listeners"] == "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093"


def test_status_and_down_use_the_layout_of_the_last_up(tmp_path: Path):
    assert remembered_brokers(tmp_path) == 1
    (tmp_path / "brokers").write_text("3")
    box = Sandbox(root=tmp_path, port_shift=0)
    assert box.brokers == 3 and len(box.status()["source"]["pids"]) == 3
