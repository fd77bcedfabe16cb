"""A shard task blocked past its limit is reported once, with the blocked call's stack; progress
again is reported too; a task that keeps beating is never reported."""

from __future__ import annotations

import logging
import threading
import time

from replicator.engine.stall_watch import StallWatch


def _blocked_in_a_client_call(release: threading.Event) -> None:
    release.wait(10)


def test_a_blocked_task_is_reported_once_with_where_it_stands(caplog):
    caplog.set_level(logging.WARNING, logger="replicator.stall_watch")
    release, done = threading.Event(), threading.Event()

    def task() -> None:
        watch = StallWatch("shard 3's task", limit_s=0.4, extra={"shard": 3})
        _blocked_in_a_client_call(release)
        watch.beat()
        time.sleep(0.3)
        watch.close()
        done.set()

    threading.Thread(target=task).start()
    time.sleep(1.2)
    release.set()
    assert done.wait(5)
    stalled = [r for r in caplog.records if getattr(r, "event", None) == "task_stalled"]
    assert len(stalled) == 1, [r.getMessage() for r in caplog.records]
    assert stalled[0].shard == 3 and stalled[0].levelno == logging.ERROR
    assert "shard 3's task has made no progress" in stalled[0].getMessage()
    assert "_blocked_in_a_client_call" in stalled[0].getMessage()  # the blocked thread's stack
    assert [r for r in caplog.records if getattr(r, "event", None) == "task_resumed"]


def test_a_task_that_beats_is_never_reported(caplog):
    caplog.set_level(logging.WARNING, logger="replicator.stall_watch")
    watch = StallWatch("shard 0's task", limit_s=0.3)
    for _ in range(10):
        time.sleep(0.1)
        watch.beat()
    watch.close()
    assert not caplog.records
