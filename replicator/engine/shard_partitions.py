"""A shard task's partitions: the running attempt's copy state, and the floors its resume points must reach.

A task makes attempts (a failed transaction starts one over from the target's offsets); what it
learnt of its partitions outlives them: the highest next offset known committed in this run (by
this task, or by earlier tasks as the driver saw them). A job never moves its group's offset back,
so a resume point below its floor is wrong, and the partition resumes at its floor
(`ShardCopier._read_resume_points`).
"""

from __future__ import annotations

from replicator.engine.partition_copy import CopyRange, PartitionCopy
from replicator.offsets import NO_OFFSET, Committed

Key = tuple[str, int]  # (source topic, partition)


class ShardPartitions:
    def __init__(self) -> None:
        self.floors: dict[Key, int] = {}
        self.states: dict[Key, PartitionCopy] = {}  # the running attempt's; empty between attempts

    def seed_floors(self, driver_floors: dict[str, int]) -> None:
        """The driver's floors ("topic|partition" -> offset), as a task starts."""
        self.floors = {(t, int(p)): o for k, o in driver_floors.items() for t, p in [k.rsplit("|", 1)]}

    def below_floor(self, ranges: list[CopyRange], committed: dict[tuple[str, int], Committed]
                    ) -> list[tuple[CopyRange, int, int]]:
        """(range, the group's offset, its floor) of every range the group answered below its floor."""
        behind = []
        for r in ranges:
            floor = self.floors.get((r.source_topic, r.partition), NO_OFFSET)
            c = committed.get((r.target_topic, r.partition))
            if floor >= 0 and (c is None or c.offset < floor):
                behind.append((r, c.offset if c is not None else NO_OFFSET, floor))
        return behind

    def committed(self, st: PartitionCopy) -> None:
        st.committed()
        self.floors[(st.r.source_topic, st.r.partition)] = st.next

    def positions(self) -> dict[Key, int]:
        """The copy position of every unfinished partition that has one."""
        return {k: st.next for k, st in self.states.items() if not st.done and st.next >= 0}

    def settled(self) -> dict[str, int]:
        """"topic|partition" -> offset of the running attempt's settled partitions (`PartitionCopy.settled`)."""
        return {f"{k[0]}|{k[1]}": st.next for k, st in self.states.items() if st.settled()}
