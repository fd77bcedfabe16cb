"""The garbage collector in the driver, a long-running process with a large, lasting heap.

Once the query runs, the driver holds Spark's, py4j's and the Kafka clients' modules, the topic
mappings and the per-partition lag state: ~106,000 objects at 8 partitions, ~155,000 at 5,000.
Every full collection walked all of it again (~130 ms at 5,000 partitions; BENCHMARKS.md, "The
driver's garbage collector"). What is there by then does not become garbage, so it is taken out of
the collector's view once (`gc.freeze()`), and full collections, which then walk only what came
later, are made rarer.

Not in the shard tasks' Python workers: freezing there removed their full collections (10 in
37 s at 50-100k records/s of 100 B, up to ~300 ms each) but cost 35-50 % more CPU per steady-state
step, for a reason not found yet (same section).
"""

from __future__ import annotations

import gc

# Collections of the middle generation per full collection (CPython's default: 10). A lag lookup
# over 5,000 partitions allocates enough short-lived objects for several of them per progress tick,
# and CPython's other condition for a full collection (the survivors since the last one reach a
# quarter of what it kept) is soon met once the lasting heap is frozen: that heap is small then.
FULL_COLLECTION_EVERY = 100


def settle() -> None:
    """Frees what is garbage now, then freezes the rest; once per process (later calls do nothing).
    Objects that become garbage later are still freed by their reference counts; only reference
    cycles among the frozen ones would stay."""
    if gc.get_freeze_count():
        return
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
