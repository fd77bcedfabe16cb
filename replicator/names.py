"""Every name the replicator puts on a cluster, spelled once (as MirrorMaker 2's ReplicationPolicy
owns its internal names): ACLs, pre-flight checks, the engine and the groups features all ask here,
so a grant, a check and the client that needs it can never disagree on a name.

Job `orders-dr` with source alias `east` owns, on the target:
- `__replicator.orders-dr`: the offsets ("fake") group, unless `offsets_group` names another;
- `orders-dr-shard-<n>`: one transactional id per shard (ACLs grant the prefix `orders-dr-shard-`);
- `__replicator.orders-dr.xlate`, `.checkpoints`, `.promoted`: the translation index, the group
  checkpoints and the promotion marker (`__`-prefixed: never selected for replication, so a reverse
  job does not copy them back);
- `east.checkpoints.internal`: MirrorMaker 2's checkpoints topic (`mm2_compatible_checkpoints`);
on the source `__replicator.orders-dr.target-cluster`: the group whose one offset pins the target's
cluster id (replicator.engine.cluster_identity);
and on both clusters the group ids of readers that never join or commit: `orders-dr.source-reader`
(source consumer) and `orders-dr.translator` (translation and checkpoint readers).

Plain strings in and out, no config: `config` itself may ask here for the default offsets group.
"""

from __future__ import annotations

import re

INTERNAL_PREFIX = "__replicator."
_TRANSACTIONAL_INFIX = "-shard-"
_SOURCE_READER_SUFFIX = ".source-reader"
_TRANSLATOR_SUFFIX = ".translator"


def offsets_group(job_name: str) -> str:
    """The default offsets group: the copied source offsets, committed with each transaction."""
    return f"{INTERNAL_PREFIX}{job_name}"


def transactional_id_prefix(job_name: str) -> str:
    """What every transactional id of the job starts with (the PREFIXED ACL)."""
    return f"{job_name}{_TRANSACTIONAL_INFIX}"


def shard_transactional_id(job_name: str, shard: int) -> str:
    return f"{transactional_id_prefix(job_name)}{shard}"


def parse_shard_transactional_id(job_name: str, transactional_id: str) -> int | None:
    """The shard number if the id is one of job `job_name`'s ids; None otherwise.

    Exact, not a prefix test: job `a`'s ids must not claim job `a-shard-x`'s (`a-shard-x-shard-0`).
    """
    m = re.fullmatch(re.escape(transactional_id_prefix(job_name)) + r"(0|[1-9][0-9]*)", transactional_id)
    return int(m.group(1)) if m else None


def transactional_id_sort_key(transactional_id: str) -> tuple[str, int]:
    """Orders ids by job, then by shard number (`-shard-10` after `-shard-9`)."""
    head, _, tail = transactional_id.rpartition(_TRANSACTIONAL_INFIX)
    return (head, int(tail) if tail.isdigit() else -1)


def index_topic(job_name: str) -> str:
    """The translation index: one exact source->target offset entry per copy transaction."""
    return f"{INTERNAL_PREFIX}{job_name}.xlate"


def checkpoints_topic(job_name: str) -> str:
    """The group checkpoints and the ownership record of the group sync."""
    return f"{INTERNAL_PREFIX}{job_name}.checkpoints"


def acl_state_topic(job_name: str) -> str:
    """What the ACL sync created on the target (compacted, keyed by ACL): the only ACLs it may delete."""
    return f"{INTERNAL_PREFIX}{job_name}.acls"


def marker_topic(job_name: str) -> str:
    """The promotion marker `switchover`/`failover` write."""
    return f"{INTERNAL_PREFIX}{job_name}.promoted"


def target_pin_group(job_name: str) -> str:
    """The group on the source whose one offset records the target's cluster id (`__`: never synced
    by group sync, like the job's other groups)."""
    return f"{INTERNAL_PREFIX}{job_name}.target-cluster"


def mm2_checkpoints_topic(source_alias: str) -> str:
    """MirrorMaker 2's checkpoints topic, named after the source cluster's alias."""
    return f"{source_alias}.checkpoints.internal"


def source_reader_group(job_name: str) -> str:
    """The group.id of the source consumer (librdkafka requires one; nothing is committed to it)."""
    return f"{job_name}{_SOURCE_READER_SUFFIX}"


def translator_group(job_name: str) -> str:
    """The group.id of the translation and checkpoint readers (never joined or committed)."""
    return f"{job_name}{_TRANSLATOR_SUFFIX}"


# Full-match patterns of the reader groups of any job: never checkpointed or synced as if they were
# applications' groups (the offsets groups are covered by the `__` rule of the group filter).
READER_GROUP_PATTERNS = (f".*{re.escape(_SOURCE_READER_SUFFIX)}", f".*{re.escape(_TRANSLATOR_SUFFIX)}")
