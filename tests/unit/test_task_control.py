"""The driver <-> shard task line, over real loopback sockets: live stats in, "end now" out."""

from __future__ import annotations

import socket

from replicator.engine.task_control import ControlServer, DriverLink


def test_stats_reach_the_driver_and_only_the_running_batch_is_ended():
    received = []
    server = ControlServer(received.append)
    try:
        old = DriverLink(f"127.0.0.1:{server.port}", batch=3, shard=0)
        assert old.report({"records": 5, "transactions": 1})
        assert not old.stop_requested()
        server.end_running_batches()  # partitions changed: batch 3 must end, a later one not
        old._last = 0.0
        assert old.stop_requested()
        new = DriverLink(f"127.0.0.1:{server.port}", batch=4, shard=1)
        assert not new.stop_requested()
        server.stop()
        new._last = 0.0
        assert new.stop_requested()
        assert received == [{"batch": 3, "shard": 0, "records": 5, "transactions": 1}]  # says whose they are
        assert server.records == 5 and server.transactions == 1 and server.batches == 0
        new.report({"records": 2, "transactions": 1})
        server.batch_ended(3, 300.5)  # Spark finished batch 3: one event with what its tasks committed
        assert server.batches == 1
        assert received[-1] == {"batch": 3, "batches": 1, "batch_records": 5, "batch_seconds": 300.5}
        server.batch_ended(4, 2.0)
        assert received[-1] == {"batch": 4, "batches": 1, "batch_records": 2, "batch_seconds": 2.0}
        assert server.records == 7 and server.transactions == 2  # a batch's end adds none of its own
        old.close()
        new.close()
    finally:
        server.close()


def test_a_task_that_cannot_reach_the_driver_keeps_its_stats_and_copies_on():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    link = DriverLink(f"127.0.0.1:{port}", batch=1, shard=0)
    assert not link.report({"records": 1})  # not delivered: the caller keeps the stats
    assert not link.stop_requested()  # no early stop without the driver; the batch deadline ends it
    assert not DriverLink("", batch=1, shard=0).report({"records": 1})


def test_a_starting_task_learns_the_highest_offsets_committed_in_this_run():
    server = ControlServer()
    try:
        a = DriverLink(f"127.0.0.1:{server.port}", batch=1, shard=0)
        a.report({"records": 3, "partitions": {"t|0": [3, 30, 120, 1.0], "t|1": [0, 0, 40, 1.0]}})
        a.report({"records": 1, "partitions": {"t|0": [1, 10, 121, 2.0]}})
        b = DriverLink(f"127.0.0.1:{server.port}", batch=2, shard=0)
        assert b.floors(["t|0", "t|1", "t|2"]) == {"t|0": 121, "t|1": 40}  # never heard of t|2
        server.new_query()  # a restarted query resumes from the same group: the floors stay
        assert b.floors(["t|0"]) == {"t|0": 121}
        assert DriverLink("", batch=2, shard=0).floors(["t|0"]) == {}  # no line: no floors
        a.close()
        b.close()
    finally:
        server.close()


def test_the_pre_flight_read_seeds_the_floors_and_never_lowers_them():
    server = ControlServer()
    try:
        server.seed_floors({"t|0": 100, "t|1": -1})  # -1: nothing committed yet, no floor
        a = DriverLink(f"127.0.0.1:{server.port}", batch=1, shard=0)
        assert a.floors(["t|0", "t|1"]) == {"t|0": 100}
        a.report({"records": 1, "partitions": {"t|0": [1, 10, 140, 1.0]}})
        server.seed_floors({"t|0": 90})
        assert a.floors(["t|0"]) == {"t|0": 140}
        a.close()
    finally:
        server.close()


def test_the_driver_takes_settled_partitions_only_from_tasks_it_hears_from(monkeypatch):
    from replicator.engine import task_control

    clock = [100.0]
    monkeypatch.setattr(task_control.time, "monotonic", lambda: clock[0])
    server = ControlServer()
    try:
        a = DriverLink(f"127.0.0.1:{server.port}", batch=1, shard=0)
        b = DriverLink(f"127.0.0.1:{server.port}", batch=1, shard=1)
        assert a.report(None, {"t|0": 10, "t|1": 7})
        assert b.report({"records": 1}, {"u|0": 3})
        assert server.settled() == {("t", 0): 10, ("t", 1): 7, ("u", 0): 3}
        a.report(None, {"t|1": -1, "t|0": 12})  # t|1 got records, t|0 settled further on
        assert server.settled() == {("t", 0): 12, ("u", 0): 3}
        clock[0] += task_control.SETTLED_FRESH_S - 1
        a._last = 0.0
        a.stop_requested()  # a running task exchanges every half second
        clock[0] += 2  # b has been silent longer than SETTLED_FRESH_S (ended, hung, retrying)
        assert server.settled() == {("t", 0): 12}
        b.report(None, {"u|1": 4})  # heard from again: only what it says anew counts
        assert server.settled() == {("t", 0): 12, ("u", 1): 4}
        c = DriverLink(f"127.0.0.1:{server.port}", batch=2, shard=0)  # the next batch's task
        c.report(None, {"t|0": -1})  # a claim of the previous task, withdrawn by the new owner: ignored
        assert server.settled() == {("t", 0): 12, ("u", 1): 4}
        c.report(None, {"t|0": 15})
        c.report(None, {"t|0": -1})
        assert server.settled() == {("u", 1): 4}
        c.report(None, {"t|0": 16})
        c.close()  # the task ended: until the next one says so, nothing reads its partitions
        wait_until_true(lambda: server.settled() == {("u", 1): 4})
        server.new_query()  # a restarted query: nothing is taken from the failed one's tasks
        assert server.settled() == {}
        for link in (a, b):
            link.close()
    finally:
        server.close()


def wait_until_true(check, timeout: float = 5.0) -> None:
    import time as real_time

    deadline = real_time.perf_counter() + timeout
    while not check():
        assert real_time.perf_counter() < deadline, "not within the timeout"
        real_time.sleep(0.01)
