"""`replicator verify`: an independent audit of a replication on live clusters.

Written with kafka-python, a second client implementation from the librdkafka one that copies the
data, so a bug shared by the writer and its checker cannot hide itself. Both sides are read
read_committed. For every replicated partition the fake group on the target says how far the copy
has committed: source records [log start, committed) must equal, one for one and in order, the
target records [log start, last target offset in the commit metadata].

Records after that pair are judged too, so that a record the replication did not write cannot hide
there. The target's last stable offset is read BEFORE the group, and the group is read "stable"
(KIP-447: the broker refuses while a transactional offset commit is pending). Every record below
that end is decided (committed or aborted). A committed one written by the replication was written
in a transaction that had already sent its offsets (TxnOffsetCommit precedes EndTxn), so the stable
group read that follows names it. Any committed record between the group's pair and that end was
therefore written by someone else: it is a violation whether or not the replicator is running.
Records of a transaction still open are past the end and are not judged.

Memory stays bounded: each side is streamed and compared as 8-byte digests of (key, value, headers,
timestamp). Only a partition that diverges is read a second time, into two arrays of digests, to
count duplicates, missing, extra and reordered records.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from replicator.clients.kafka_python_clients import client_settings
from replicator.commands.options import _load_config, connection_options
from replicator.config import ReplicatorConfig
from replicator.engine import transactional_ids
from replicator.offsets import CommitMetadata
from replicator.ops.schema_registry import Registry, RegistryError, referenced_ids, registry_behind, registry_option
from replicator.replication_policy import policy_for
from replicator.topics.filter import TopicFilter

STALL_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 30.0  # how long --quiesced waits for transaction markers still being written
_OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
class VerifyError(RuntimeError):
    """The audit itself could not run (unreachable cluster, stalled read): exit code 1."""


def digest(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None,
           timestamp: int) -> int:
    """8 bytes standing for everything replication must preserve of one record."""
    h = hashlib.blake2b(digest_size=8)
    for part in (key, value):
        h.update(b"\x00" if part is None else b"\x01" + len(part).to_bytes(4, "big") + part)
    for hk, hv in headers or ():
        name = hk.encode() if isinstance(hk, str) else hk
        h.update(b"\x02" + len(name).to_bytes(4, "big") + name)
        h.update(b"\x00" if hv is None else b"\x01" + len(hv).to_bytes(4, "big") + hv)
    h.update(b"\x03" + int(timestamp).to_bytes(8, "big", signed=True))
    return int.from_bytes(h.digest(), "big")


def value_digest(value: bytes | None) -> int:
    return int.from_bytes(hashlib.blake2b(value or b"", digest_size=8).digest(), "big")


@dataclass
class GroundTruth:
    """What a test harness knows about the source: values of aborted transactions (must never be
    visible) and values the producer saw acknowledged (must all arrive once fully replicated)."""

    aborted: set[int] = field(default_factory=set)
    acked: set[int] = field(default_factory=set)

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> GroundTruth:
        """JSON lines: `{"aborted": "<value>"}` or VerifiableProducer's `producer_send_success` lines."""
        truth = cls()
        for path in paths:
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if not line.startswith("{"):
                        continue
                    row = json.loads(line)
                    if "aborted" in row:
                        truth.aborted.add(value_digest(str(row["aborted"]).encode()))
                    elif row.get("name") == "producer_send_success":
                        truth.acked.add(value_digest(str(row["value"]).encode()))
        return truth


