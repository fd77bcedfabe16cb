"""One answer to "what now?" for every Kafka client error the job meets.

librdkafka flags an error as fatal, retriable or abortable, but those flags alone do not say what a
transactional copier must do: an authorization failure also asks for an abort, and no retry will
ever fix it; a fenced producer is fatal to its instance, yet the shard must simply start over from
the target. Every caller (the shard's copy loop, producer initialisation, offset reads, fencing)
asks `classify` instead of reading the flags itself, so they all agree. `verdict` gives the whole
answer (the outcome, whether the cause passes by itself, whether it is a refused permission);
`classify`, `transient` and `is_authorization_error` are its parts.

The named sets of Kafka error codes the replicator tells apart live here too, so no module keeps a
private list of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from confluent_kafka import KafkaError

log = logging.getLogger(__name__)
T = TypeVar("T")


class Outcome(Enum):
    FENCED = "fenced"  # another producer holds the transactional id: start over from the target
    ABORT = "abort"  # the open transaction must be aborted; then start over from the target
    RETRY = "retry"  # transient (coordinator moving or loading, timeout, connection): try again
    RECREATE = "recreate"  # this client instance is unusable; a new one can go on
    FATAL = "fatal"  # no retry can help: stop with the error


# A permission the principal lacks (an ACL): `access.permissions` names which, and for whom.
AUTHORIZATION_FAILED = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
})
# A group coordinator that is moving or still loading (a fresh cluster's __consumer_offsets), or an
# answer that did not come in time: asked again.
COORDINATOR_BUSY = frozenset({
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
    KafkaError._TIMED_OUT,
})
# A topic's metadata error that means "not there for this principal": absent, or not visible to it.
TOPIC_NOT_VISIBLE = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED})

_FENCED = frozenset({
    KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.INVALID_PRODUCER_ID_MAPPING,
})
# Retrying sends the same request and gets the same refusal.
_FATAL = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION, KafkaError._SSL,
    KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE, KafkaError._INVALID_ARG,
    KafkaError.INVALID_CONFIG, KafkaError.INVALID_REQUEST, KafkaError.INVALID_TXN_STATE,
    KafkaError.INVALID_TRANSACTION_TIMEOUT,
})
# Not flagged retriable by every librdkafka path, but they resolve by themselves.
_TRANSIENT = frozenset({
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
    KafkaError.CONCURRENT_TRANSACTIONS, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._WAIT_COORD,
    KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError.REBALANCE_IN_PROGRESS, KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE, KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError._RESOLVE,
    KafkaError.NETWORK_EXCEPTION, KafkaError._NODE_UPDATE, KafkaError.KAFKA_STORAGE_ERROR,
})


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome  # what the caller does now
    transient: bool  # the cause goes away by itself: worth retrying for longer than a few attempts
    authorization: bool  # a permission is missing: no retry helps, the message names the ACL


def verdict(err: KafkaError) -> Verdict:
    """The whole answer about one error; `classify`, `transient` and `is_authorization_error` are
    its parts, for callers that ask only one question."""
    return Verdict(classify(err), transient(err), is_authorization_error(err))


def classify(err: KafkaError) -> Outcome:
    code = err.code()
    if code in _FENCED:
        return Outcome.FENCED
    if code in _FATAL:
        return Outcome.FATAL
    if err.txn_requires_abort() or _refused_after_failure(err):
        return Outcome.ABORT
    # _FATAL is what every call on a producer that already hit a fatal error (most often: fenced)
    # returns, without the fatal flag; the instance is dead, a new one can go on.
    if err.fatal() or code == KafkaError._FATAL:
        return Outcome.RECREATE
    if err.retriable() or code in _TRANSIENT:
        return Outcome.RETRY
    return Outcome.FATAL


def _refused_after_failure(err: KafkaError) -> bool:
    """produce() into a transaction that already failed (its records timed out while a leader was
    cut off from its peers) is refused with a bare "Erroneous state", none of the flags set: the
    cause was the earlier failure, which the abort and a fresh producer get past."""
    return err.code() == KafkaError._STATE and not (err.fatal() or err.retriable() or err.txn_requires_abort())


def transient(err: KafkaError) -> bool:
    """Whether the cause goes away by itself (a broker restarting, a leader moving), even when the
    open transaction has to be aborted for it: worth retrying for longer than a few attempts."""
    if _refused_after_failure(err):
        return True
    return err.code() not in _FATAL and err.code() not in _FENCED and (err.retriable() or err.code() in _TRANSIENT)


def is_authorization_error(err: KafkaError | None) -> bool:
    return err is not None and err.code() in AUTHORIZATION_FAILED


def while_retriable(call: Callable[[], T], timeout: float, what: str, first_wait: float = 0.1,
                    max_wait: float = 2.0) -> T:
    """`call()`, again while its error says `retriable` (kafka-python's errors and ours do: a
    coordinator still loading after a broker start, a group coordinator that does not exist yet on a
    new cluster), with waits doubling up to `max_wait`, until `timeout` has passed."""
    deadline = time.monotonic() + timeout
    wait = first_wait
    while True:
        try:
            return call()
        except Exception as e:
            if not getattr(e, "retriable", False) or time.monotonic() + wait > deadline:
                raise
            log.info("%s: %s; asking again in %.1fs", what, e, wait)
            time.sleep(wait)
            wait = min(wait * 2, max_wait)
