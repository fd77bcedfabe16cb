"""Client calls that librdkafka may not return from in time, bounded by us.

librdkafka 2.16's `send_offsets_to_transaction()` can block past its own timeout: the group
coordinator request it makes never checks its deadline (librdkafka issues #5456 and #5511, fix
proposed in PR #5457, not released). It happened in the multi-broker chaos matrix when the group
coordinator's broker was cut off from its peers: a shard's task stood in that call for minutes
(docs/reliability.md). So such a call runs on a helper thread; past its timeout and a grace the copy
loop gives up on it with a retriable timeout, starts over with a new producer (whose
`init_transactions()` fences the stuck one) and re-reads its offsets from the target.

The stuck client is kept referenced for as long as its call blocks: destroying a librdkafka handle
while another thread is inside one of its calls is undefined.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

log = logging.getLogger("replicator.bounded_call")  # the log's public name, kept when the module moved

GRACE_S = 5.0
T = TypeVar("T")

_stuck: list[tuple[object, Future]] = []  # (client, its blocked call) until the call returns
_stuck_lock = threading.Lock()


class BoundedCaller:
    """Runs calls one at a time on a helper thread; a call that overruns its bound is abandoned
    with its client, and the next call gets a fresh thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool = self._new_pool()

    def _new_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"bounded-{self.name}")

    def call(self, client: object, what: str, fn: Callable[[], T], timeout: float) -> T:
        future = self._pool.submit(fn)
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
        self._pool.shutdown(wait=False)
        self._pool = self._new_pool()


def stuck_calls() -> int:
    """Abandoned calls that have not returned yet."""
    with _stuck_lock:
        return sum(not f.done() for _, f in _stuck)