@dataclass
class PartitionReport:
    source_topic: str
    target_topic: str
    partition: int
    committed: int  # next source offset per the fake group; -1 when nothing was committed yet
    source_end: int  # source last stable offset
    target_bound: int  # exclusive target offset the committed range ends at
    target_end: int = -1  # target last stable offset, read before the group: the foreign-record bound
    target_start: int = 0
    lso: int = -1
    hw: int = -1
    source_records: int = 0
    target_records: int = 0
    duplicates: int = 0
    missing: int = 0
    extra: int = 0
    reordered: int = 0
    aborted_visible: int = 0
    foreign: int = 0  # committed target records after the group's pair: not written by the replication
    foreign_copies: int = 0  # ... of which copies of a replicated source record
    first_foreign: int | None = None  # target offset of the first one
    truncated_at: int = -1  # target high watermark when below the group's pair: records deleted, topic recreated
    first_divergence: dict | None = None
    note: str = ""

    @property
    def lag(self) -> int:
        return max(0, self.source_end - max(self.committed, 0))

    @property
    def open_transaction(self) -> bool:
        return self.lso < self.hw

    def violations(self) -> list[str]:
        where = f"{self.target_topic}[{self.partition}]"
        lost = "missing records"
        if self.target_start > 0:
            lost += f" (the target log starts at offset {self.target_start}: deleted on the target?)"
        out = [f"{where}: {n} {what}" for n, what in (
            (self.duplicates, "duplicate records"), (self.missing, lost),
            (self.extra, "records that are not on the source"), (self.reordered, "records out of order"),
            (self.aborted_visible, "records from aborted source transactions")) if n]
        if self.foreign:
            copies = f", {self.foreign_copies} of them copies of source records" if self.foreign_copies else ""
            out.append(f"{where}: {self.foreign} records after the replicated range (first at target offset "
                       f"{self.first_foreign}) that the replication did not write{copies}")
        if self.truncated_at >= 0:
            out.append(f"{where}: the target ends at offset {self.truncated_at}, before offset {self.target_bound} "
                       f"up to which the offsets group says the replication wrote: records deleted or topic recreated")
        if self.first_divergence and not out:
            out.append(f"{where}: target differs from source at {self.first_divergence}")
        return out


@dataclass
class Report:
    source: str
    target: str
    group: str
    partitions: list[PartitionReport] = field(default_factory=list)
    open_transactions: list[dict] = field(default_factory=list)
    hanging_transactions: list[dict] = field(default_factory=list)
    lost_acked: int | None = None  # None: not checked (replication not caught up, or no ground truth)
    violations: list[str] = field(default_factory=list)
    selected_topics: int = 0  # source topics the selection matches
    without_target: list[str] = field(default_factory=list)  # of those, the ones with no target topic yet
    source_cluster: str = ""  # the cluster ids behind the addresses
    target_cluster: str = ""

    @property
    def nothing_verified(self) -> bool:
        """No selected partition has an offset in the group: a wrong --name or --offsets-group, or a
        job that never committed. Nothing was compared, so this is not an "OK"."""
        return not any(p.committed >= 0 for p in self.partitions)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.nothing_verified

    def to_dict(self) -> dict:
        parts = []
        for p in self.partitions:
            d = asdict(p)
            d.update(lag=p.lag, open_transaction=p.open_transaction, lso_equals_hw=p.lso == p.hw)
            parts.append(d)
        totals = {k: sum(getattr(p, k) for p in self.partitions) for k in (
            "source_records", "target_records", "duplicates", "missing", "extra", "reordered",
            "aborted_visible", "foreign", "lag")}
        return {"ok": self.ok, "nothing_verified": self.nothing_verified, "source": self.source,
                "target": self.target, "source_cluster": self.source_cluster, "target_cluster": self.target_cluster,
                "group": self.group, "selected_source_topics": self.selected_topics,
                "source_topics_without_target": self.without_target, "totals": totals, "partitions": parts,
                "open_transactions": self.open_transactions, "hanging_transactions": self.hanging_transactions,
                "lost_acked": self.lost_acked, "violations": self.violations}


