"""Client calls that librdkafka may not return from in time, bounded by us.

librdkafka 2.16's `send_offsets_to_transaction()` can block past its own timeout: the group
coordinator request it makes never checks its deadline (librdkafka issues #5456 and #5511, fix
proposed in PR #5457, not released). It happened in the multi-broker chaos matrix when the group
coordinator's broker was cut off from its peers: a shard's task stood in that call for minutes
(docs/reliability.md). So such a call runs on a helper thread; past its timeout and a grace the copy
loop gives up on it with a retriable timeout, starts over with a new producer (whose
`init_transactions()` fences the stuck one) and re-reads its offsets from the target.

The stuck client is kept referenced for as long as its call blocks: destroying a librdkafka handle
while another thread is inside one of its calls is undefined. The helper thread is a daemon: a
`ThreadPoolExecutor`'s threads are joined at interpreter exit, so a Spark worker whose JVM had gone
stood at exit behind the stuck call for as long as the call blocked (make test found one 25 minutes
after its job was killed, still holding the shard's producer).
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

log = logging.getLogger("replicator.bounded_call")  # the log's public name, kept when the module moved

GRACE_S = 5.0
T = TypeVar("T")

_stuck: list[tuple[object, Future]] = []  # (client, its blocked call) until the call returns
_stuck_lock = threading.Lock()


class _Helper:
    """One daemon thread running submitted calls in order. The thread ends once its helper is
    stopped or unreferenced, so producers built one after another do not pile up threads."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=_serve, args=(self._calls,), name=name, daemon=True).start()
        weakref.finalize(self, self._calls.put, None)

    def submit(self, fn: Callable[[], T]) -> Future:
        future: Future = Future()
        self._calls.put((future, fn))
        return future

    def stop(self) -> None:
        self._calls.put(None)  # taken once the call in hand returns, if it ever does


def _serve(calls: queue.SimpleQueue) -> None:
    while (item := calls.get()) is not None:
        future, fn = item
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the caller, as an executor does
                future.set_exception(e)


class BoundedCaller:
    """Runs calls one at a time on a helper thread; a call that overruns its bound is abandoned
    with its client, and the next call gets a fresh thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._helper = _Helper(f"bounded-{name}")

    def call(self, client: object, what: str, fn: Callable[[], T], timeout: float) -> T:
        future = self._helper.submit(fn)
        try:
            return future.result(timeout + GRACE_S)
        except FutureTimeout:
            self._abandon(client, future)
            log.error("%s did not return within its %.0f s timeout (librdkafka #5456); giving up on this "
                      "client and starting over from the target", what, timeout,
                      extra={"event": "client_call_stuck", "call": what})
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{what} blocked past its {timeout:.0f} s "
                                            f"timeout (librdkafka #5456)", retriable=True)) from None

    def _abandon(self, client: object, future: Future) -> None:
        with _stuck_lock:
            _stuck[:] = [(c, f) for c, f in _stuck if not f.done()]
            _stuck.append((client, future))
        self._helper.stop()
        self._helper = _Helper(f"bounded-{self.name}")


def stuck_calls() -> int:
    """Abandoned calls that have not returned yet."""
    with _stuck_lock:
        return sum(not f.done() for _, f in _stuck)
