"""Which source topics are replicated: include regex, exclude regexes (exclude wins), internals never."""

from __future__ import annotations

import re

# Never replicated whatever the include says: broker internals, Connect/Streams internals.
ALWAYS_EXCLUDED = (r"__.*", r".*[-.]internal", r".*\.replica")


class TopicFilter:
    def __init__(self, include: str, exclude: tuple[str, ...] = ()) -> None:
        self._include = re.compile(include)
        self._exclude = [re.compile(p) for p in (*ALWAYS_EXCLUDED, *exclude)]

    def accepts(self, topic: str) -> bool:
        if any(p.fullmatch(topic) for p in self._exclude):
            return False
        return self._include.fullmatch(topic) is not None
