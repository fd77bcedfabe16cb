"""The disaster-recovery commands: `groups`, `switchover`, `failover`, `failback`, `divergence`.

Exit codes (every command): 0 done and every selected group exact; 1 runtime failure (a cluster
unreachable, a write refused); 2 invalid configuration; 3 done, but some group could not be synced
or translated exactly (taken over, active on the target, untranslatable: listed in the output), or
`divergence` found records to decide about; 4 `switchover` timed out waiting for catch-up.
"""

from __future__ import annotations

import json
import logging
import sys
import time

import click
from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from replicator.commands.options import _load_config, connection_options

OK, FAILURE, PARTIAL, TIMEOUT = 0, 1, 3, 4
_GOOD = ("synced", "would-sync")
_format = click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)


def _emit(fmt: str, doc: dict, lines: list[str]) -> None:
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        for line in lines:
            click.echo(line)


def _table(statuses) -> list[str]:
    rows = [f"{'GROUP':24} {'TOPIC':20} {'P':>3} {'SOURCE':>10} {'TARGET':>10} {'EXACT':5} {'NOT-REPL':>8} "
            f"{'AGE-S':>7} STATE"]
    for st in statuses:
        if not st.partitions:
            rows.append(f"{st.group:24} {'-':20} {'':>3} {'':>10} {'':>10} {'':5} {'':>8} {'':>7} {st.state} "
                        f"{st.reason}")
        for p in st.partitions:
            t = "-" if p.target_offset is None else str(p.target_offset)
            rows.append(f"{st.group:24} {p.topic:20} {p.partition:>3} {p.source_offset:>10} {t:>10} "
                        f"{'yes' if p.exact else 'no':5} {p.ahead:>8} {p.checkpoint_age_seconds:>7.1f} {st.state}"
                        + (f"  ({p.reason})" if p.reason else ""))
        if st.reason and st.partitions:
            rows.append(f"  {st.group}: {st.reason}")
    return rows


def _clusters(cfg, source_timeout: float = 10.0) -> tuple[dict, str]:
    """Which clusters the command looks at: {role: {bootstrap, cluster_id}} (None when it does not
    answer) and the line that says so. A cluster rebuilt at the same address has another id."""
    from replicator.clients import kafka_clients

    found = {}
    for role, admin, timeout in (("source", kafka_clients.source_admin(cfg), source_timeout),
                                 ("target", kafka_clients.target_admin(cfg), 30.0)):
        try:
            cluster_id = admin.list_topics(timeout=timeout).cluster_id or None
        except KafkaException:
            cluster_id = None
        found[role] = {"bootstrap": getattr(cfg, f"{role}_bootstrap_servers"), "cluster_id": cluster_id}
    if found["target"]["cluster_id"] is None:  # every command reads it: say so now, not after more timeouts
        raise RuntimeError(f"cannot reach the target cluster at {cfg.target_bootstrap_servers} (no answer within 30 s)")
    line = "; ".join(f"{role}: " + (f"cluster {c['cluster_id']} at {c['bootstrap']}" if c["cluster_id"]
                                    else f"no answer at {c['bootstrap']}") for role, c in found.items())
    return found, line


def _code(statuses) -> int:
    bad = [s for s in statuses if s.state not in _GOOD or any(p.target_offset is None for p in s.partitions)]
    return PARTIAL if bad else OK


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(FAILURE)


@click.command()
@connection_options
@_format
def groups(config_file: str | None, fmt: str, **flags) -> None:
    """Per group and partition: source offset, exact target offset, data not yet replicated,
    checkpoint age, synced / taken over. Read-only; works with the source down (from checkpoints)."""
    from replicator.groups.sync import GroupSync

    cfg = _load_config(config_file, flags)
    try:
        clusters, where = _clusters(cfg)
        live = clusters["source"]["cluster_id"] is not None
        sync = GroupSync(cfg, dry_run=True, source_reachable=live)
        statuses = sync.run_once() if live else sync.from_checkpoints(sync=False)
    except (KafkaException, RuntimeError) as e:
        _fail(str(e))
    doc = {"source_reachable": live, "clusters": clusters, "groups": [s.to_dict() for s in statuses]}
    _emit(fmt, doc, [where, f"source {'reachable: live translation' if live else 'unreachable: from checkpoints'}",
                     *_table(statuses)])
    sys.exit(_code(statuses))