class _Side:
    """One cluster seen through kafka-python: an admin client and a read_committed reader."""

    def __init__(self, role: str, cfg: ReplicatorConfig) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer
        from kafka.errors import KafkaError

        self.role = role
        bootstrap = getattr(cfg, f"{role}_bootstrap_servers")
        settings = client_settings(cfg.client_properties(role), bootstrap)
        self.settings = settings
        try:
            self.admin = KafkaAdminClient(**settings)
            self.consumer = KafkaConsumer(**settings, group_id=None, enable_auto_commit=False,
                                          isolation_level="read_committed", max_poll_records=5000,
                                          auto_offset_reset="none")
            self.topics = self._describe_topics()
        except KafkaError as e:
            raise VerifyError(f"cannot reach the {role} cluster at {bootstrap}: {e}") from None

    def cluster_id(self) -> str:
        return self.admin.describe_cluster().get("cluster_id") or ""

    def compacted(self, names: Iterable[str]) -> set[str]:
        """Those of `names` whose cleanup.policy includes compact."""
        from kafka.admin import ConfigResource, ConfigResourceType
        from kafka.errors import KafkaError

        names = sorted(set(names) & set(self.topics))
        if not names:
            return set()
        try:
            found = self.admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, n, {"cleanup.policy": None}) for n in names],
                config_filter="all").get("topic", {})
        except KafkaError as e:  # DescribeConfigs is an ACL the audit may lack
            click.echo(f"note: the {self.role} topics' cleanup.policy cannot be read ({e}): compacted topics are "
                       "compared record by record", err=True)
            return set()
        return {n for n, configs in found.items()
                if "compact" in ((configs.get("cleanup.policy") or {}).get("value") or "")}

    def _describe_topics(self) -> dict[str, int]:
        meta = self.admin.describe_topics()
        return {t["name"]: len(t["partitions"]) for t in meta if not t.get("error_code")}

    def offsets(self, tps: list, committed: bool) -> dict:
        from kafka import IsolationLevel, OffsetSpec

        if not tps:
            return {}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        result = self.admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps}, isolation_level=level)
        return {tp: r.offset for tp, r in result.items()}

    def starts(self, tps: list) -> dict:
        from kafka import OffsetSpec

        if not tps:
            return {}
        return {tp: r.offset for tp, r in
                self.admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps}).items()}

    def read(self, tp, start: int, end: int, on_records=None) -> Iterator:
        """Committed records of `tp` with offsets in [start, end)."""
        if start >= end:
            return
        from kafka.errors import KafkaError

        self.consumer.assign([tp])
        self.consumer.seek(tp, start)
        last_progress = time.monotonic()
        while True:
            try:
                batch = self.consumer.poll(timeout_ms=500).get(tp, [])
            except KafkaError as e:  # a batch failing its checksum or in a codec this install lacks
                raise VerifyError(f"cannot read {self.role} {tp.topic}[{tp.partition}] at offset "
                                  f"{self.consumer.position(tp)}: {e}") from None
            for r in batch:
                if r.offset >= end:
                    return
                yield r
            if on_records and batch:
                on_records(len(batch))
            if self.consumer.position(tp) >= end:
                return
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise VerifyError(f"reading {self.role} {tp.topic}[{tp.partition}] stalled at offset "
                                  f"{self.consumer.position(tp)} (bound {end}) for {STALL_TIMEOUT_S:.0f}s")

    def stable_group_offsets(self, group: str, tps: list) -> dict:
        """OffsetFetch with require_stable (a read_committed group member-less consumer): the broker
        answers UNSTABLE_OFFSET_COMMIT, retried here, while a transactional offset commit for the
        partition is pending, so a transaction whose records are committed is always counted."""
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        reader = KafkaConsumer(**self.settings, group_id=group, enable_auto_commit=False,
                               isolation_level="read_committed")
        try:
            out = {}
            for tp in tps:
                om = reader.committed(tp, metadata=True, timeout_ms=int(STALL_TIMEOUT_S * 1000))
                if om is not None:
                    out[tp] = om
            return out
        except KafkaError as e:
            raise VerifyError(f"cannot read the offsets group {group!r} (stable) on the target: {e}") from None
        finally:
            reader.close()

    def close(self) -> None:
        self.consumer.close()
        self.admin.close()


def _record_digest(r) -> int:
    return digest(r.key, r.value, r.headers, r.timestamp)


def _lis_length(seq: Iterable[int]) -> int:
    tails: list[int] = []
    for x in seq:
        i = bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return len(tails)


