"""The driver's loop says when a cluster call held it, instead of the progress line just going quiet."""

from __future__ import annotations

import logging
import time

from replicator.engine import job


def test_a_slow_call_is_named_with_its_duration(caplog):
    with caplog.at_level(logging.WARNING, logger="replicator.job"):
        job._warn_if_slow("topic discovery", time.monotonic() - 35)
        job._warn_if_slow("the lag lookup", time.monotonic() - 1)  # an ordinary lookup: nothing
    assert [r.getMessage() for r in caplog.records] == [
        "topic discovery took 35 s: a cluster answered late, and progress and lag updates waited for it"]
    assert caplog.records[0].event == "cluster_call_slow" and 34 < caplog.records[0].seconds < 36
