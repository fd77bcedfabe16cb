"""What a shard task counts of its copy, for the driver's metrics and progress line."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CopyStats:
    records: int = 0
    bytes: int = 0
    transactions: int = 0
    aborted: int = 0
    fenced: int = 0
    producer_recreations: int = 0
    data_loss_events: int = 0
    refreshed: int = 0  # idle partitions whose unchanged offsets were re-committed
    source_rewinds: int = 0  # the source consumer went back below the copy position (records dropped)
    source_consumer_restarts: int = 0  # the source consumer stopped fetching and was replaced (fetch_watch)
    transaction_seconds: list[float] = field(default_factory=list)
    latency_seconds: list[float] = field(default_factory=list)
    # "topic|partition" -> [records, bytes, next source offset, commit unix time]
    partitions: dict[str, list] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def empty(self) -> bool:
        return not (self.transactions or self.aborted or self.fenced or self.producer_recreations
                    or self.data_loss_events or self.source_rewinds or self.source_consumer_restarts)
