"""The lag reader's failures: a cluster that does not answer is named (LagUnavailable), and a
one-off lookup waits out "not now" answers but not refusals."""

from __future__ import annotations

import socket

import pytest

from replicator import lag
from replicator.config import ReplicatorConfig
from replicator.lag import LagReader, LagUnavailable
from replicator.topic_sync import TopicMapping


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_an_unreachable_source_is_named():
    cfg = ReplicatorConfig(source_bootstrap_servers=f"127.0.0.1:{_closed_port()}",
                           target_bootstrap_servers=f"127.0.0.1:{_closed_port()}", topics="t")
    with pytest.raises(LagUnavailable, match="source cluster"):
        LagReader(cfg, timeout_s=2)


class _Flaky:
    """Answers "not now" `times` times, then an empty lookup (the retry logic only, no client)."""

    def __init__(self, times: int, retriable: bool) -> None:
        self.times, self.retriable, self.calls, self.closed = times, retriable, 0, False

    def lags(self, mappings):
        self.calls += 1
        if self.calls <= self.times:
            raise LagUnavailable("CoordinatorNotAvailableError", retriable=self.retriable)
        return []

    def close(self) -> None:
        self.closed = True


def test_a_one_off_lookup_waits_for_a_new_clusters_coordinator(monkeypatch):
    flaky = _Flaky(2, retriable=True)
    monkeypatch.setattr(lag, "LagReader", lambda cfg: flaky)
    monkeypatch.setattr(lag.time, "sleep", lambda s: None)
    assert lag.partition_lags(ReplicatorConfig(topics="t"), [TopicMapping("t", "t", 1)]) == []
    assert flaky.calls == 3 and flaky.closed


def test_a_refusal_is_not_retried(monkeypatch):
    flaky = _Flaky(1, retriable=False)
    monkeypatch.setattr(lag, "LagReader", lambda cfg: flaky)
    with pytest.raises(LagUnavailable):
        lag.partition_lags(ReplicatorConfig(topics="t"), [TopicMapping("t", "t", 1)])
    assert flaky.calls == 1 and flaky.closed
