import gc
import weakref

import pytest

from replicator.engine import heap


@pytest.fixture
def fresh_collector(monkeypatch):
    threshold = gc.get_threshold()
    gc.unfreeze()
    monkeypatch.setattr(heap, "_settled", False)
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settle_freezes_the_heap_once_and_makes_full_collections_rarer(fresh_collector):
    young, middle, _ = gc.get_threshold()
    kept = [[i] for i in range(1000)]  # a lasting heap: taken out of full collections
    heap.settle()
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)
    assert gc.get_threshold() == (young, middle, heap.FULL_COLLECTION_EVERY)

    later = [[i] for i in range(1000)]  # what comes later is collected as usual
    heap.settle()
    # Not `== frozen`: a frozen object is still freed by its reference count, and threads that
    # earlier tests in this process left running (client pollers, servers) do free some meanwhile.
    assert gc.get_freeze_count() <= frozen
    assert later


def test_settle_frees_garbage_cycles_instead_of_freezing_them(fresh_collector):
    class Node:
        pass

    gc.disable()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle only the collector can free
        gone = weakref.ref(a)
        del a, b
        heap.settle()
        assert gone() is None
    finally:
        gc.enable()


def _collections_while_reading(batches: int, batch: int) -> list[int]:
    """The generations collected while a loop reads `batches` batches of `batch` tracked objects
    (a read builds its whole batch before the previous one is dropped, as the copy loop does)."""
    seen: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        msgs: list = []
        for _ in range(batches):
            msgs = [[i] for i in range(batch)]  # the next read, while the last batch is still held
        del msgs
    finally:
        gc.callbacks.remove(count)
    return seen


def test_spare_batches_lets_read_batches_die_without_a_collection(fresh_collector):
    gc.set_threshold(700, 10, 10)  # CPython's defaults (a copier made earlier in this process raised them)
    assert len(_collections_while_reading(50, 10_000)) > 100  # CPython's defaults: ~14 per batch

    heap.spare_batches(10_000)
    assert gc.get_threshold()[0] == 10_000 * heap.YOUNG_BATCHES
    # At most a couple, not none: other threads of this process allocate on the same count.
    assert len(_collections_while_reading(50, 10_000)) <= 2


def test_spare_batches_never_lowers_a_higher_threshold(fresh_collector):
    gc.set_threshold(1_000_000, 10, 10)
    heap.spare_batches(10_000)
    assert gc.get_threshold() == (1_000_000, 10, 10)