def classify(source: array, target: array) -> dict[str, int]:
    """Counts of what separates two digest sequences that should be identical."""
    cs, ct = Counter(source), Counter(target)
    missing = sum(max(0, n - ct.get(d, 0)) for d, n in cs.items())
    duplicates = sum(max(0, n - cs[d]) for d, n in ct.items() if d in cs)
    extra = sum(n for d, n in ct.items() if d not in cs)
    # Order: the k-th target copy of a digest maps to its k-th source position; whatever is not on
    # the longest increasing run of those positions was delivered out of order.
    positions: dict[int, list[int]] = {}
    for i, d in enumerate(source):
        positions.setdefault(d, []).append(i)
    used: Counter = Counter()
    mapped = []
    for d in target:
        where = positions.get(d)
        if where and used[d] < len(where):
            mapped.append(where[used[d]])
            used[d] += 1
    reordered = len(mapped) - _lis_length(mapped)
    return {"missing": missing, "duplicates": duplicates, "extra": extra, "reordered": reordered}


def compare_latest(source: Iterable[tuple[int, int | None]], target: Iterable[tuple[int, int | None]],
                   source_later: set[int], target_later: set[int]) -> dict[str, int]:
    """Counts for a compacted partition, whose two logs each keep only part of what was written, on
    their own cleaners' schedules: only each key's latest record can be compared. `source`, `target`:
    (key digest, record digest, None for a tombstone) in log order over the compared ranges;
    `*_later`: key digests written past the range on that side.

    A cleaner removes a key's record only behind a later one of the same key, and all of the key's
    older records with it. So a key absent on one side is explained only by a later record of it
    past the range on that side (compacted, then that record not replicated yet or not compared),
    and two different latest records never are. A tombstone counts as absent: each side drops its
    tombstones after its own delete.retention.ms."""
    def latest(records: Iterable[tuple[int, int | None]]) -> dict[int, int]:
        state: dict[int, int | None] = {}
        for key, record in records:
            state[key] = record
        return {k: d for k, d in state.items() if d is not None}

    s, t = latest(source), latest(target)
    missing = sum(1 for k, d in s.items() if (t[k] != d if k in t else k not in target_later))
    extra = sum(1 for k, d in t.items() if (s[k] != d if k in s else k not in source_later))
    return {"missing": missing, "duplicates": 0, "extra": extra, "reordered": 0}


_NO_PAIR = 1 << 62  # a group entry without our metadata: the whole committed target counts as copied


def _decode_group(offsets: Mapping) -> dict:
    # librdkafka stores the metadata string with its C terminator; kafka-python hands it back.
    return {tp: (om.offset, CommitMetadata.decode((om.metadata or "").rstrip("\x00")))
            for tp, om in offsets.items() if om.offset >= 0}


def _pair_end(committed: int, meta: CommitMetadata | None) -> int:
    """Exclusive target offset up to which the group says the replication wrote."""
    if committed < 0:
        return 0
    if meta is None:
        return _NO_PAIR
    return meta.target_offset + 1 if meta.target_offset >= 0 else 0


