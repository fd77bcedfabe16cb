"""Which source topics are replicated: include regexes, exclude regexes (exclude wins), internals never."""

from __future__ import annotations

import re

# Never replicated whatever the include says: broker internals (`__consumer_offsets`,
# `__transaction_state`, ...), Connect/Streams/MirrorMaker 2 internals and MM2 replica topics. The
# replicator itself keeps no topics of its own (its offsets live in a consumer group).
ALWAYS_EXCLUDED = (r"__.*", r".*[-.]internal", r".*\.replica")
NOT_INCLUDED = "not matched by the include regex"


class TopicFilter:
    def __init__(self, include: str, exclude: tuple[str, ...] = ()) -> None:
        self._include = re.compile(include)
        self._internal = [re.compile(p) for p in ALWAYS_EXCLUDED]
        self._exclude = [re.compile(p) for p in exclude]

    def accepts(self, topic: str) -> bool:
        return self.reason(topic) is None

    def reason(self, topic: str) -> str | None:
        """Why `topic` is not replicated (for the dry run), or None when it is."""
        if internal := next((p for p in self._internal if p.fullmatch(topic)), None):
            return f"internal topic (always excluded: {internal.pattern})"
        if excluded := next((p for p in self._exclude if p.fullmatch(topic)), None):
            return f"excluded by {excluded.pattern}"
        if self._include.fullmatch(topic) is None:
            return NOT_INCLUDED
        return None
