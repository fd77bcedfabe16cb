"""When the copy loop asks the source whether its consumer stopped fetching (clients.fetch_watch)."""

from __future__ import annotations

from replicator.clients.fetch_watch import BLOCKED_S, FetchWatch, stalled

A, B = ("t", 0), ("t", 1)


def _turn(w: FetchWatch, start: float, until: float, step: float = 0.2) -> bool:
    """Turns the loop from `start` to `until`; whether a check came due."""
    t = start
    while t < until:
        t += step
        if w.due(t):
            return True
    return False


def test_a_check_comes_due_a_window_after_the_assignment_and_names_only_partitions_that_stood_still():
    w = FetchWatch(0.0, window_s=60)
    w.restart({A: 10, B: 20}, 0.0)
    assert not _turn(w, 0.0, 59.5)
    assert w.due(60.0)
    assert w.unmoved({A: 10, B: 25}, 60.0) == [A]
    assert not w.due(60.2)  # the next window starts at the check
    assert w.unmoved({A: 10, B: 25}, 120.0) == [A, B]


def test_a_partition_that_joined_after_the_last_check_is_not_judged_yet():
    w = FetchWatch(0.0, window_s=60)
    w.restart({A: 10}, 0.0)
    assert w.unmoved({A: 11, B: 5}, 60.0) == []
    assert w.unmoved({A: 11, B: 5}, 120.0) == [A, B]


def test_a_loop_that_stood_elsewhere_starts_the_window_again():
    # Positions did not move because the loop was not reading (a full producer queue, a slow commit):
    # that says nothing about fetching.
    w = FetchWatch(0.0, window_s=60)
    w.restart({A: 10}, 0.0)
    assert not _turn(w, 0.0, 50.0)
    assert not w.due(50.0 + BLOCKED_S + 1)
    assert not _turn(w, 61.0, 120.5)
    assert w.due(121.2)


def test_each_stall_doubles_the_window_up_to_its_bound_and_a_clean_check_restores_it():
    w = FetchWatch(0.0, window_s=60, max_window_s=200)
    for expected in (120, 200, 200):
        w.judged(True)
        assert w.window_s == expected
    w.restart({A: 1}, 1000.0)
    assert not _turn(w, 1000.0, 1199.5) and w.due(1200.0)
    w.judged(False)
    assert w.window_s == 60


def test_stalled_means_behind_the_sources_answer():
    positions = {A: 10, B: 20, ("t", 2): 30, ("t", 3): -2}
    ends = {A: 10, B: 21, ("t", 3): 50}  # A at its end, B behind, t[2] unanswered, t[3] has no position yet
    assert stalled(positions, ends) == [B]
