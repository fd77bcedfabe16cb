import gc
import weakref

import pytest

from replicator.engine import heap


@pytest.fixture
def fresh_collector():
    threshold = gc.get_threshold()
    gc.unfreeze()
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
    assert gc.get_freeze_count() == frozen
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
