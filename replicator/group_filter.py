"""Which source consumer groups a job looks after (checkpoints, offset sync, their ACLs).

Below groups/ and access/ alike: the group sync selects with it, and so does the ACL sync, which
must not reach up into groups/ to ask.
"""

from __future__ import annotations

import re

from replicator import names

# Never checkpointed or synced: broker, Connect and tooling internals, MirrorMaker 2's, and every
# replicator's own groups (offsets groups `__replicator.*`, and the reader groups).
INTERNAL_GROUPS = (r"__.*", r"console-consumer-.*", r"connect-.*", r"mm2-.*", *names.READER_GROUP_PATTERNS)


class GroupFilter:
    def __init__(self, include: str, exclude: tuple[str, ...] = ()) -> None:
        self._include = re.compile(include)
        self._exclude = [re.compile(p) for p in (*INTERNAL_GROUPS, *exclude)]

    def accepts(self, group: str) -> bool:
        return self._include.fullmatch(group) is not None and not any(p.fullmatch(group) for p in self._exclude)