class Auditor:
    def __init__(self, cfg: ReplicatorConfig, truth: GroundTruth | None = None, quiesced: bool = False,
                 require_caught_up: bool = False, progress: bool = True) -> None:
        self.cfg = cfg
        self.truth = truth
        self.quiesced = quiesced
        self.require_caught_up = require_caught_up
        self.progress = progress

    def run(self) -> Report:
        from kafka import TopicPartition

        cfg = self.cfg
        report = Report(cfg.source_bootstrap_servers, cfg.target_bootstrap_servers, cfg.group)
        source = _Side("source", cfg)
        target = _Side("target", cfg)
        try:
            report.source_cluster, report.target_cluster = source.cluster_id(), target.cluster_id()
            plan = self._plan(source, target, report)
            src_tps = [TopicPartition(s, p) for s, _, p in plan]
            dst_tps = [TopicPartition(t, p) for _, t, p in plan]
            # The target's end BEFORE the group: every committed record below it that the group does
            # not account for was written by someone else (see the module docstring).
            target_ends = target.offsets(dst_tps, committed=True)
            group = self._group(target, dst_tps, target_ends)
            target_hws = target.offsets(dst_tps, committed=False)
            source_ends = source.offsets(src_tps, committed=True)
            source_starts, target_starts = source.starts(src_tps), target.starts(dst_tps)
            for (s, t, p), stp, dtp in zip(plan, src_tps, dst_tps, strict=True):
                committed, meta = group.get(dtp, (-1, None))
                part = PartitionReport(s, t, p, committed, source_ends[stp],
                                       self._target_bound(committed, meta, target, dtp),
                                       target_end=target_ends[dtp], target_start=target_starts[dtp])
                if target_hws[dtp] < part.target_bound:
                    part.truncated_at = target_hws[dtp]
                report.partitions.append(part)
            self._compare_all(report, source, target, source_starts)
            self._transactions(report, target, dst_tps)
            self._judge(report)
        finally:
            source.close()
            target.close()
        return report

    def _plan(self, source: _Side, target: _Side, report: Report) -> list[tuple[str, str, int]]:
        topic_filter = TopicFilter(self.cfg.topics, self.cfg.topics_exclude)
        policy = policy_for(self.cfg)
        plan = []
        for name, count in sorted(source.topics.items()):
            if not topic_filter.accepts(name) or policy.is_remote(name):
                continue
            target_name = policy.target_topic(name)
            have = target.topics.get(target_name, 0)
            report.selected_topics += 1
            if not have:
                report.without_target.append(name)
            plan += [(name, target_name, p) for p in range(min(count, have))]
        return plan

    def _group(self, target: _Side, tps: list, ends: dict) -> dict:
        """{target tp: (next source offset, metadata)}. A fast plain read, then a stable re-read of
        the partitions where records past the pair it names sit below the target's end."""
        from kafka.errors import KafkaError

        try:
            offsets = target.admin.list_group_offsets(self.cfg.group).get(self.cfg.group, {})
        except KafkaError as e:
            raise VerifyError(f"cannot read the offsets group {self.cfg.group!r} on the target: {e}") from None
        group = _decode_group(offsets)
        unsettled = [tp for tp in tps if _pair_end(*group.get(tp, (-1, None))) < ends[tp]]
        if unsettled:
            group.update(_decode_group(target.stable_group_offsets(self.cfg.group, unsettled)))
        return group

    @staticmethod
    def _target_bound(committed: int, meta: CommitMetadata | None, target: _Side, tp) -> int:
        end = _pair_end(committed, meta)
        # No metadata (a group not written by this replicator): judge everything committed so far.
        return target.offsets([tp], committed=True)[tp] if end == _NO_PAIR else end

    def _compare_all(self, report: Report, source: _Side, target: _Side, source_starts: dict) -> None:
        from kafka import TopicPartition

        def tail(p: PartitionReport) -> tuple[int, int]:
            # Committed records past the pair and below the end read before the group are foreign.
            return max(p.target_bound, p.target_start), p.target_end

        work = sum(max(0, p.committed - source_starts[TopicPartition(p.source_topic, p.partition)]) +
                   max(0, p.target_bound - p.target_start) for p in report.partitions if p.committed >= 0)
        work += sum(max(0, b - a) for a, b in map(tail, report.partitions))
        seen_acked: set[int] = set()
        compacted = (source.compacted(p.source_topic for p in report.partitions),
                     target.compacted(p.target_topic for p in report.partitions))
        with click.progressbar(length=max(work, 1), label="verifying", file=sys.stderr,
                               hidden=not self.progress) as bar:
            for p in report.partitions:
                stp, dtp = TopicPartition(p.source_topic, p.partition), TopicPartition(p.target_topic, p.partition)
                foreign = self._foreign(p, target, dtp, *tail(p), bar.update)
                if p.committed < 0:
                    p.note = "nothing committed in the offsets group yet"
                    continue
                src = (source, stp, source_starts[stp], p.committed)
                bound = p.target_bound if p.truncated_at < 0 else min(p.target_bound, p.truncated_at)
                dst = (target, dtp, p.target_start, bound)
                if source_starts[stp] > 0:
                    p.note = f"source log starts at {source_starts[stp]} (retention): compared from there"
                self._compare(p, src, dst, bar.update, seen_acked, foreign,
                              p.source_topic in compacted[0] or p.target_topic in compacted[1])
        if self.truth is not None and self.truth.acked:
            caught_up = all(p.committed >= p.source_end for p in report.partitions)
            report.lost_acked = len(self.truth.acked - seen_acked) if caught_up else None

    def _foreign(self, p: PartitionReport, target: _Side, tp, start: int, end: int, tick) -> Counter:
        """Digests of the committed target records in [start, end): none of them is the replication's."""
        aborted = self.truth.aborted if self.truth else set()
        found: Counter = Counter()
        for r in target.read(tp, start, end, tick):
            if p.first_foreign is None:
                p.first_foreign = r.offset
            p.foreign += 1
            found[_record_digest(r)] += 1
            if value_digest(r.value) in aborted:
                p.aborted_visible += 1
        return found

    def _compare(self, p: PartitionReport, src: tuple, dst: tuple, tick, seen_acked: set[int],
                 foreign: Counter, compacted: bool = False) -> None:
        """One streaming pass in lockstep; a second pass into digest arrays only on divergence (into
        each key's latest record where a side is compacted, see `compare_latest`)."""
        aborted = self.truth.aborted if self.truth else set()
        acked = self.truth.acked if self.truth else set()
        src_side, stp, s0, s1 = src
        dst_side, dtp, t0, t1 = dst
        s_iter, t_iter = src_side.read(stp, s0, s1, tick), dst_side.read(dtp, t0, t1, tick)
        diverged = False
        copied: set[int] = set()  # foreign records that repeat a replicated source record
        while True:
            a, b = next(s_iter, None), next(t_iter, None)
            if a is None and b is None:
                break
            if b is not None:
                p.target_records += 1
                vd = value_digest(b.value)
                if vd in aborted:
                    p.aborted_visible += 1
                if vd in acked:
                    seen_acked.add(vd)
            if a is not None:
                p.source_records += 1
                if foreign and _record_digest(a) in foreign:
                    copied.add(_record_digest(a))
            if not diverged and (a is None or b is None or _record_digest(a) != _record_digest(b)):
                diverged = True
                p.first_divergence = {"source_offset": a.offset if a else None,
                                      "target_offset": b.offset if b else None}
        p.foreign_copies = sum(foreign[d] for d in copied)
        if diverged and compacted:
            def keyed(side, tp, start, end):
                return ((value_digest(r.key), None if r.value is None else _record_digest(r))
                        for r in side.read(tp, start, end))

            def later(side, tp, start):
                return {value_digest(r.key) for r in side.read(tp, start, side.offsets([tp], committed=True)[tp])}

            found = compare_latest(keyed(src_side, stp, s0, s1), keyed(dst_side, dtp, t0, t1),
                                   later(src_side, stp, s1), later(dst_side, dtp, t1))
            for k, v in found.items():
                setattr(p, k, v)
            if not any(found.values()):
                p.first_divergence = None  # where the logs first differ says nothing of a compacted one
            p.note = ("compacted: the logs differ record by record (each side's cleaner runs on its own), so each "
                      "key's latest record was compared" + (f"; {p.note}" if p.note else ""))
        elif diverged:
            s_digests = array("Q", (_record_digest(r) for r in src_side.read(stp, s0, s1)))
            t_digests = array("Q", (_record_digest(r) for r in dst_side.read(dtp, t0, t1)))
            for k, v in classify(s_digests, t_digests).items():
                setattr(p, k, v)

    def _transactions(self, report: Report, target: _Side, tps: list) -> None:
        """LSO vs HW per partition, and the target's open and hanging transactions (KIP-664)."""
        deadline = time.monotonic() + (SETTLE_TIMEOUT_S if self.quiesced else 0)
        while True:
            lso, hw = target.offsets(tps, committed=True), target.offsets(tps, committed=False)
            if all(lso[tp] == hw[tp] for tp in tps) or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        by_tp = {(tp.topic, tp.partition): tp for tp in tps}
        for p in report.partitions:
            tp = by_tp[(p.target_topic, p.partition)]
            p.lso, p.hw = lso[tp], hw[tp]
        # Read before the coordinators and again after them: a transaction the job began between two
        # reads is open on its partition but was not in the coordinator's answer yet, and one that
        # ended meanwhile was open on the partition while its coordinator had moved on. A transaction
        # open at both partition reads with the same start offset spans the coordinator read, which
        # must then have listed it (a partition joins its transaction at the coordinator before its
        # first record is appended); only such a one is judged (see `hanging_on_partitions`).
        before = _open_on_partitions(target, tps)
        listings = [t for rows in target.admin.list_transactions().values() for t in rows
                    if transactional_ids.parse(self.cfg.name, t.transactional_id) is not None]
        described = target.admin.describe_transactions([t.transactional_id for t in listings]) if listings else {}
        now_ms = time.time() * 1000
        active: dict[int, set[tuple[str, int]]] = {}  # producer id -> partitions of its open transaction
        for txn_id, d in sorted(described.items()):
            if d.state.value not in _OPEN_STATES:
                continue
            parts = sorted(f"{tp.topic}[{tp.partition}]" for tp in d.topic_partitions)
            row = {"transactional_id": txn_id, "state": d.state.value, "producer_id": d.producer_id,
                   "age_ms": int(now_ms - d.transaction_start_time_ms), "timeout_ms": d.transaction_timeout_ms,
                   "partitions": parts}
            report.open_transactions.append(row)
            active[d.producer_id] = {(tp.topic, tp.partition) for tp in d.topic_partitions}
            if d.transaction_start_time_ms > 0 and row["age_ms"] > d.transaction_timeout_ms + 60_000:
                report.hanging_transactions.append({**row, "reason": "older than its transaction timeout"})
        # A partition holding an open transaction its coordinator no longer knows about is hanging:
        # nothing will ever write its marker, and read_committed readers stop at it forever.
        after = _open_on_partitions(target, tps)
        report.hanging_transactions += hanging_on_partitions(before, after, active)

    def _judge(self, report: Report) -> None:
        v = report.violations
        for p in report.partitions:
            v += p.violations()
            if self.quiesced and p.open_transaction:
                v.append(f"{p.target_topic}[{p.partition}]: last stable offset {p.lso} < high watermark {p.hw} "
                         f"with the replicator stopped")
            if self.require_caught_up and p.lag:
                v.append(f"{p.target_topic}[{p.partition}]: offsets group at {p.committed}, source end "
                         f"{p.source_end}")
        for h in report.hanging_transactions:
            v.append(f"hanging transaction: {h}")
        if self.quiesced:
            v += [f"open transaction with the replicator stopped: {t}" for t in report.open_transactions]
        if report.lost_acked:
            v.append(f"{report.lost_acked} values acknowledged to the source producer are not on the target")