def _fence_and_mark(cfg, kind: str):
    from replicator.access import permissions
    from replicator.clients import kafka_clients
    from replicator.engine.fencing import fence_previous_layouts
    from replicator.groups import promotion
    from replicator.topics import sync as topic_sync

    target = kafka_clients.target_admin(cfg)
    permissions.check_promotion_write(cfg, target)  # before fencing: refused later, it would be half-done
    fenced = fence_previous_layouts(cfg)
    # Read after fencing: no writer can add a partition to the fake group any more.
    if kind == "failover":
        mappings = _mappings_from_group(cfg)
    else:
        mappings = topic_sync.mappings_for(cfg, topic_sync.discover(cfg, kafka_clients.source_admin(cfg)))
    reader = kafka_clients.group_reader(cfg)
    try:
        marker = promotion.Marker(kind, time.time(), promotion.cut(cfg, target, reader, mappings))
    finally:
        reader.close()
    promotion.write_marker(cfg, target, marker)
    return fenced, marker


def _ends(lags) -> dict[tuple[str, int], int]:
    return {(x.source_topic, x.partition): x.source_end for x in lags}


def _consuming_on_source(source, groups: list[str]) -> list[str]:
    """Those of `groups` with members on the source: consumers still running there."""
    if not groups:
        return []
    futures = source.describe_consumer_groups(groups, request_timeout=30)
    return sorted(g for g, f in futures.items() if f.result().members)


def _mappings_from_group(cfg, target_cluster: str | None = None):
    """The replicated partitions as the fake group on the target knows them (the source is gone).
    RuntimeError when the group holds none: a mistyped --name must not "fail over" a job that never
    replicated here (fencing nothing, moving no group) while the real one copies on unfenced; and
    when its entries were committed on another cluster than `target_cluster` (a copied group)."""
    from replicator.clients import kafka_clients
    from replicator.offsets import read_group
    from replicator.topics.sync import TopicMapping

    reader = kafka_clients.group_reader(cfg)
    try:
        group = read_group(reader)
    finally:
        reader.close()
    if not group:
        raise RuntimeError(f"the offsets group {cfg.group!r} holds no offsets on the target: no job named "
                           f"{cfg.name!r} replicated to it (check --name or --offsets-group); nothing was "
                           f"fenced or written")
    elsewhere = sorted({c.metadata.target_cluster for c in group.values() if c.metadata}
                       - {"", target_cluster or ""}) if target_cluster else []
    if elsewhere:
        raise RuntimeError(f"the offsets group {cfg.group!r} on the target at {cfg.target_bootstrap_servers} (cluster "
                           f"{target_cluster}) was committed on cluster {', '.join(elsewhere)}: job {cfg.name!r} did "
                           f"not replicate into this cluster; nothing was fenced or written")
    parts: dict[tuple[str, str], int] = {}
    for (target_topic, p), c in group.items():
        source_topic = c.metadata.source_topic if c.metadata else target_topic
        parts[(source_topic, target_topic)] = max(parts.get((source_topic, target_topic), 0), p + 1)
    return [TopicMapping(s, t, n) for (s, t), n in sorted(parts.items())]


@click.command()
@connection_options
@_format
@click.option("--dry-run", is_flag=True, help="Show what would be done; write nothing, fence nothing.")
def failover(config_file: str | None, fmt: str, dry_run: bool, **flags) -> None:
    """The source is gone: fence every shard, write the promotion marker (`run` then refuses this
    direction), commit the last checkpoints into the target groups, and report each group's RPO:
    offsets it had consumed that were never replicated, and the age of its last checkpoint."""
    from replicator.access import acl_sync
    from replicator.groups.sync import GroupSync

    cfg = _load_config(config_file, flags)
    try:
        clusters, where = _clusters(cfg, source_timeout=5.0)  # the source is likely gone
        _mappings_from_group(cfg, clusters["target"]["cluster_id"])  # before anything is fenced or written
        fenced, marker = (0, None) if dry_run else _fence_and_mark(cfg, "failover")
        # Producers' ACLs from what the periodic sync staged (the source is gone); after the fence and marker.
        acl_doc, acl_lines = acl_sync.promotion_step(cfg, {}, live_source=False, dry_run=dry_run)
        sync = GroupSync(cfg, dry_run=dry_run, source_reachable=False)
        statuses = sync.from_checkpoints(sync=cfg.sync_group_offsets)
        sync.store.close()
        sync.translator.close()
    except (KafkaException, RuntimeError) as e:
        _fail(str(e))
    doc = {"dry_run": dry_run, "clusters": clusters, "fenced_shards": fenced,
           "marker": json.loads(marker.to_json()) if marker else None,
           "acls": acl_doc,
           "groups": [{**s.to_dict(), "rpo_offsets": s.ahead,
                       "checkpoint_age_seconds": max((p.checkpoint_age_seconds for p in s.partitions), default=None)}
                      for s in statuses]}
    head = ["dry run: nothing written" if dry_run else
            f"failed over: {fenced} shard ids fenced, marker written; `run` now refuses this direction"]
    rpo = [f"  {s.group}: {s.ahead} consumed source offsets not replicated (RPO), last checkpoint "
           f"{max((p.checkpoint_age_seconds for p in s.partitions), default=0):.0f}s before" for s in statuses]
    _emit(fmt, doc, [where, *head, *_table(statuses), *rpo, *acl_lines])
    sys.exit(_code(statuses))


