"""A transaction call that librdkafka does not end in time is given up on, its client kept alive."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from replicator.clients import bounded_call
from replicator.clients.bounded_call import BoundedCaller
from replicator.clients.client_errors import Outcome, classify, transient


@pytest.fixture(autouse=True)
def short_grace(monkeypatch):
    monkeypatch.setattr(bounded_call, "GRACE_S", 0.05)


def test_a_call_that_returns_gives_its_result():
    assert BoundedCaller("t").call(object(), "f", lambda: 42, 1) == 42


def test_a_call_that_raises_raises_the_same_error():
    err = KafkaError(KafkaError.NOT_COORDINATOR)

    def fails():
        raise KafkaException(err)

    with pytest.raises(KafkaException) as e:
        BoundedCaller("t").call(object(), "f", fails, 1)
    assert e.value.args[0].code() == KafkaError.NOT_COORDINATOR


def test_a_blocked_call_is_a_retriable_timeout_and_its_client_stays_referenced():
    release = threading.Event()
    client = object()
    caller = BoundedCaller("t")
    started = time.monotonic()
    with pytest.raises(KafkaException) as e:
        caller.call(client, "send_offsets_to_transaction", lambda: release.wait(30), 0.1)
    assert time.monotonic() - started < 5
    err = e.value.args[0]
    assert err.code() == KafkaError._TIMED_OUT
    assert "send_offsets_to_transaction" in err.str()
    # The copy loop retries it from the target with a new producer, without aborting on the stuck one.
    assert classify(err) is Outcome.RETRY and transient(err)
    assert any(c is client for c, _ in bounded_call._stuck)
    assert bounded_call.stuck_calls() >= 1
    # The next call runs on a fresh thread, not behind the blocked one.
    assert caller.call(object(), "f", lambda: "next", 1) == "next"
    release.set()
    deadline = time.monotonic() + 5
    while bounded_call.stuck_calls() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bounded_call.stuck_calls() == 0


def test_a_call_that_never_returns_does_not_keep_its_process_from_exiting():
    # A Spark worker whose JVM went away exits; a stuck librdkafka call must not hold it at exit.
    program = ("import threading\n"
               "from confluent_kafka import KafkaException\n"
               "from replicator.clients import bounded_call\n"
               "bounded_call.GRACE_S = 0.0\n"
               "try:\n"
               "    bounded_call.BoundedCaller('t').call(object(), 'f', threading.Event().wait, 0.1)\n"
               "except KafkaException:\n"
               "    print('gave up')\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "gave up"


def test_a_callers_helper_thread_ends_with_the_caller():
    def helpers() -> int:  # other tests' threads may end meanwhile: count this test's own
        return sum(t.name == "bounded-ends" for t in threading.enumerate())

    for _ in range(20):  # callers built one after another in one process (tests; Spark worker reuse)
        caller = bounded_call.BoundedCaller("ends")
        assert caller.call(object(), "f", lambda: 1, 1.0) == 1
    del caller
    gc.collect()
    deadline = time.monotonic() + 5
    while helpers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert helpers() == 0
