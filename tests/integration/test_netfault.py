"""The chaos harness's network partition: it cuts a loopback port while installed and leaves no
iptables rule behind, even when the block it guards raises."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.chaos import netfault


def test_partition_cuts_the_port_and_is_always_removed():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    threading.Thread(target=lambda: [server.accept() for _ in range(2)], daemon=True).start()

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