@click.command()
@connection_options
@_format
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Seconds to wait for replication and groups to catch up.")
def switchover(config_file: str | None, fmt: str, timeout: float, **flags) -> None:
    """Planned migration, source up and its producers stopped: wait until replication and every
    selected group are caught up, final checkpoint and sync, fence every shard, write the promotion
    marker; reports zero loss (every source record below the source's end is on the target)."""
    from replicator.access import acl_sync
    from replicator.clients import kafka_clients
    from replicator.groups.sync import GroupSync
    from replicator.ops.lag import LagReader
    from replicator.topics import sync as topic_sync

    cfg = _load_config(config_file, flags)
    lag_reader = None
    try:
        clusters, where = _clusters(cfg)
        _mappings_from_group(cfg, clusters["target"]["cluster_id"])  # a mistyped --name writes nothing
        source = kafka_clients.source_admin(cfg)
        lag_reader = LagReader(cfg)
        sync = GroupSync(cfg)
        deadline, statuses, lags, stable, ends = time.monotonic() + timeout, [], [], 0, None
        while True:
            mappings = topic_sync.mappings_for(cfg, topic_sync.discover(cfg, source))
            lags = lag_reader.lags(mappings)
            statuses = sync.run_once()
            # Caught up is not enough: a replication that keeps up with a trickle reads lag 0 while
            # its producers still write, and the records after the fence are lost. Nor may a
            # group still consume on the source: its offsets move on after the final sync.
            moved, previous = ends is not None and _ends(lags) != ends, ends
            ends = _ends(lags)
            consuming = _consuming_on_source(source, [s.group for s in statuses])
            caught_up = (all(x.records == 0 for x in lags) and all(s.ahead == 0 for s in statuses)
                         and not moved and not consuming)
            stable = stable + 1 if caught_up and previous is not None else 0
            if stable >= 2:  # three reads a sync interval apart, nothing written or consumed since the first
                break
            if time.monotonic() > deadline:
                behind = sum(x.records for x in lags)
                click.echo(f"error: not caught up after {timeout:.0f}s: {behind} offsets still to copy, "
                           f"{sum(s.ahead for s in statuses)} group offsets ahead"
                           + ("; the source's end offsets still move: stop its producers" if moved else "")
                           + (f"; groups still consuming on the source: {', '.join(consuming)} (stop their "
                              "consumers, or leave the groups out: groups_exclude, REPLICATOR_GROUPS_EXCLUDE)"
                              if consuming else "")
                           + "; is `replicator run` running? Nothing was fenced and no marker written", err=True)
                sys.exit(TIMEOUT)
            time.sleep(min(2.0, cfg.group_sync_interval_seconds))
        fenced, marker = _fence_and_mark(cfg, "switchover")
        sync.stop()
        acl_doc, acl_lines = acl_sync.promotion_step(cfg, {m.source: m.target for m in mappings}, live_source=True)
        lost = [c for c in marker.cut if c.source_next >= 0 and c.source_next != next(
            x.source_end for x in lags if x.source_topic == c.source_topic and x.partition == c.partition)]
    except (KafkaException, RuntimeError) as e:
        _fail(str(e))
    finally:
        if lag_reader is not None:
            lag_reader.close()
    doc = {"clusters": clusters, "fenced_shards": fenced, "marker": json.loads(marker.to_json()),
           "lost_partitions": len(lost),
           "groups": [s.to_dict() for s in statuses], "acls": acl_doc}
    _emit(fmt, doc, [where, f"switched over: {fenced} shard ids fenced, marker written, "
                     f"{'zero loss' if not lost else f'{len(lost)} partitions not at the source end'}",
                     *_table(statuses), *acl_lines])
    sys.exit(FAILURE if lost else _code(statuses))


