"""The chaos harness's network faults: a partition cuts a loopback port, an isolation cuts one
broker off from its peers but not from clients; both leave no iptables rule behind, even when the
block they guard raises."""

from __future__ import annotations

import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.chaos import netfault


def test_partition_cuts_the_port_and_is_always_removed():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    # No accept(): the kernel completes a handshake into the listen backlog, which is all a probe
    # needs. An accept thread outlived its socket and, once the fd number was reused, failed inside
    # whichever test ran next (or could have taken that test's connections).
    server.listen(16)
    port = server.getsockname()[1]

    def reachable() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.5).close()
            return True
        except OSError:
            return False

    try:
        assert reachable()
        with pytest.raises(RuntimeError), netfault.Partition([port]):
            assert netfault.active([port])
            assert not reachable()
            raise RuntimeError("the guarded block fails")
        assert not netfault.active([port])
        assert reachable()
    finally:
        netfault.sweep([port])
        server.close()


def test_isolation_cuts_one_broker_off_from_the_others_but_not_from_clients():
    """Three stand-in brokers on 127.0.0.2-4, each a listening socket plus the supplementary group
    its JVM would carry; a connection is tried from a process carrying a broker's group (a broker
    talking to a peer) or none (a client)."""
    servers, nodes = [], []
    for i in range(3):
        server = socket.socket()
        server.bind((f"127.0.0.{i + 2}", 0))
        server.listen(16)  # probes complete into the backlog (see the test above)
        port = server.getsockname()[1]
        servers.append(server)
        nodes.append(SimpleNamespace(host=f"127.0.0.{i + 2}", port=port, isolation_gid=200_000 + port))
    x, y, z = nodes

    def reachable(to, sender=None) -> bool:
        code = (f"import socket\ntry:\n socket.create_connection(({to.host!r}, {to.port}), timeout=1.5).close()\n"
                "except OSError:\n raise SystemExit(1)")
        groups = [sender.isolation_gid] if sender is not None else None
        return subprocess.run([sys.executable, "-c", code], extra_groups=groups).returncode == 0

    ports = [n.port for n in nodes]
    try:
        assert reachable(y, sender=x) and reachable(x, sender=y) and reachable(x)
        with pytest.raises(RuntimeError), netfault.Isolation(nodes, x):
            assert netfault.isolation_active(ports)
            assert not reachable(y, sender=x) and not reachable(z, sender=x)  # x to its peers
            assert not reachable(x, sender=y) and not reachable(x, sender=z)  # its peers to x
            assert reachable(z, sender=y)  # the peers among themselves
            assert reachable(x) and reachable(y)  # clients to everyone
            raise RuntimeError("the guarded block fails")
        assert not netfault.isolation_active(ports)
        assert reachable(y, sender=x) and reachable(x, sender=y)
    finally:
        netfault.sweep_isolation(ports)
        for server in servers:
            server.close()
