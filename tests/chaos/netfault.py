"""Network partitions on loopback with iptables: every TCP packet to or from a cluster's client
ports is dropped (INPUT chain on `lo`), so connections neither fail nor answer, as when a WAN link
goes dark, while the brokers and the replicator keep running. Controller ports stay open (a
multi-broker cluster keeps its quorum). Rules carry a comment naming the port; they are always
removed on exit, and `sweep` removes any left by a run that was killed.

`Isolation(cluster, node)` cuts one broker of a multi-broker cluster off from the other brokers
(replication, the controller quorum, every connection either way) while every client still reaches
all of them: a rack whose link to the other racks fails while the replicator, like the rest of the
clients, still reaches every rack. Brokers are told apart by the supplementary group each node's JVM
carries (replicator/sandbox/multi.py): OUTPUT-chain rules drop the packets a node's own process
sends to another node's address, and those the other nodes' processes send to its address. Clients
carry no such group and are never matched."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

_TAG = "replicator-chaos-port-"


def client_ports(cluster) -> list[int]:
    """The brokers' client ports, and the proxied listeners' (tests/chaos/delayproxy.py): a
    partition also cuts the slow link's leg from the proxy to the broker."""
    nodes = getattr(cluster, "nodes", [cluster])
    return [n.port for n in nodes] + [n.proxied_port for n in nodes if getattr(n, "proxied", False)]


def _rules(port: int) -> list[list[str]]:
    base = ["INPUT", "-i", "lo", "-p", "tcp"]
    tag = ["-m", "comment", "--comment", f"{_TAG}{port}", "-j", "DROP"]
    return [[*base, "--dport", str(port), *tag], [*base, "--sport", str(port), *tag]]


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True, check=check)


def _add_all(rules: list[list[str]], undo: Callable[[], None]) -> None:
    """Appends every rule; if one fails (or the run is interrupted), `undo` removes those added."""
    try:
        for rule in rules:
            _iptables("-A", *rule)
    except BaseException:
        undo()
        raise


class Partition:
    """`with Partition(ports): ...` cuts the ports for the duration of the block."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports

    def __enter__(self) -> Partition:
        _add_all([rule for port in self.ports for rule in _rules(port)], self.__exit__)
        return self

    def __exit__(self, *exc) -> None:
        sweep(self.ports)


def sweep(ports: list[int]) -> None:
    """Deletes every rule of ours for these ports (each may have been added more than once)."""
    for port in ports:
        for rule in _rules(port):
            while _iptables("-D", *rule, check=False).returncode == 0:
                pass


def active(ports: list[int]) -> bool:
    listing = _iptables("-S", "INPUT").stdout
    return any(f"{_TAG}{port}" in listing for port in ports)


_ISOLATE_TAG = "replicator-chaos-isolate-"


def _isolation_rules(nodes, node) -> list[list[str]]:
    tag = ["-m", "comment", "--comment", f"{_ISOLATE_TAG}{node.port}", "-j", "DROP"]

    def owner(n) -> list[str]:
        return ["-m", "owner", "--gid-owner", str(n.isolation_gid), "--suppl-groups"]

    rules = []
    for other in (n for n in nodes if n is not node):
        rules.append(["OUTPUT", "-o", "lo", "-d", other.host, *owner(node), *tag])  # from the node
        rules.append(["OUTPUT", "-o", "lo", "-d", node.host, *owner(other), *tag])  # to the node
    return rules


class Isolation:
    """`with Isolation(cluster.nodes, node): ...` cuts `node` off from the other brokers."""

    def __init__(self, nodes, node) -> None:
        assert len({n.host for n in nodes}) == len(nodes), "the nodes need loopback addresses of their own"
        self.nodes, self.node = list(nodes), node

    def __enter__(self) -> Isolation:
        _add_all(_isolation_rules(self.nodes, self.node), self.__exit__)
        return self

    def __exit__(self, *exc) -> None:
        sweep_isolation([n.port for n in self.nodes])


def sweep_isolation(ports: list[int]) -> None:
    """Deletes every isolation rule of ours for nodes on these ports, as listed by iptables."""
    tags = {f'"{_ISOLATE_TAG}{port}"' for port in ports} | {f"{_ISOLATE_TAG}{port} " for port in ports}
    for line in _iptables("-S", "OUTPUT").stdout.splitlines():
        if line.startswith("-A ") and any(t in line + " " for t in tags):
            _iptables("-D", *line[3:].replace('"', "").split(), check=False)


def carries_its_group(node) -> bool:
    """Whether the node's running JVM carries its isolation group (it does not when the sandbox was
    started without root): without it an isolation would silently cut nothing."""
    pid = node.pid()
    try:
        with open(f"/proc/{pid}/status") as f:
            groups = next(line for line in f if line.startswith("Groups:")).split()[1:]
    except (OSError, StopIteration):
        return False
    return str(node.isolation_gid) in groups


def isolation_active(ports: list[int]) -> bool:
    listing = _iptables("-S", "OUTPUT").stdout
    return any(f"{_ISOLATE_TAG}{port}" in listing for port in ports)