@click.command()
@connection_options
@_format
@click.option("--forward-name", required=True, help="Name of the job that replicated old source -> new primary.")
@click.option("--dry-run", is_flag=True, help="Show the reverse job's start, the groups it would adopt and the "
                                              "ACLs it would copy and stage; write nothing.")
def failback(config_file: str | None, fmt: str, forward_name: str, dry_run: bool, **flags) -> None:
    """Prepares the reverse job (this config: source = the new primary, target = the old source):
    its offsets start exactly at the failover cut, so `run` with this config copies only what was
    produced on the new primary after it, and its ACL sync's first round copies the new primary's
    consumer rules (its producers' rules are applied when the reverse job is promoted). Run
    `replicator divergence` first: records the old source holds beyond the cut were never
    replicated and stay where they are."""
    from replicator.access import acl_sync
    from replicator.clients import kafka_clients
    from replicator.groups import promotion
    from replicator.groups.sync import commit_group
    from replicator.offsets import CommitMetadata, read_group

    cfg = _load_config(config_file, flags)
    if cfg.replication_policy != "identity":
        _fail("failback needs replication_policy=identity (the reverse job writes back to the same topic names)")
    try:
        marker = promotion.read_marker(promotion.forward_view(cfg, forward_name))
        if marker is None:
            _fail(f"no promotion marker of job {forward_name!r} on {cfg.source_bootstrap_servers}: "
                  f"nothing to fail back")
        reader = kafka_clients.group_reader(cfg)
        try:
            existing = read_group(reader)
        finally:
            reader.close()
        cluster = kafka_clients.source_admin(cfg).list_topics(timeout=30).cluster_id or "unknown"
        offsets = {}
        for c in marker.cut:
            # The reverse job reads the forward job's target topics and writes back to their sources.
            reverse_target = c.source_topic
            meta = CommitMetadata(cluster, c.target_topic, cfg.shard_count, 0).encode()
            offsets[(reverse_target, c.partition)] = (c.target_end, meta)
        if existing:
            _fail(f"the reverse job's offsets group {cfg.group!r} already holds offsets: failback was prepared")
        if not dry_run:
            refused = commit_group(cfg.client_properties("target"), cfg.target_bootstrap_servers, cfg.group,
                                   offsets)
            if refused:
                _fail(f"could not set the reverse job's start: {refused}")
        adopted = _adopt_old_groups(cfg, marker, forward_name, dry_run)
        acl_doc, acl_lines = acl_sync.failback_step(cfg, {c.target_topic: c.source_topic for c in marker.cut},
                                                    dry_run=dry_run)
    except (KafkaException, RuntimeError) as e:
        _fail(str(e))
    doc = {"dry_run": dry_run, "reverse_group": cfg.group, "adopted_groups": adopted, "acls": acl_doc,
           "start": [{"topic": t, "partition": p, "offset": o} for (t, p), (o, _) in sorted(offsets.items())]}
    head = (f"dry run: nothing written; reverse job {cfg.name!r} would start at the failover cut of "
            f"{forward_name!r} ({len(offsets)} partitions), adopting groups {', '.join(adopted) or 'none'}"
            if dry_run else
            f"reverse job {cfg.name!r} starts at the failover cut of {forward_name!r} "
            f"({len(offsets)} partitions); start it with `replicator run` and this configuration")
    _emit(fmt, doc, [head, *acl_lines])
    sys.exit(OK)


def _adopt_old_groups(cfg, marker, forward_job: str, dry_run: bool = False) -> list[str]:
    """The old source's groups hold pre-failover positions their applications left behind: recorded
    as the reverse job's own writes, so its sync may move them (a group used on the old source
    after this is detected as taken over, as always). The forward job's name is recorded with them:
    its index translates a group still before the cut (`groups.back_translate`). `dry_run`: only
    which groups would be adopted."""
    from replicator.clients import kafka_clients
    from replicator.groups.checkpoints import Checkpoint, CheckpointStore, ensure_topics
    from replicator.groups.sync import GroupFilter, group_offsets

    old = kafka_clients.target_admin(cfg)
    store = None
    if not dry_run:
        ensure_topics(cfg, old)
        store = CheckpointStore(cfg).load()
    selected = GroupFilter(cfg.groups, cfg.groups_exclude)
    names = sorted(g.group_id for g in old.list_consumer_groups(request_timeout=30).result().valid
                   if selected.accepts(g.group_id))
    back = {(c.source_topic, c.partition): c.target_topic for c in marker.cut}
    adopted = []
    for group in names:
        offsets = group_offsets(cfg.client_properties("target"), cfg.target_bootstrap_servers, group, sorted(back))
        if store is not None:
            for (topic, p), (offset, meta) in offsets.items():
                store.put(group, back[(topic, p)], p, Checkpoint(-1, None, False, 0, "adopted", meta, w=offset),
                          topic)
        if offsets:
            adopted.append(group)
    if store is not None:
        store.put_forward_job(forward_job)
        store.flush()
        store.close()
    return adopted


