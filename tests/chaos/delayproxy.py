"""A slow network on loopback: a TCP proxy that delays every chunk it forwards by a one-way latency
and can cap the bandwidth, in each direction. Kernel traffic shaping (tc netem) is not available on
this machine, hence a proxy.

`WanLink(cluster)` runs one proxy per broker of a sandbox cluster started with a proxied listener
(`Sandbox(proxied_target=True)`): the proxy listens where the broker advertises that listener and
forwards to the listener itself, so a client that bootstraps through `WanLink.bootstrap` is sent
back to the proxies by every metadata response and never talks to the broker directly. Connections
are accepted at once; only the bytes are late (a SYN round trip is not modelled).

The proxies run on an asyncio loop in a daemon thread of the test process; `slow()` changes the
delay and cap of connections already open and of new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

CHUNK = 64 * 1024
QUEUE_CHUNKS = 256  # backpressure: at most 16 MiB in flight per direction of a connection


class _Direction:
    """What one direction of the link does to bytes; shared by every connection of a proxy."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.rate: float | None = None  # bytes per second, None: unlimited
        self.free_at = 0.0  # when the capped link finishes sending what it was given


class DelayProxy:
    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        self.listen, self.upstream = listen, upstream
        self.up, self.down = _Direction(), _Direction()  # client -> server, server -> client
        self.connections = 0
        self.bytes = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- driven from the test's thread --------------------------------------------------------
    def set(self, delay_s: float, rate: float | None = None) -> None:
        for d in (self.up, self.down):
            d.delay_s, d.rate = delay_s, rate  # plain attribute writes: atomic, read by the loop

    # -- on the loop ----------------------------------------------------------------------------
    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._server = await asyncio.start_server(self._accept, *self.listen, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            self.connections += 1
            try:
                server_r, server_w = await asyncio.open_connection(*self.upstream)
            except OSError:
                return  # the broker is down: the client sees its connection closed, as it would
            try:
                await asyncio.gather(self._pump(client_r, server_w, self.up),
                                     self._pump(server_r, client_w, self.down))
            finally:
                server_w.close()
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            client_w.close()
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, d: _Direction) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

        async def receive() -> None:
            try:
                while data := await reader.read(CHUNK):
                    await queue.put((loop.time() + d.delay_s, data))
            except ConnectionError:
                pass
            await queue.put((loop.time() + d.delay_s, b""))

        receiver = asyncio.create_task(receive())
        try:
            while True:
                due, data = await queue.get()
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not data:
                    break
                if d.rate:
                    start = max(loop.time(), d.free_at)
                    d.free_at = start + len(data) / d.rate
                    await asyncio.sleep(d.free_at - loop.time())
                writer.write(data)
                await writer.drain()
                self.bytes += len(data)
        except ConnectionError:
            pass
        finally:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiver
            # One side gone: the other goes too (Kafka connections are never half-closed).
            writer.close()


class WanLink:
    """One DelayProxy per broker of `cluster`, on an event loop thread; `with WanLink(c) as link:`."""

    def __init__(self, cluster) -> None:
        nodes = getattr(cluster, "nodes", [cluster])
        assert all(n.proxied for n in nodes), "the cluster was started without its proxied listener"
        self.proxies = [DelayProxy((n.host, n.proxy_port), (n.host, n.proxied_port)) for n in nodes]
        self.bootstrap = ",".join(f"{n.host}:{n.proxy_port}" for n in nodes)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="wan-link")

    def __enter__(self) -> WanLink:
        self._thread.start()
        try:
            for proxy in self.proxies:
                asyncio.run_coroutine_threadsafe(proxy.start(self._loop), self._loop).result(30)
        except BaseException:
            self.__exit__()
            raise
        return self

    def slow(self, delay_s: float, rate: float | None = None) -> None:
        for proxy in self.proxies:
            proxy.set(delay_s, rate)

    def fast(self) -> None:
        self.slow(0.0)

    def __exit__(self, *exc) -> None:
        if self._thread.is_alive():
            for proxy in self.proxies:
                asyncio.run_coroutine_threadsafe(proxy.close(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
        self._loop.close()
