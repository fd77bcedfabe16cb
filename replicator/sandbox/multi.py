"""A KRaft cluster of several brokers on loopback: each node its own JVM, broker and controller in one
(combined mode), so a broker fault is a leader election, an ISR shrink or a coordinator moving, not
an outage. Replication factor 3 for data and internal topics, min.insync.replicas 2: one node may
be down with every write still accepted.

Node i (1-based) listens on its own loopback address 127.0.0.(i+1) (all of 127/8 is loopback on
Linux), port + 2(i-1), its controller on the next port. The own address lets a fault harness cut one
node off from the others by address. Run as root, each node's JVM also carries a supplementary group
of its own (`isolation_gid`): every connection a broker opens leaves from 127.0.0.1 whatever its
listener address, so only the owner of a packet tells which broker sent it (iptables `-m owner
--gid-owner`, tests/chaos/netfault.py). The cluster id is kept in a file next to the node dirs so
nodes formatted at different times still agree on it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from replicator.sandbox.cluster import KafkaCluster, _cluster_id, port_open
from replicator.sandbox.jars import DEFAULT_KAFKA_VERSION

NODE_HEAP = "-Xms256m -Xmx384m"  # measured: see docs/reliability.md ("Multi-broker sandbox")
ISOLATION_GID_BASE = 200_000  # + the node's port: unique on the machine, as its port is


def node_host(node_id: int) -> str:
    return f"127.0.0.{node_id + 1}"


@dataclass
class KafkaNode(KafkaCluster):
    node_id: int = 1
    voters: str = ""
    replication: int = 3

    @property
    def isolation_gid(self) -> int:
        return ISOLATION_GID_BASE + self.port

    def _extra_groups(self) -> list[int]:
        # Only root may add a group; without it every fault but the isolation still works.
        return [self.isolation_gid] if os.geteuid() == 0 else []

    def _properties(self) -> str:
        rf, isr = self.replication, max(1, self.replication - 1)
        overrides = {
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(isr),
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(isr),
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(isr),
        }
        lines = []
        for line in super()._properties().splitlines():
            key = line.split("=", 1)[0]
            lines.append(f"{key}={overrides.pop(key)}" if key in overrides else line)
        lines[-1:-1] = [f"{k}={v}" for k, v in overrides.items()]
        return "\n".join(lines) + "\n"


class MultiBrokerCluster:
    """Same surface as KafkaCluster for the sandbox, the CLI and the fault harness (start, stop,
    kill, signal, bootstrap), plus `nodes` for faults aimed at one broker."""

    def __init__(self, name: str, port: int, root: Path, version: str = DEFAULT_KAFKA_VERSION,
                 transaction_version: int | None = None, brokers: int = 3, heap: str = NODE_HEAP,
                 proxied: bool = False) -> None:
        self.name, self.port, self.root, self.version = name, port, root, version
        self.transaction_version = transaction_version
        self.security = None
        voters = ",".join(f"{i}@{node_host(i)}:{port + 2 * (i - 1) + 1}" for i in range(1, brokers + 1))
        self.nodes = [KafkaNode(f"{name}-{i}", port + 2 * (i - 1), root, version, transaction_version, heap,
                                host=node_host(i), proxied=proxied, node_id=i, voters=voters,
                                replication=min(3, brokers))
                      for i in range(1, brokers + 1)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def dir(self) -> Path:
        """Node 1's: what callers written for one node read (its server.properties, its logs)."""
        return self.nodes[0].dir

    def data_dirs(self) -> list[str]:
        return [str(n.dir) for n in self.nodes]

    @property
    def log_file(self) -> Path:
        return self.nodes[0].log_file

    @property
    def _id_file(self) -> Path:
        return self.root / f"{self.name}.cluster-id"

    def _cluster_id(self, fresh: bool) -> str:
        if not fresh and self._id_file.exists():
            return self._id_file.read_text().strip()
        self.root.mkdir(parents=True, exist_ok=True)
        cluster_id = _cluster_id()
        self._id_file.write_text(cluster_id)
        return cluster_id

    def pid(self) -> int | None:
        """The first running node's JVM (None: every node is down)."""
        return next((p for p in (n.pid() for n in self.nodes) if p is not None), None)

    def pids(self) -> list[int | None]:
        return [n.pid() for n in self.nodes]

    def running(self) -> bool:
        return all(n.running() for n in self.nodes)

    def start(self, fresh: bool = False) -> None:
        """Launches every node that is not running, then waits for all: a lone node of a three-voter
        quorum never finishes starting."""
        cluster_id = self._cluster_id(fresh or not any((n.dir / "data" / "meta.properties").exists()
                                                       for n in self.nodes))
        for node in self.nodes:
            node.cluster_id = cluster_id
            node.launch(fresh)
        for node in self.nodes:
            node.wait_ready()

    def stop(self, timeout: float = 30.0) -> None:
        # In parallel: stopped one by one, the last nodes would wait for a quorum that is gone.
        threads = [threading.Thread(target=n.stop, args=(timeout,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def signal(self, sig: int) -> None:
        for node in self.nodes:
            node.signal(sig)

    def serving(self) -> bool:
        return all(port_open(n.port, n.host) for n in self.nodes)
