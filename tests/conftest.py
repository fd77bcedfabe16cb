"""Shared fixtures: the real two-cluster sandbox, started once per test session."""

from __future__ import annotations

import os
import uuid

import pytest

from replicator.sandbox import Sandbox


@pytest.fixture(scope="session")
def sandbox():
    """Fresh source and target clusters; stopped (by PID) when the session ends.

    `REPLICATOR_TEST_KEEP_SANDBOX=1` reuses a running sandbox instead of wiping it.
    """
    box = Sandbox()
    keep = os.environ.get("REPLICATOR_TEST_KEEP_SANDBOX") == "1"
    box.up(fresh=not keep)
    yield box
    if not keep:
        box.down()


@pytest.fixture
def unique():
    """A short unique suffix so tests sharing the session's clusters never collide."""
    return uuid.uuid4().hex[:8]