def _open_on_partitions(target: _Side, tps: list) -> dict[tuple[str, int, int], tuple[int, int]]:
    """(topic, partition, producer id) -> (producer epoch, start offset) of every transaction open on
    the partitions, as their leaders see it (KIP-664 DescribeProducers)."""
    if not tps:
        return {}
    return {(tp.topic, tp.partition, prod.producer_id): (prod.producer_epoch, prod.current_transaction_start_offset)
            for tp, state in target.admin.describe_producers(tps).items() for prod in state.active_producers
            if prod.current_transaction_start_offset >= 0}


def hanging_on_partitions(before: dict[tuple[str, int, int], tuple[int, int]],
                          after: dict[tuple[str, int, int], tuple[int, int]],
                          coordinators: dict[int, set[tuple[str, int]]]) -> list[dict]:
    """Transactions open on a partition at both reads (`before` and `after` the coordinators were
    asked) with the same start offset, whose coordinator did not list that partition in an open
    transaction of that producer (`coordinators`: producer id -> partitions)."""
    hanging = []
    for (topic, partition, pid), (epoch, start) in sorted(after.items()):
        if before.get((topic, partition, pid), (None, None))[1] != start:
            continue  # began (or began again) while the coordinators were read: not judged this time
        if (topic, partition) in coordinators.get(pid, set()):
            continue
        hanging.append({"partition": f"{topic}[{partition}]", "producer_id": pid, "producer_epoch": epoch,
                        "start_offset": start,
                        "reason": "open on the partition, unknown to its transaction coordinator"})
    return hanging


