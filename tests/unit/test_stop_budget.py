"""The stop's budget: every step has a deadline, all of them fit shutdown_timeout_seconds, and that
fits the manifests' terminationGracePeriodSeconds with room for the process's exit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from replicator.config import ConfigError, ReplicatorConfig, load
from replicator.engine.stop_budget import EXIT_MARGIN_S, FENCING, STEPS, TASKS_END, StopBudget, StopOutcome

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
BASE = {"source_bootstrap_servers": "127.0.0.1:19092", "target_bootstrap_servers": "127.0.0.1:29092",
        "topics": "t"}


def _grace_periods() -> list[tuple[str, int]]:
    found = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "terminationGracePeriodSeconds":
                    found.append((where, int(value)))
                walk(value, where)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    for path in sorted(K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            walk(doc, str(path.relative_to(K8S)))
    return found


def _shutdown_timeouts_set_in_manifests() -> list[float]:
    """REPLICATOR_SHUTDOWN_TIMEOUT_SECONDS or shutdown_timeout_seconds wherever a manifest sets it."""
    values = []
    for path in K8S.rglob("*.yaml"):
        for line in path.read_text().splitlines():
            key, _, value = line.strip().partition(":")
            if key.strip().lower().removeprefix("replicator_") == "shutdown_timeout_seconds" and value.strip():
                values.append(float(value.strip().strip("'\"")))
    return values


def test_the_stop_fits_every_manifests_grace_period_with_room_for_the_exit():
    periods = _grace_periods()
    assert periods, "no terminationGracePeriodSeconds in deploy/k8s"
    timeouts = [ReplicatorConfig().shutdown_timeout_seconds, *_shutdown_timeouts_set_in_manifests()]
    for where, grace in periods:
        for timeout in timeouts:
            assert timeout + EXIT_MARGIN_S <= grace, f"{where}: a {timeout:g} s stop does not fit {grace} s"


def test_the_steps_come_in_order_and_end_before_the_timeout():
    shares = [share for _, share in STEPS]
    assert shares == sorted(shares) and shares[-1] < 1.0


def test_each_step_gets_what_the_earlier_ones_left():
    budget = StopBudget(60.0, started=time.monotonic() - 40.0)  # the shard tasks overran their 30 s by 10
    assert budget.left(TASKS_END) == 0.0
    assert 16.0 < budget.left(FENCING) <= 17.0


@pytest.mark.parametrize("value", ["5", "0", "-1", "4000", "soon"])
def test_shutdown_timeout_is_validated(value):
    with pytest.raises(ConfigError) as e:
        load({**BASE, "shutdown_timeout_seconds": value}, environ={})
    assert e.value.key == "shutdown_timeout_seconds"


def test_shutdown_timeout_from_the_environment():
    cfg = load(BASE, environ={"REPLICATOR_SHUTDOWN_TIMEOUT_SECONDS": "45"})
    assert cfg.shutdown_timeout_seconds == 45.0


def test_a_stop_that_could_not_fence_says_what_is_open_and_what_the_next_start_does():
    outcome = StopOutcome(tasks_not_ended=30.0, unfenced=[("j-shard-0", "Local: Timed out"),
                                                          ("j-shard-1", "Local: Timed out")], fenced=2)
    assert not outcome.clean
    line = outcome.line(58.2)
    assert "\n" not in line
    assert "after 58 s" in line and "could not fence 2 of 2 transactional ids" in line and "j-shard-0" in line
    assert "the next start fences these ids and rewinds from the target's offsets" in line


def test_a_stop_whose_tasks_were_cancelled_but_fenced_says_nothing_is_open():
    line = StopOutcome(tasks_not_ended=30.0, fenced=2).line(40)
    assert "nothing is left open on the target" in line and "ended 30 s after the stop signal" in line
    assert StopOutcome(fenced=2).clean
