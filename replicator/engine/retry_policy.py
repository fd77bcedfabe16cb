"""How long a shard task keeps starting over after failed transactions, and how it backs off.

A cluster that is down or moving leaders answers "retry" until it is back, which takes longer than
a few quick attempts (a broker restart, a network partition). A twin (the paused pod this one
replaced, waking up) fences the shard until it dies. Both are retried, backing off, for as long as
the task runs; anything else has a few attempts. A commit in between starts the count again.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError

from replicator.clients.client_errors import Outcome, classify, transient

log = logging.getLogger("replicator.shard_copy")  # the events' log, as when this lived in shard_copy

MAX_ATTEMPTS = 6  # consecutive non-transient failures (no commit in between) before the task fails
RETRY_BUDGET_S = 300.0  # how long transient errors are retried without a commit (bounded copies)


class RetryPolicy:
    def __init__(self, shard: int, job: str, txn_id: str) -> None:
        self.shard, self.job, self.txn_id = shard, job, txn_id
        self._failures = self._attempts = 0  # non-transient failures; all failures, for the back-off
        self._failing_since: float | None = None

    def outcome(self, err: KafkaError) -> Outcome:
        """What the failed transaction's error asks for; raises when retrying cannot help."""
        outcome = classify(err)
        if outcome is Outcome.FATAL:
            # A record too large, a missing permission. The open transaction is aborted by the next
            # init_transactions() (the driver fences every shard on exit).
            raise RuntimeError(f"shard {self.shard}: {_why_fatal(err)}, nothing of the open transaction "
                               f"was committed: {err.str()}") from None
        if outcome is Outcome.FENCED:
            log.warning("shard fenced: another producer now holds transactional.id %s; "
                        "re-initialising and re-reading offsets from the target", self.txn_id,
                        extra={"shard": self.shard, "event": "fenced"})
        return outcome

    def failed(self, err: KafkaError, outcome: Outcome, committed_since: bool) -> None:
        """Counts a failed attempt (`committed_since`: a transaction committed since the last one);
        raises when the task must give up."""
        if committed_since:
            self._failures, self._attempts, self._failing_since = 0, 0, None
        now = time.monotonic()
        self._failing_since = self._failing_since if self._failing_since is not None else now
        self._attempts += 1
        if not transient(err) and outcome is not Outcome.FENCED:
            self._failures += 1
        if outcome is Outcome.FENCED and self._attempts in (3, 10, 30, 100):
            log.warning("shard %d fenced %d times without a commit in between: is another instance "
                        "of job %r running against this target?", self.shard, self._attempts, self.job,
                        extra={"shard": self.shard, "event": "fenced_repeatedly"})
        if self._failures >= MAX_ATTEMPTS or now - self._failing_since >= RETRY_BUDGET_S:
            raise RuntimeError(f"shard {self.shard}: giving up after {self._failures} failed transactions and "
                               f"{now - self._failing_since:.0f} s without a commit; last error: {err.str()}"
                               ) from None
        log.warning("transaction failed (%s); restarting from the target's offsets (failing for %.0f s)",
                    err.str(), now - self._failing_since, extra={"shard": self.shard})

    def backoff_s(self) -> float:
        return min(0.1 * 2 ** min(self._attempts, 6), 5.0)


def _why_fatal(err: KafkaError) -> str:
    if err.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
        return "the target refused a record as too large"
    return "retrying cannot help"
