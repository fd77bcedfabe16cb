"""Every client error maps to one outcome; the copy loop, fencing and offset reads all ask `classify`."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from replicator.clients.client_errors import (
    AUTHORIZATION_FAILED,
    Outcome,
    Verdict,
    classify,
    is_authorization_error,
    transient,
    verdict,
)


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                                  KafkaError.INVALID_PRODUCER_ID_MAPPING])
def test_fencing_is_fenced_whatever_the_flags(code):
    assert classify(KafkaError(code, "x", fatal=True)) is Outcome.FENCED
    assert classify(KafkaError(code, "x", txn_requires_abort=True)) is Outcome.FENCED


@pytest.mark.parametrize("code", [KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                  KafkaError.GROUP_AUTHORIZATION_FAILED,
                                  KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                  KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError.INVALID_TRANSACTION_TIMEOUT])
def test_what_no_retry_can_fix_is_fatal_even_when_abortable(code):
    # librdkafka flags a refused produce as abortable; aborting and retrying gets the same refusal.
    assert classify(KafkaError(code, "x", txn_requires_abort=True)) is Outcome.FATAL
    assert classify(KafkaError(code, "x", retriable=True)) is Outcome.FATAL


def test_abortable_transaction_error_is_abort():
    assert classify(KafkaError(KafkaError._STATE, "x", txn_requires_abort=True)) is Outcome.ABORT
    assert classify(KafkaError(KafkaError.TRANSACTION_ABORTABLE, "x", txn_requires_abort=True)) is Outcome.ABORT


def test_produce_refused_by_a_transaction_that_already_failed_is_abort_and_transient():
    # Seen when a target leader was cut off from its peers: the open transaction's records timed out
    # ("requires epoch bump"), and the next produce() raised "Unable to produce message: Local:
    # Erroneous state" with no flag set, which stopped the shard task as if nothing could help.
    err = KafkaError(KafkaError._STATE, "Unable to produce message")
    assert classify(err) is Outcome.ABORT
    assert transient(err)


def test_fatal_producer_state_means_recreate():
    assert classify(KafkaError(KafkaError._STATE, "x", fatal=True)) is Outcome.RECREATE
    # produce() on a producer that was fenced earlier: "Unable to produce message: Local: Fatal error",
    # not flagged fatal itself (a zombie twin hit this and stopped the task instead of starting over).
    assert classify(KafkaError(KafkaError._FATAL, "Unable to produce message")) is Outcome.RECREATE


@pytest.mark.parametrize("code", [KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                  KafkaError.NOT_COORDINATOR, KafkaError.CONCURRENT_TRANSACTIONS,
                                  KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT,
                                  KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_ENOUGH_REPLICAS])
def test_transient_errors_retry_even_without_the_retriable_flag(code):
    assert classify(KafkaError(code, "x")) is Outcome.RETRY


def test_flagged_retriable_is_retry_and_unknown_is_fatal():
    assert classify(KafkaError(KafkaError.UNKNOWN, "x", retriable=True)) is Outcome.RETRY
    assert classify(KafkaError(KafkaError.UNKNOWN, "x")) is Outcome.FATAL


def test_a_broker_going_away_is_transient_even_when_the_transaction_must_abort():
    # A target broker killed mid-transaction: the transaction aborts, yet the cause passes by itself,
    # so it does not use up the few attempts a real failure gets.
    assert transient(KafkaError(KafkaError._TRANSPORT, "x", txn_requires_abort=True))
    assert transient(KafkaError(KafkaError._ALL_BROKERS_DOWN, "x"))
    assert transient(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "x", retriable=True, txn_requires_abort=True))
    assert not transient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "x", retriable=True))
    assert not transient(KafkaError(KafkaError.PRODUCER_FENCED, "x"))
    assert not transient(KafkaError(KafkaError._STATE, "x", txn_requires_abort=True))


@pytest.mark.parametrize("err", [
    KafkaError(KafkaError.PRODUCER_FENCED, "x", fatal=True),
    KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "x", txn_requires_abort=True),
    KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "x"),
    KafkaError(KafkaError._STATE, "x"),
    KafkaError(KafkaError._TRANSPORT, "x", txn_requires_abort=True),
    KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "x"),
    KafkaError(KafkaError._FATAL, "x"),
    KafkaError(KafkaError.UNKNOWN, "x"),
])
def test_the_verdict_is_every_answer_at_once(err):
    v = verdict(err)
    assert (v.outcome, v.transient, v.authorization) == (classify(err), transient(err), is_authorization_error(err))


def test_authorization_failures_are_fatal_and_not_transient():
    for code in AUTHORIZATION_FAILED:
        v = verdict(KafkaError(code, "x", retriable=True))
        assert v == Verdict(Outcome.FATAL, False, True)
    assert not is_authorization_error(None)
    assert not verdict(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "x")).authorization
