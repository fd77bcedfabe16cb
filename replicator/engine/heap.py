"""CPython's garbage collector, set for what each of our processes holds.

The driver is a long-running process with a large, lasting heap.
Once the query runs, the driver holds Spark's, py4j's and the Kafka clients' modules, the topic
mappings and the per-partition lag state: ~106,000 objects at 8 partitions, ~155,000 at 5,000.
Every full collection walked all of it again (~130 ms at 5,000 partitions; BENCHMARKS.md, "The
driver's garbage collector"). What is there by then does not become garbage, so it is taken out of
the collector's view once (`gc.freeze()`), and full collections, which then walk only what came
later, are made rarer.

A shard task's Python worker has the opposite problem: a short-lived heap that CPython's defaults
promote. See `spare_batches`.
"""

from __future__ import annotations

import gc

# Collections of the middle generation per full collection (CPython's default: 10). A lag lookup
# over 5,000 partitions allocates enough short-lived objects for several of them per progress tick,
# and CPython's other condition for a full collection (the survivors since the last one reach a
# quarter of what it kept) is soon met once the lasting heap is frozen: that heap is small then.
FULL_COLLECTION_EVERY = 100


_settled = False


def settle() -> None:
    """Frees what is garbage now, then freezes the rest; once per process (later calls do nothing).
    Objects that become garbage later are still freed by their reference counts; only reference
    cycles among the frozen ones would stay."""
    global _settled
    # A flag, not gc.get_freeze_count(): that walks the whole frozen list, 21 ms at 150,000 objects,
    # and the driver asks at every progress tick (0.4 % of a core of an idle job; BENCHMARKS.md).
    if _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


# How many batches' worth of net new tracked objects start a young collection in a shard worker.
YOUNG_BATCHES = 5


def spare_batches(batch: int) -> None:
    """Keeps a loop's batches of `batch` records out of the collector (a process-wide setting; it
    is only ever raised).

    CPython starts a young collection after 700 net new tracked objects, and promotes whatever is
    alive then. Every consumed record is a tracked `Message`, and a read of 10,000 builds its whole
    batch before anything of it can be freed: it ran ~14 young collections inside each read, so
    each batch was promoted, and a middle collection inside a read moved thousands of records a
    second into the old generation (7,900 `Message`s of 7,900 objects in the middle generation at
    its collection). That started a full collection of the worker's whole heap every 0.4-1.4 s,
    up to ~300 ms each with the loop stopped (BENCHMARKS.md, "the shard workers' garbage
    collector"). With the threshold above a few batches, a batch is freed by reference counting
    (which takes its objects back off the count) before a collection sees it, and collections run
    only for objects that really accumulate: garbage cycles are still collected, after more of
    them."""
    young, middle, full = gc.get_threshold()
    want = batch * YOUNG_BATCHES
    if young < want:
        gc.set_threshold(want, middle, full)