def _reverse_copy_starts(cfg, source, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Per old-source partition, the first offset a reverse job that `failback` prepared from this
    job wrote: records from there on are the new primary's copied back, not divergence. Such a job
    is found by the forward job's name that `failback` recorded in its checkpoints topic, here."""
    from replicator import names
    from replicator.clients import kafka_clients
    from replicator.groups.checkpoints import CheckpointStore
    from replicator.groups.promotion import forward_view
    from replicator.groups.translate import IndexReader

    listed = source.list_topics(timeout=30).topics
    suffix = names.checkpoints_topic("")[len(names.INTERNAL_PREFIX):]
    starts: dict[tuple[str, int], int] = {}
    for topic in listed:
        if not (topic.startswith(names.INTERNAL_PREFIX) and topic.endswith(suffix)):
            continue
        reverse = forward_view(cfg, topic[len(names.INTERNAL_PREFIX):-len(suffix)])  # its target: this source
        index = listed.get(names.index_topic(reverse.name))
        if index is None:
            continue
        consumer = None
        try:
            if CheckpointStore(reverse, read_only=True).load().forward_job != cfg.name:
                continue
            consumer = kafka_clients.translator_reader(reverse)
            reader = IndexReader(consumer, reverse.name, len(index.partitions))
            for t, p in tps:
                if (first := reader.first_entry(t, p)) is not None:
                    starts[(t, p)] = min(starts.get((t, p), first[1].first_target), first[1].first_target)
        except (KafkaException, RuntimeError) as e:  # another job's topics: their ACLs may not let us read
            logging.getLogger(__name__).warning(
                "divergence: %s not read (%s); a reverse job's copies it names would count as diverged",
                topic, e, extra={"event": "divergence_reverse_unread"})
        finally:
            if consumer is not None:
                consumer.close()
    return starts


@click.command()
@connection_options
@_format
def divergence(config_file: str | None, fmt: str, **flags) -> None:
    """What the old source holds that was never replicated before the promotion: per partition, the
    offsets from the cut to the source's end, or to the first record a failback's reverse job copied
    back, and the committed records among them. Kafka cannot truncate a log's tail: the operator
    decides (re-publish, ignore, recreate); nothing is deleted."""
    from replicator.groups import promotion
    from replicator.groups.translate import _reader, read_records

    cfg = _load_config(config_file, flags)
    try:
        marker = promotion.read_marker(cfg)
        if marker is None:
            _fail(f"no promotion marker of job {cfg.name!r} on the target: nothing has diverged")
        from replicator.clients import kafka_clients

        source = kafka_clients.source_admin(cfg)
        cut = [c for c in marker.cut if c.source_next >= 0]
        req = {TopicPartition(c.source_topic, c.partition): OffsetSpec.latest() for c in cut}
        ends = {(tp.topic, tp.partition): f.result().offset
                for tp, f in source.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED).items()}
        copied_back = _reverse_copy_starts(cfg, source, [(c.source_topic, c.partition) for c in cut])
        consumer = _reader(cfg.client_properties("source"), cfg.source_bootstrap_servers, cfg.name)
        rows = []
        for c in cut:
            end = min(ends[(c.source_topic, c.partition)], copied_back.get((c.source_topic, c.partition), 1 << 63))
            records = len(read_records(consumer, c.source_topic, c.partition, c.source_next, end)) \
                if end > c.source_next else 0
            rows.append({"topic": c.source_topic, "partition": c.partition, "from": c.source_next, "to": end,
                         "records": records})
        consumer.close()
    except (KafkaException, RuntimeError) as e:
        _fail(str(e))
    diverged = [r for r in rows if r["records"]]
    doc = {"promoted": marker.kind, "at": marker.at, "partitions": rows, "diverged_records": sum(
        r["records"] for r in rows)}
    _emit(fmt, doc, [f"{marker.kind} at {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(marker.at))} UTC: "
                     f"{doc['diverged_records']} records on the old source were never replicated", *[
                         f"  {r['topic']}[{r['partition']}] offsets {r['from']}..{r['to'] - 1}: {r['records']} records"
                         for r in diverged]])
    sys.exit(PARTIAL if diverged else OK)
