"""When a shard's open transaction commits, and how long the copy loop waits for records meanwhile.

Small transactions by default: committed `commit_interval_ms` (2 ms by default, so about one
transaction per arrival of records) after they began once the source has nothing more queued
(latency); while records are queued, kept open as long as the shard is behind, up to
`max_records_per_transaction` and `max_transaction_seconds`, or `catch_up_transaction_seconds` (or
nine commit durations, when commits are slower: a WAN link) while at least that much waits
(throughput, see `after_read`).

Committing holds the loop (flush, index entry, offsets, EndTxn: ~4 round trips, 5-45 ms as the
brokers get busier), so a transaction is stretched to keep the loop's capacity above what the
shard is asked to copy: at `load` (the share of the loop's time reading and producing at the
recent copy rate takes, times _HEADROOM) a transaction lasts at least
commit_cost * load / (1 - load). At a light load the loop is mostly waiting for records, commits
take nothing it needs and `commit_interval_ms` alone applies (latency); near the ceiling the
stretch reaches _MAX_LOAD's bound, three commit durations. A fixed three-commit floor kept p50 at
55-60 ms over the source at 30k rec/s, where the loop was idle most of the time (BENCHMARKS.md).

No clients here: the loop tells the rhythm what happened (a change, records produced, a read, a
commit, a failure) and asks it two things, how long to wait for records and whether to commit.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from replicator.config import ReplicatorConfig

IDLE_WAIT_S = 0.2  # longest wait for a first record; any arriving record ends it at once
_HEADROOM = 2.0
_MAX_LOAD = 0.75
# A catch-up's transaction lasts at least this many commit durations, so commits hold the loop at
# most a tenth of the time. On loopback a catch-up's commit takes 20-200 ms and the configured
# catch-up bound is the longer one; across a WAN link a commit is about four round trips (seven until
# the shard knows the target is a link away and where the partition's records land, see
# ShardCopier._commit), and 2 s transactions had spent a quarter of the copy's time committing.
_CATCH_UP_COMMITS = 9.0
# ... counted from the quickest of the last few commits: a link's round trips slow every commit, a
# broker failing over slows one, and that one must not stretch the transactions after it.
_CATCH_UP_COMMITS_SEEN = 5


class TransactionRhythm:
    def __init__(self, cfg: ReplicatorConfig) -> None:
        self.cfg = cfg
        # The open transaction: when its first change was made, its records, the seconds it spent
        # reading and producing (not waiting).
        self.started: float | None = None
        self.records = 0
        self._busy = 0.0
        self._committed = False  # a transaction committed since the task started or last failed
        self._commit_cost = 0.0  # recent seconds one commit held the loop (moving average)
        self._commits: deque[float] = deque(maxlen=_CATCH_UP_COMMITS_SEEN)  # the last commits' seconds
        self._rate = 0.0  # records/s this shard recently copied (moving average over transactions)
        self._record_cost = 0.0  # seconds reading and producing one record took, recently (moving average)
        # Until when the source holds records for this shard, as counted at the last full read, and
        # whether that count was a catch-up's (see after_read).
        self._behind_until = 0.0
        self._catching_up = False
        self._work_began = 0.0  # when the last read had records to hand (after any wait for them)
        self._cycle_began: float | None = None  # when the last commit ended

    # -- what happened --------------------------------------------------------------------------
    def changed(self) -> None:
        """Something joined the transaction (a position moved over markers, an offset to refresh)."""
        if self.started is None:
            self.started = time.monotonic()

    def working(self) -> None:
        """Records are at hand (a read returned, or is about to be made without waiting)."""
        self._work_began = time.monotonic()

    def produced(self, records: int) -> None:
        """A read's `records` (more than none) were produced into the transaction."""
        self.records += records
        self._busy += time.monotonic() - self._work_began
        if self.started is None:
            self.started = self._work_began

    def after_read(self, full: bool, waited_for_none: bool, waiting: Callable[[float], int]) -> float:
        """Seconds of records still waiting at the source after a read: `full`, it returned as many
        as it asked for; `waited_for_none`, it waited and got nothing. `waiting(enough)` counts the
        records the source holds past the copy positions (the client's cached high watermarks, no
        broker round trip), and may stop counting once past `enough`.

        Counted on a full read only (a shorter one may end at a source transaction still open, which
        the cached high watermarks count as waiting). After a full read, a shorter or an empty one
        means the local fetch queue ran dry for a moment, not that the source did: the count made
        then, less the time since, still holds. Ending transactions at the first short read ended a
        catch-up's at 0.3 s at 1 KiB, three times the commits of its time bound (docs/design.md,
        "How a transaction is sized"). A read that waited and got nothing ends the count."""
        now = time.monotonic()
        if full:
            backlog = self._backlog_s(waiting)
            self._catching_up = backlog >= self.cfg.catch_up_transaction_seconds
            # Before a rate is measured (a task's first transaction) the count is no time at all.
            self._behind_until = now + backlog if backlog < float("inf") else 0.0
            return backlog
        if waited_for_none:
            self._forget_backlog()
        return max(0.0, self._behind_until - now)

    def committed(self, entered: float, records: int) -> None:
        """The transaction committed, `records` in it; its commit began at `entered`."""
        if self.records:
            self._record_cost = _moving_average(self._record_cost, self._busy / self.records)
        self._clear()
        self._committed = True
        ended = time.monotonic()
        self._commit_cost = _moving_average(self._commit_cost, ended - entered)
        self._commits.append(ended - entered)
        if self._cycle_began is not None and ended > self._cycle_began:
            self._rate = _moving_average(self._rate, records / (ended - self._cycle_began))
        self._cycle_began = ended

    def attempt_ended(self) -> None:
        """The attempt ended (done or failed): its open transaction is gone, its backlog unknown."""
        self._clear()
        self._forget_backlog()

    def failed(self) -> bool:
        """A transaction failed; whether one had committed since the last failure."""
        committed, self._committed = self._committed, False
        return committed

    # -- what to do -----------------------------------------------------------------------------
    @property
    def open(self) -> bool:
        return self.started is not None

    def wait(self) -> float:
        """How long the next read may wait for records."""
        if self.started is None:
            return IDLE_WAIT_S
        now = time.monotonic()
        if self._behind_until > now and self._committed:
            # Records are known to wait: a read that comes back empty is the local queue running dry
            # for a moment, so wait for them (poll returns at the first), as long as a wait for a
            # first record at most: a stop or a source that went away is noticed as soon as before.
            return max(0.0, min(self._behind_until, self.started + self._bound(), now + IDLE_WAIT_S) - now)
        return max(0.0, self.started + self._interval() - now)

    def due(self, backlog_s: float) -> bool:
        """Whether the open transaction ends now, `backlog_s` seconds of records still waiting at the
        source (0: none queued beyond what was just read)."""
        if self.started is None:
            return False
        age = time.monotonic() - self.started
        if self.records >= self.cfg.max_records_per_transaction or age >= self._bound():
            return True
        # A transaction as long as the backlog is: near the ceiling, a shard that fell behind a
        # little commits a little less often and catches up, instead of falling a second behind and
        # then committing once a second, which kept p50 near 1 s at the top rate steps (BENCHMARKS.md).
        # The backlog shrinks while the transaction copies it, so the two meet; a pause (a slow
        # commit, a busy broker) grows one transaction by the pause, not the stream's latency for good.
        # A task's first transaction (and the first after a failure) ends at the interval even in a
        # backlog: it makes a restart visible on the target at once instead of a full transaction
        # (max_transaction_seconds) later, and it measures the copy rate the backlog is counted in.
        return age >= self._interval() and (not self._committed or age >= backlog_s)

    # -- how --------------------------------------------------------------------------------------
    def _clear(self) -> None:
        self.started, self.records, self._busy = None, 0, 0.0

    def _forget_backlog(self) -> None:
        self._behind_until, self._catching_up = 0.0, False

    def _bound(self) -> float:
        """How long the open transaction may grow: longer in a catch-up (at least
        catch_up_transaction_seconds of records waiting), where a reader of the replica waits for
        the backlog anyway and half the commits, each of which holds the loop, copy more."""
        if self._catching_up and self._committed:
            return self._catch_up_bound()
        return self.cfg.max_transaction_seconds

    def _catch_up_bound(self) -> float:
        """The configured catch-up bound, or _CATCH_UP_COMMITS durations of the quickest recent
        commit when commits are slow (a target across a WAN link), within half the transaction
        timeout (config validation keeps the configured bounds there too). A catch-up bound at or
        below max_transaction_seconds turns catch-up transactions off, stretched ones too."""
        if self.cfg.catch_up_transaction_seconds <= self.cfg.max_transaction_seconds:
            return self.cfg.max_transaction_seconds
        quickest = min(self._commits, default=0.0)
        stretched = min(_CATCH_UP_COMMITS * quickest, self.cfg.transaction_timeout_ms / 2000)
        return max(self.cfg.longest_transaction_seconds, stretched)

    def _backlog_s(self, waiting: Callable[[float], int]) -> float:
        """How many seconds of this shard's recent copy rate wait at the source; infinite before a
        rate is measured (a task's start, as in a catch-up)."""
        if self._rate <= 0:
            return float("inf")
        return waiting(self._rate * self._catch_up_bound()) / self._rate  # none grows longer

    def _interval(self) -> float:
        """How long a transaction stays open once the source is drained: `commit_interval_ms`, or
        longer when commits would take capacity the shard's load needs (see _HEADROOM)."""
        return max(self.cfg.commit_interval_ms / 1000, commit_stretch(self._commit_cost, self._load()))

    def _load(self) -> float:
        return min(_MAX_LOAD, _HEADROOM * self._rate * self._record_cost)


def _moving_average(average: float, sample: float) -> float:
    """Recent samples weigh most; 0 means no sample yet."""
    return sample if not average else 0.7 * average + 0.3 * sample


def commit_stretch(commit_cost: float, load: float) -> float:
    """The shortest transaction that leaves the loop `load` (0..1) of its time for producing when each
    commit takes `commit_cost` seconds: producing T out of every T + commit_cost."""
    return commit_cost * load / (1.0 - load)
