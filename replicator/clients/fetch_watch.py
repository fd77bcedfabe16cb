"""A source consumer that stops fetching is noticed and replaced by the shard task that owns it.

librdkafka's `assign()` consumers can go silent after a broker restart: connected, no error, no
record, while the partition fills up behind them (confluentinc/librdkafka#5153, open; the chaos
harness's own reader froze that way twice, docs/reliability.md). A shard task would then copy nothing
of those partitions until it ends (`batch_duration_seconds`, 5 minutes by default): a recovery
point minutes old exactly after a broker incident, with lag the only symptom.

The copy loop knows each partition's copy position. A partition whose position has not moved for a
whole window is asked for the source's end (its last stable offset, one batched ListOffsets); one
behind that end while nothing arrived for the window has a consumer that stopped fetching it, and
the task replaces the consumer at its positions. A fetch that is merely slow (a large catch-up
rotating through thousands of partitions) can look the same, so each replacement doubles the window
until a check finds nothing stalled: a false alarm costs a reconnect, never a starved partition.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

WINDOW_S = 60.0  # a partition behind the source's end that moved nowhere this long is stalled
MAX_WINDOW_S = 480.0
# The loop turns every 0.2 s when idle, or after a commit; a longer gap means it stood elsewhere (a
# full producer queue while the target is down, a slow commit), and then positions stood still
# because nothing read them, not because nothing was fetched: the window starts again.
BLOCKED_S = 10.0


class FetchWatch:
    """Which partitions stood still for a whole window; the caller asks the source about those."""

    def __init__(self, now: float, window_s: float = WINDOW_S, max_window_s: float = MAX_WINDOW_S) -> None:
        self.base_s, self.max_window_s = window_s, max(window_s, max_window_s)
        self.window_s = window_s
        self._check_at = now + window_s
        self._turned = now
        self._seen: dict[Hashable, int] = {}

    def restart(self, positions: Mapping[Hashable, int], now: float) -> None:
        """A (new) consumer was assigned at `positions`: the window starts now."""
        self._seen = dict(positions)
        self._check_at = now + self.window_s
        self._turned = now

    def due(self, now: float) -> bool:
        """Called on every turn of the copy loop."""
        if now - self._turned > BLOCKED_S:
            self._check_at = max(self._check_at, now + self.window_s)
        self._turned = now
        return now >= self._check_at

    def unmoved(self, positions: Mapping[Hashable, int], now: float) -> list[Hashable]:
        """The partitions whose position is what it was a window ago (only ones seen then: a partition
        that joined since has its own window ahead). The next window starts now."""
        still = [k for k, offset in positions.items() if self._seen.get(k) == offset]
        self._seen = dict(positions)
        self._check_at = now + self.window_s
        return still

    def judged(self, stalled: bool) -> None:
        """After the source was asked: a stall widens the window (see the module's note), a clean
        check brings it back."""
        self.window_s = min(self.window_s * 2, self.max_window_s) if stalled else self.base_s


def stalled(positions: Mapping[Hashable, int], source_ends: Mapping[Hashable, int]) -> list[Hashable]:
    """Partitions whose source end (an answer, not an error) lies beyond their copy position."""
    return [k for k, offset in positions.items() if offset >= 0 and source_ends.get(k, -1) > offset]
