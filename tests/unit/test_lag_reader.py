"""The lag reader's own failure: a cluster that does not answer is named, as LagUnavailable."""

from __future__ import annotations

import socket

import pytest

from replicator.config import ReplicatorConfig
from replicator.lag import LagReader, LagUnavailable


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_an_unreachable_source_is_named():
    cfg = ReplicatorConfig(source_bootstrap_servers=f"127.0.0.1:{_closed_port()}",
                           target_bootstrap_servers=f"127.0.0.1:{_closed_port()}", topics="t")
    with pytest.raises(LagUnavailable, match="source cluster"):
        LagReader(cfg, timeout_s=2)
