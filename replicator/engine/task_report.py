"""What a running shard task tells the driver: its stats as transactions commit, and which of its
partitions are settled (the driver takes their lag as 0 without asking the clusters,
`ControlServer.settled`: at 5,000 idle partitions, asking was most of an idle job's CPU,
BENCHMARKS.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from replicator.engine.copy_stats import CopyStats

_REPORT_INTERVAL_S = 1.0
_SETTLED_INTERVAL_S = 2.0  # how often a task looks for partitions that reached or left the source's end
_SETTLED_RESEND_S = 30.0  # and says all of them again (the driver forgets a task it did not hear from)


class DriverLink(Protocol):
    """The running task's line to the driver (`task_control`): live stats out, "end now" in."""

    def stop_requested(self) -> bool: ...
    # False: not delivered, keep the stats. `settled`: "topic|partition" -> the offset at which it
    # is settled (see TaskReport), -1 for one no longer settled.
    def report(self, stats: dict | None, settled: dict[str, int] | None = None) -> bool: ...
    def floors(self, keys: list[str]) -> dict[str, int]: ...


class TaskReport:
    """The stats not yet taken by the driver, and what it was last told is settled."""

    def __init__(self, settled: Callable[[], dict[str, int]]) -> None:
        self.stats = CopyStats()
        self.link: DriverLink | None = None
        self._settled = settled  # the partitions settled now
        self._sent_settled: dict[str, int] = {}
        self._reported = time.monotonic()
        self._settled_checked = self._settled_resent = 0.0

    def send(self, force: bool = False) -> None:
        """Tells the driver what changed: at most once a second unless forced or settled partitions changed."""
        if self.link is None:
            return
        now = time.monotonic()
        settled = None
        if force or now - self._settled_checked >= _SETTLED_INTERVAL_S:
            if now - self._settled_resent >= _SETTLED_RESEND_S:
                self._sent_settled, self._settled_resent = {}, now
            settled, self._settled_checked = self._settled_changes(), now
        if self.stats.empty() and not settled:
            return
        if not force and not settled and now - self._reported < _REPORT_INTERVAL_S:
            return
        stats = None if self.stats.empty() else self.stats.to_dict()
        if self.link.report(stats, settled):
            if stats is not None:
                self.stats = CopyStats()
            for key, offset in (settled or {}).items():
                if offset < 0:
                    self._sent_settled.pop(key, None)
                else:
                    self._sent_settled[key] = offset
        self._reported = now

    def _settled_changes(self) -> dict[str, int]:
        """Partitions that became settled or stopped being so since the driver was last told."""
        now_settled = self._settled()
        changes = {k: o for k, o in now_settled.items() if self._sent_settled.get(k) != o}
        changes.update({k: -1 for k in self._sent_settled.keys() - now_settled.keys()})
        return changes