def _summary(report: Report) -> str:
    d = report.to_dict()
    t = d["totals"]
    lines = [f"source: cluster {report.source_cluster or '?'} at {report.source}; "
             f"target: cluster {report.target_cluster or '?'} at {report.target}",
             f"offsets group {report.group!r}: {len(report.partitions)} partitions, "
             f"{t['source_records']} source records compared with {t['target_records']} target records",
             f"  duplicates {t['duplicates']}, missing {t['missing']}, extra {t['extra']}, "
             f"after the replicated range {t['foreign']}, "
             f"reordered {t['reordered']}, from aborted transactions {t['aborted_visible']}",
             f"  not yet replicated: {t['lag']} source offsets; partitions with LSO < HW: "
             f"{sum(1 for p in report.partitions if p.open_transaction)}",
             f"  open transactions: {len(report.open_transactions)}, hanging: {len(report.hanging_transactions)}"]
    if report.lost_acked is not None:
        lines.append(f"  acknowledged source values missing on the target: {report.lost_acked}")
    lines += [f"  note {p.target_topic}[{p.partition}]: {p.note}" for p in report.partitions if p.note]
    lines += [f"VIOLATION {v}" for v in report.violations]
    if report.violations:
        lines.append(f"FAILED: {len(report.violations)} violations")
    elif report.nothing_verified:
        lines.append(f"NOTHING VERIFIED: {_why_nothing(report)}")
    else:
        lines.append("OK: the target holds exactly the source's committed records")
    return "\n".join(lines)


