"""The line between the driver and its running shard tasks.

A shard task runs for many seconds, so the driver cannot wait for it to finish to learn what it
copied, and it must be able to end it early (SIGTERM, a promoted target, partitions that grew): on a
Spark cluster too, where a file flag on the driver is invisible to executors. Each task therefore
keeps one TCP connection to the driver. Every exchange is one JSON line each way: the task sends
the stats of the transactions it committed since the last exchange (possibly none), the driver
answers whether the task must end now. A starting task also asks for its partitions' floors: the
highest source offset the driver has seen committed for each, in this run (see `floors`). And a
task says which of its partitions are settled (the group holds the source's end as the task last
fetched it), so the driver's lag lookups ask the clusters only about the others (see `settled`).

Losing the line never affects what is copied: a task that cannot reach the driver keeps copying
until its batch duration ends, and tries once more on a fresh connection when it ends.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable

log = logging.getLogger("replicator.task_control")  # the log's public name, kept when the module moved

_EXCHANGE_INTERVAL_S = 0.5
_TIMEOUT_S = 5.0
# A task's settled partitions count while its line is open and it exchanged within this long (a
# running task does every _EXCHANGE_INTERVAL_S): one that ended, hangs or retries a failed
# transaction drops out, and its partitions are looked up on the clusters again.
SETTLED_FRESH_S = 5.0


class ControlServer:
    """Driver side: receives the tasks' stats, tells tasks of ended batches to finish."""

    def __init__(self, on_stats: Callable[[dict], None] | None = None, host: str = "127.0.0.1") -> None:
        self.records = 0
        self.transactions = 0
        self.batches = 0
        self._lock = threading.Lock()
        self._on_stats = on_stats
        self._stopping = False
        self._ended_before = -1  # tasks of batches up to this one must end
        self._highest_batch = -1
        self._batch_records: dict[int, int] = {}  # records committed by each running batch's tasks
        self._floors: dict[str, int] = {}  # "source topic|partition" -> highest committed next offset
        # (source topic, partition) -> (offset it is settled at, (batch, shard) of the task that said so)
        self._settled: dict[tuple[str, int], tuple[int, tuple[int, int]]] = {}
        self._heard: dict[tuple[int, int], float] = {}  # (batch, shard) -> last exchange, monotonic
        server = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                owner = None
                try:
                    for line in self.rfile:
                        msg = json.loads(line)
                        owner = _owner(msg)
                        reply = server._exchange(msg)
                        self.wfile.write(json.dumps(reply).encode() + b"\n")
                        self.wfile.flush()
                finally:
                    if owner is not None:
                        server._forget(owner)  # the task ended: nothing reads its partitions now

        self._server = socketserver.ThreadingTCPServer((host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True, name="task-control").start()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def _exchange(self, msg: dict) -> dict:
        owner = _owner(msg)
        batch = owner[0]
        with self._lock:
            self._highest_batch = max(self._highest_batch, batch)
            stop = self._stopping or batch <= self._ended_before
            self._heard[owner] = time.monotonic()
            for key, offset in msg.get("settled", {}).items():
                topic, partition = key.rsplit("|", 1)
                if offset >= 0:
                    self._settled[(topic, int(partition))] = (int(offset), owner)
                elif self._settled.get((topic, int(partition)), (0, owner))[1] == owner:
                    self._settled.pop((topic, int(partition)), None)
        if stats := msg.get("stats"):
            self.add({"batch": batch, "shard": msg.get("shard"), **stats})
        reply: dict = {"stop": stop}
        if (keys := msg.get("floors")) is not None:
            with self._lock:
                reply["floors"] = {k: self._floors[k] for k in keys if k in self._floors}
        return reply

    def add(self, stats: dict) -> None:
        with self._lock:
            self.records += stats.get("records", 0)
            self.transactions += stats.get("transactions", 0)
            self.batches += stats.get("batches", 0)
            if not stats.get("batches") and "batch" in stats:
                batch = int(stats["batch"])
                self._batch_records[batch] = self._batch_records.get(batch, 0) + stats.get("records", 0)
            for key, agg in stats.get("partitions", {}).items():  # [records, bytes, next offset, when]
                self._raise_floor(key, int(agg[2]))
        if self._on_stats:
            self._on_stats(stats)

    def _forget(self, owner: tuple[int, int]) -> None:
        with self._lock:
            self._heard.pop(owner, None)
            self._settled = {tp: v for tp, v in self._settled.items() if v[1] != owner}

    def settled(self) -> dict[tuple[str, int], int]:
        """(source topic, partition) -> offset, for partitions a running task reported settled: the
        fake group holds that offset and it was the source's end (last stable offset) when the task
        last fetched the partition; nothing of it has arrived since."""
        now = time.monotonic()
        with self._lock:
            if gone := {o for o, t in self._heard.items() if now - t > SETTLED_FRESH_S}:
                # Forgotten for good: a task heard from again later says anew what is settled.
                for owner in gone:
                    del self._heard[owner]
                self._settled = {tp: v for tp, v in self._settled.items() if v[1] not in gone}
            return {tp: offset for tp, (offset, owner) in self._settled.items() if owner in self._heard}

    def seed_floors(self, floors: dict[str, int]) -> None:
        """Offsets known committed before any task ran (the job's pre-flight read of the group)."""
        with self._lock:
            for key, offset in floors.items():
                self._raise_floor(key, offset)

    def _raise_floor(self, key: str, offset: int) -> None:
        if offset > self._floors.get(key, -1):
            self._floors[key] = offset

    def batch_ended(self, batch: int, seconds: float) -> None:
        """Spark finished batch `batch` (every task of it ended) in `seconds`: one "batches" event
        with the records its tasks committed."""
        with self._lock:
            records = self._batch_records.pop(batch, 0)
        self.add({"batch": batch, "batches": 1, "batch_records": records, "batch_seconds": seconds})

    def new_query(self) -> None:
        """A restarted query numbers its batches from 1 again: forget the failed query's."""
        with self._lock:
            self._ended_before, self._highest_batch = -1, -1
            self._batch_records.clear()
            self._settled.clear()
            self._heard.clear()

    def end_running_batches(self) -> None:
        """The running tasks commit and end; the next batch is planned with what changed."""
        with self._lock:
            self._ended_before = self._highest_batch

    def stop(self) -> None:
        with self._lock:
            self._stopping = True

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _owner(msg: dict) -> tuple[int, int]:
    """The (batch, shard) of the task that sent `msg`."""
    return int(msg.get("batch", -1)), int(msg.get("shard", -1))


class DriverLink:
    """Task side (implements `task_report.DriverLink`)."""

    def __init__(self, address: str, batch: int, shard: int) -> None:
        self.address, self.batch, self.shard = address, batch, shard
        self._sock: socket.socket | None = None
        self._file = None
        self._broken = not address
        self._stop = False
        self._last = 0.0

    def stop_requested(self) -> bool:
        if not self._stop and time.monotonic() - self._last >= _EXCHANGE_INTERVAL_S:
            self._exchange(None)
        return self._stop

    def report(self, stats: dict | None, settled: dict[str, int] | None = None) -> bool:
        return self._exchange(stats, {"settled": settled} if settled else None)

    def floors(self, keys: list[str]) -> dict[str, int]:
        """For "source topic|partition" keys: the highest next offset the driver saw committed in this
        run. A resume point below it was read from a group coordinator that has not seen the commit
        (a broker cut off from its cluster still answers as coordinator). Empty without a line."""
        reply: dict = {}
        self._exchange(None, {"floors": keys}, reply)
        return {k: int(v) for k, v in reply.get("floors", {}).items()}

    def _exchange(self, stats: dict | None, ask: dict | None = None, reply: dict | None = None) -> bool:
        self._last = time.monotonic()
        if self._broken:
            return False
        try:
            if self._sock is None:
                host, port = self.address.rsplit(":", 1)
                self._sock = socket.create_connection((host, int(port)), timeout=_TIMEOUT_S)
                self._file = self._sock.makefile("rwb")
            msg = {"batch": self.batch, "shard": self.shard, **({"stats": stats} if stats else {}), **(ask or {})}
            self._file.write(json.dumps(msg).encode() + b"\n")
            self._file.flush()
            line = self._file.readline()
            if not line:
                raise OSError("the driver closed the connection")
            answer = json.loads(line)
            self._stop = self._stop or bool(answer.get("stop"))
            if reply is not None:
                reply.update(answer)
            return True
        except (OSError, ValueError) as e:
            # Copying goes on to the end of the batch; the stats get one more try at its end.
            log.warning("shard %d lost its line to the driver at %s (%s): live stats and early stop are off "
                        "for this task", self.shard, self.address, e, extra={"shard": self.shard})
            self._broken = True
            self.close()
            return False

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = self._file = None
