"""The slow-network proxy of the chaos harness, on loopback sockets: bytes arrive intact and in
order, never earlier than the latency (and the bandwidth cap) allow, and a closed or missing server
closes the client's connection. Only lower bounds on time are asserted: a loaded machine makes
things later, never earlier."""

from __future__ import annotations

import os
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from tests.chaos.delayproxy import WanLink


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def echo():
    """An echo server; yields its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def node(upstream: int) -> SimpleNamespace:
    return SimpleNamespace(host="127.0.0.1", proxy_port=free_port(), proxied_port=upstream, proxied=True)


def round_trip(address: str, payload: bytes) -> tuple[bytes, float]:
    host, port = address.split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            assert chunk, "connection closed early"
            got += chunk
    return got, time.monotonic() - started


def test_bytes_arrive_intact_in_order_and_no_earlier_than_the_latency(echo):
    payload = os.urandom(1 << 20)
    with WanLink(node(echo)) as link:
        got, _ = round_trip(link.bootstrap, payload)
        assert got == payload
        link.slow(0.2)
        got, seconds = round_trip(link.bootstrap, payload)
        assert got == payload
        assert seconds >= 0.4  # one way out, one way back
        link.slow(0.0, rate=512 * 1024)
        got, seconds = round_trip(link.bootstrap, payload[: 256 * 1024])
        assert got == payload[: 256 * 1024]
        assert seconds >= 0.5  # 256 KiB each way at 512 KiB/s


def test_the_client_connection_closes_when_the_server_is_not_there():
    with WanLink(node(free_port())) as link:
        host, port = link.bootstrap.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.settimeout(30)
            assert s.recv(1) == b""
