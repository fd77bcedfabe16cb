"""How long each step of the job's stop may take, and what a stop that did not finish them leaves.

A stop runs four steps, each by a deadline counted from the stop signal, so that together they end
within `shutdown_timeout_seconds` (default 60 s) whatever cluster is down. Kubernetes SIGKILLs the
pod `terminationGracePeriodSeconds` (deploy/k8s: 90 s) after SIGTERM; the rest of that period is
the process's own exit (the Spark JVM, the interpreter). A step that finishes early leaves its time
to the next ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# (step, the share of shutdown_timeout_seconds by which it must be done)
TASKS_END = "the shard tasks commit what they copied and end"  # also at most transaction_timeout_ms
QUERY_STOP = "the streaming query stops (Spark cancels tasks that did not end)"
SPARK_STOP = "Spark and the observers stop"
FENCING = "every shard's transactional id is fenced (what is open is aborted)"
STEPS = ((TASKS_END, 0.50), (QUERY_STOP, 0.55), (SPARK_STOP, 0.70), (FENCING, 0.95))
_SHARE = dict(STEPS)
# What the process may need after the last step (the JVM's and the interpreter's exit): with the
# target down, SIGTERM to exit took 57.7-59.0 s at the 60 s default on 2 loaded cores
# (tests/integration/test_bounded_stop.py); the manifests' 90 s grace leaves 30.
EXIT_MARGIN_S = 15.0


@dataclass
class StopBudget:
    total_s: float
    started: float = field(default_factory=time.monotonic)

    def left(self, step: str) -> float:
        """Seconds until `step` must be done (0 when its deadline has passed)."""
        return max(0.0, self.started + self.total_s * _SHARE[step] - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclass
class StopOutcome:
    """What the stop could not finish; empty when it was clean."""

    tasks_not_ended: float | None = None  # seconds after the stop signal, when the shard tasks overran their share
    unfenced: list[tuple[str, str]] = field(default_factory=list)  # (transactional id, why)
    fenced: int = 0  # ids the stop tried to fence

    @property
    def clean(self) -> bool:
        return self.tasks_not_ended is None and not self.unfenced

    def line(self, took: float) -> str:
        """One line: what is left open and what the next start does about it."""
        parts = []
        if self.tasks_not_ended is not None:
            parts.append(f"the shard tasks had not committed and ended {self.tasks_not_ended:.0f} s after the stop "
                         f"signal, so Spark cancelled them and what they had copied since their last commit was not "
                         f"committed")
        if self.unfenced:
            txn_id, why = self.unfenced[0]
            more = f" and {len(self.unfenced) - 1} more" if len(self.unfenced) > 1 else ""
            parts.append(f"could not fence {len(self.unfenced)} of {self.fenced} transactional ids on the target "
                         f"({txn_id}{more}: {why}), so a transaction of this job may still be open there until "
                         f"the target aborts it at transaction_timeout_ms")
        else:
            parts.append("every transactional id was fenced, so nothing is left open on the target")
        return (f"stopped, not cleanly, after {took:.0f} s: {'; '.join(parts)}. Nothing is lost or duplicated: "
                f"the next start fences these ids and rewinds from the target's offsets")
