"""A batch verify cannot read (a checksum that fails, a codec this install lacks) ends the audit
with one line naming the cluster, partition and offset, not a traceback."""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka.errors import CorruptRecordError

from replicator.commands.verify import VerifyError, _Side


class _Unreadable:
    def assign(self, tps) -> None:
        pass

    def seek(self, tp, offset: int) -> None:
        self.at = offset

    def position(self, tp) -> int:
        return self.at

    def poll(self, timeout_ms: int):
        raise CorruptRecordError("Record is corrupt (stored crc = 1, computed crc = 2)")


def test_an_unreadable_batch_is_named_by_cluster_partition_and_offset():
    side = object.__new__(_Side)
    side.role, side.consumer = "target", _Unreadable()
    with pytest.raises(VerifyError, match=r"cannot read target orders\[3\] at offset 40: .*corrupt"):
        list(side.read(TopicPartition("orders", 3), 40, 90))
