"""Shared fixtures: the real two-cluster sandbox, started once per test session."""

from __future__ import annotations

import os
import uuid

import pytest

from replicator.sandbox import Sandbox
from replicator.sandbox.cluster import _port_shift, default_root

# Each pytest-xdist worker gets its own clusters: ports this far above the previous worker's (above
# every offset a test adds to the session's shift, up to +127 today) and a directory of its own.
WORKER_PORT_STRIDE = 200


def pytest_configure(config):
    worker = getattr(config, "workerinput", {}).get("workerid", "gw0")
    index = int(worker.removeprefix("gw"))
    if index:
        os.environ["REPLICATOR_SANDBOX_DIR"] = f"{default_root()}-{worker}"
        os.environ["REPLICATOR_SANDBOX_PORT_SHIFT"] = str(_port_shift() + WORKER_PORT_STRIDE * index)


# The longest files first (minutes each in a two-worker run), so that no worker starts one of them
# while the other is nearly done: `make test` passes --no-loadscope-reorder, which keeps this order.
LONGEST_FIRST = ("test_chaos", "test_engine", "test_security", "test_observability", "test_scale_out",
                 "test_verify", "test_secure_cli", "test_group_sync_kill", "test_topics", "test_failover",
                 "test_class_archive", "test_translation_exact", "test_switchover")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def sandbox():
    """Fresh source and target clusters; stopped (by PID) when the session ends.

    `REPLICATOR_TEST_KEEP_SANDBOX=1` reuses a running sandbox instead of wiping it. The target has
    the listener the chaos harness's slow-network proxy forwards to (unused otherwise).
    """
    box = Sandbox(proxied_target=True)
    keep = os.environ.get("REPLICATOR_TEST_KEEP_SANDBOX") == "1"
    box.up(fresh=not keep)
    yield box
    if not keep:
        box.down()


@pytest.fixture(scope="session")
def secure_sandbox(tmp_path_factory):
    """A second pair of clusters that authenticate and authorize: the source asks for client
    certificates (mTLS), the target for SCRAM-SHA-512 over TLS, so one replication covers both modes.
    Both deny what no ACL allows; `admin` is a super user, `reader`/`writer`/`other` have no rights.
    Ports: the session's shift + 70 (the transaction.version-0 pair uses + 50)."""
    box = Sandbox(root=tmp_path_factory.mktemp("secure"), port_shift=_port_shift() + 70, secure=("mtls", "scram"))
    box.up(fresh=True)
    yield box
    box.down()


@pytest.fixture
def unique():
    """A short unique suffix so tests sharing the session's clusters never collide."""
    return uuid.uuid4().hex[:8]
