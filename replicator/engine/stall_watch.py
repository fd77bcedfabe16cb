"""A running shard task that stops making progress says so, with where each of its threads stands.

Every client call of the copy loop has a timeout: between two turns of the loop there are at most a
new producer (`init_transactions()` retried for 120 s through a coordinator move) and the read of
the fake group's offsets (60 s). A turn that takes far longer is blocked where no timeout covers it:
inside a client library (a destroy waiting for a broker thread, an assignment change) or a lock.
Nothing else would show it: the task still runs, so Spark waits, and the only symptom is lag
growing at 0 records/s (seen once after a rolling restart of a three-broker target). The watch
cannot unblock the call; it makes the next occurrence diagnosable.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("replicator.stall_watch")  # the log's public name, kept when the module moved

STALL_S = 240.0  # above the longest bounded stretch between two turns (180 s)


class StallWatch:
    """`beat()` from the loop; a daemon thread logs once per stall when beats stop for `limit_s`."""

    def __init__(self, what: str, limit_s: float = STALL_S, extra: dict | None = None) -> None:
        self.what, self.limit_s, self.extra = what, limit_s, extra or {}
        self._beat = time.monotonic()
        self._stalled_since: float | None = None
        self._done = threading.Event()
        self._owner = threading.get_ident()
        threading.Thread(target=self._watch, daemon=True, name=f"stall-watch {what}").start()

    def beat(self) -> None:
        self._beat = time.monotonic()

    def close(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(min(self.limit_s / 4, 15.0)):
            idle = time.monotonic() - self._beat
            if idle >= self.limit_s and self._stalled_since is None:
                self._stalled_since = self._beat
                log.error("%s has made no progress for %.0f s: a call without a timeout is blocked; "
                          "its thread stands at:\n%s", self.what, idle, _stacks(self._owner),
                          extra={**self.extra, "event": "task_stalled", "stalled_seconds": round(idle)})
            elif idle < self.limit_s and self._stalled_since is not None:
                log.warning("%s makes progress again after %.0f s", self.what, self._beat - self._stalled_since,
                            extra={**self.extra, "event": "task_resumed"})
                self._stalled_since = None


def _stacks(owner: int) -> str:
    """The stalled thread first, then every other thread of the process (client callbacks, reporters)."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    order = sorted(frames, key=lambda ident: ident != owner)
    return "\n".join(f"thread {names.get(i, i)}:\n{''.join(traceback.format_stack(frames[i]))}" for i in order)