def _why_nothing(report: Report) -> str:
    if not report.selected_topics:
        return "no source topic matches the selection (--topics, --topics-exclude)"
    why = (f"the offsets group {report.group!r} holds no offset for the {len(report.partitions)} selected "
           f"partitions on the target")
    if report.without_target:
        shown = ", ".join(report.without_target[:5]) + (", ..." if len(report.without_target) > 5 else "")
        why += (f"; {len(report.without_target)} of {report.selected_topics} selected source topics have no "
                f"target topic ({shown})")
    return why + ". Is --name (or --offsets-group) the job's? A running job commits within seconds of copying."


def _schema_registry_behind(cfg: ReplicatorConfig, report: Report, registry: Registry) -> list[str]:
    from replicator.clients.kafka_clients import target_probe

    consumer = target_probe(cfg)
    try:
        uses = referenced_ids(consumer, [(p.target_topic, p.partition) for p in report.partitions])
    finally:
        consumer.close()
    return registry_behind(uses, registry)


@click.command()
@connection_options
@click.option("--ground-truth", type=click.Path(exists=True, dir_okay=False), multiple=True,
              help="Repeatable. JSON lines: {\"aborted\": VALUE} (must never be visible) and VerifiableProducer "
                   "producer_send_success lines (must all arrive once replication caught up).")
@click.option("--quiesced", is_flag=True,
              help="The replicator is stopped: any open transaction or LSO < HW on the target is a violation.")
@click.option("--require-caught-up", is_flag=True,
              help="Offsets group behind the source's end is a violation (source producers stopped).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: when a tty).")
@click.option("--target-schema-registry", "registry", metavar="URL", callback=registry_option,
              help="Also a violation: a target record (key or value in the Confluent wire format) whose schema id "
                   "this registry (Confluent API base URL) does not have.")
def verify(config_file: str | None, ground_truth: tuple[str, ...], quiesced: bool, require_caught_up: bool,
           fmt: str, progress: bool | None, registry: Registry | None, **flags) -> None:
    """Audit a replication: compare source and target record by record up to the offsets group.

    Exit 0 when the target holds exactly the source's committed records, 1 on any violation, when
    nothing could be compared (no offset of the job in the group) or when a cluster cannot be read, 2
    on invalid configuration."""
    cfg = _load_config(config_file, flags)
    truth = GroundTruth.load(ground_truth) if ground_truth else None
    show = sys.stderr.isatty() if progress is None else progress
    try:
        report = Auditor(cfg, truth, quiesced, require_caught_up, show).run()
        if registry:
            report.violations += _schema_registry_behind(cfg, report, registry)
    except (VerifyError, RegistryError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(json.dumps(report.to_dict(), indent=2) if fmt == "json" else _summary(report))
    sys.exit(0 if report.ok else 1)
