"""Network partitions on loopback with iptables: every TCP packet to or from a cluster's client
ports is dropped (INPUT chain on `lo`), so connections neither fail nor answer, as when a WAN link
goes dark, while the brokers and the replicator keep running. Controller ports stay open (a
multi-broker cluster keeps its quorum). Rules carry a comment naming the port; they are always
removed on exit, and `sweep` removes any left by a run that was killed."""

from __future__ import annotations

import subprocess

_TAG = "replicator-chaos-port-"


def client_ports(cluster) -> list[int]:
    return [n.port for n in getattr(cluster, "nodes", [cluster])]


def _rules(port: int) -> list[list[str]]:
    base = ["INPUT", "-i", "lo", "-p", "tcp"]
    tag = ["-m", "comment", "--comment", f"{_TAG}{port}", "-j", "DROP"]
    return [[*base, "--dport", str(port), *tag], [*base, "--sport", str(port), *tag]]


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True, check=check)


class Partition:
    """`with Partition(ports): ...` cuts the ports for the duration of the block."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports

    def __enter__(self) -> Partition:
        try:
            for port in self.ports:
                for rule in _rules(port):
                    _iptables("-A", *rule)
        except BaseException:
            self.__exit__()
            raise
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
