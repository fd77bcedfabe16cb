"""`replicator lag`: replication lag per partition, read from the clusters alone.

The target's fake group is the truth, so this works whether the job runs or not and agrees with the
job's `replicator_lag_records` / `replicator_lag_seconds` metrics (same computation). Read-only: it
never creates topics or touches the group."""

from __future__ import annotations

import json
import sys
import time

import click
from confluent_kafka import KafkaException

from replicator.commands.options import _load_config, connection_options

EXIT_OVER_THRESHOLD = 1
EXIT_UNREACHABLE = 3


def _mappings(cfg, source):
    from replicator.replication_policy import policy_for
    from replicator.topics.sync import TopicMapping, discover

    policy = policy_for(cfg)
    return [TopicMapping(s, policy.target_topic(s), n) for s, n in sorted(discover(cfg, source).items())]


def _rows(lags, now: float) -> list[dict]:
    return [{"topic": x.source_topic, "partition": x.partition, "target_topic": x.target_topic,
             "source_end_offset": x.source_end, "committed_offset": x.committed,
             "lag_records": x.records, "lag_seconds": x.seconds(now)} for x in lags]


def _table(rows: list[dict]) -> str:
    header = ("TOPIC", "PARTITION", "TARGET TOPIC", "SOURCE END", "COMMITTED", "LAG RECORDS", "LAG SECONDS")
    cells = [header] + [(r["topic"], str(r["partition"]), r["target_topic"], str(r["source_end_offset"]),
                         "-" if r["committed_offset"] < 0 else str(r["committed_offset"]), str(r["lag_records"]),
                         "?" if r["lag_seconds"] is None else f"{r['lag_seconds']:.1f}") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) if i in (0, 2) else c[i].rjust(widths[i])
                               for i in range(len(header))).rstrip() for c in cells)


@click.command()
@connection_options
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--max-lag", type=click.IntRange(min=0),
              help=f"Exit {EXIT_OVER_THRESHOLD} when the total lag exceeds this many offsets.")
@click.option("--max-lag-seconds", type=click.FloatRange(min=0),
              help=f"Exit {EXIT_OVER_THRESHOLD} when any partition's oldest unreplicated record is older.")
def lag(config_file: str | None, fmt: str, max_lag: int | None, max_lag_seconds: float | None, **flags) -> None:
    """Lag per partition from the target's offsets group and the source's last stable offsets.

    Works with the job running or stopped. Exit 0 within the thresholds, 1 past one, 2 invalid
    configuration, 3 a cluster unreachable."""
    cfg = _load_config(config_file, flags)
    from replicator.clients import kafka_clients
    from replicator.ops.lag import LagUnavailable, partition_lags, with_ages

    source = kafka_clients.source_admin(cfg)
    try:
        mappings = _mappings(cfg, source)
    except KafkaException as e:
        click.echo(f"error: cannot reach the source cluster at {cfg.source_bootstrap_servers}: "
                   f"{e.args[0].str()}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    try:
        lags = with_ages(cfg, partition_lags(cfg, mappings))
    except KafkaException as e:
        click.echo(f"error: cannot compute the lag: {e.args[0].str()}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    except LagUnavailable as e:
        click.echo(f"error: cannot compute the lag: {e}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    now = time.time()
    rows = _rows(lags, now)
    total = sum(r["lag_records"] for r in rows)
    oldest = max((r["lag_seconds"] or 0.0 for r in rows), default=0.0)
    if fmt == "json":
        click.echo(json.dumps({"group": cfg.group, "computed_at": now, "lag_records": total,
                               "max_lag_seconds": oldest, "partitions": rows}, indent=2))
    else:
        click.echo(_table(rows))
        click.echo(f"total lag {total} offsets over {len(rows)} partitions, oldest unreplicated record "
                   f"{oldest:.1f}s old (group {cfg.group})")
    over = []
    if max_lag is not None and total > max_lag:
        over.append(f"total lag {total} > {max_lag}")
    if max_lag_seconds is not None and oldest > max_lag_seconds:
        over.append(f"oldest unreplicated record {oldest:.1f}s > {max_lag_seconds:g}s")
    if over:
        click.echo(f"over threshold: {'; '.join(over)}", err=True)
        sys.exit(EXIT_OVER_THRESHOLD)
