"""The bench's WAN link (bench/wanproxy, driven by bench/link.py) on loopback: bytes arrive intact,
a round trip takes at least the link's RTT, and a broker without its proxied listener is refused."""

import socket
import threading
import time
from types import SimpleNamespace

import pytest

from bench import link


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _broker(upstream: int, proxied: bool = True) -> SimpleNamespace:
    return SimpleNamespace(name="target", host="127.0.0.1", proxied=proxied, proxied_port=upstream,
                           proxy_port=_free_port())


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, "the link closed the connection early"
        got += chunk
    return got


def test_the_link_forwards_every_byte_and_delays_each_round_trip(tmp_path):
    srv, port = _echo_server()
    broker = _broker(port)
    payload = bytes(range(256)) * 4096  # 1 MiB, several of the forwarder's reads
    with link.Link(broker, rtt_ms=60, cap_bytes_per_s=None, log=tmp_path / "link.log") as wan:
        assert wan.bootstrap == f"127.0.0.1:{broker.proxy_port}"
        with socket.create_connection(("127.0.0.1", broker.proxy_port)) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            started = time.monotonic()
            c.sendall(b"x")
            assert _recv_exactly(c, 1) == b"x"
            assert time.monotonic() - started >= 0.060  # 30 ms each way
            c.sendall(payload)
            assert _recv_exactly(c, len(payload)) == payload
    srv.close()
    assert wan.forwarded == (1 + len(payload), 1 + len(payload))


def test_a_broker_without_its_proxied_listener_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="without its proxied listener"):
        link.Link(_broker(1, proxied=False), rtt_ms=0, cap_bytes_per_s=None, log=tmp_path / "link.log")


def test_the_forwarded_bytes_are_read_from_the_last_line():
    assert link.forwarded("ready delay=0s\nforwarded up=10 down=20\n") == (10, 20)
    assert link.forwarded("ready delay=0s\n") == (0, 0)
