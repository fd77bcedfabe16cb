"""`replicator topics`: a dry run of topic management. Lists what would be replicated, under which
target name and with which configs, and what differs on the target today. Changes nothing."""

from __future__ import annotations

import json
import sys

import click
from confluent_kafka import KafkaException

from replicator.commands.options import _load_config, connection_options
from replicator.topics.filter import NOT_INCLUDED


@click.command()
@connection_options
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def topics(config_file: str | None, fmt: str, **flags) -> None:
    """Dry run: selected topics, their target names, partitions and configs, and the drift today."""
    cfg = _load_config(config_file, flags)
    from replicator.clients import kafka_clients
    from replicator.topics import sync as topic_sync

    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    role = "source"
    try:
        selected, skipped = topic_sync.selection(cfg, source)
        role = "target"
        try:
            plans = topic_sync.plan(cfg, source, target, selected)
        except KafkaException as e:
            from replicator.access import permissions

            if not permissions.is_authorization_error(e.args[0]):
                raise
            # DescribeConfigs is an optional ACL (config sync): show the topics without their drift.
            click.echo(f"note: configs not compared: {permissions.who(cfg, 'target')} may not DescribeConfigs "
                       f"the target topics ({e.args[0].str()})", err=True)
            plans = topic_sync.plan(cfg, source, target, selected, with_configs=False)
    except KafkaException as e:
        click.echo(f"error: the {role} cluster at {getattr(cfg, f'{role}_bootstrap_servers')}: {e.args[0].str()}",
                   err=True)
        sys.exit(1)
    if fmt == "json":
        click.echo(json.dumps(_as_json(plans, skipped), indent=2))
    else:
        click.echo(_as_table(plans, skipped))


def _as_json(plans: list, skipped: dict[str, str]) -> dict:
    return {
        "topics": [{"source": p.mapping.source, "target": p.mapping.target, "partitions": p.mapping.partitions,
                    "target_partitions": p.target_partitions, "action": p.action, "configs": p.configs,
                    "changes": {k: {"target": have, "wanted": want} for k, (have, want) in p.changes.items()}}
                   for p in plans],
        "not_replicated": dict(sorted(skipped.items())),
    }


def _as_table(plans: list, skipped: dict[str, str]) -> str:
    lines = [f"{len(plans)} topic(s) replicated:"]
    rows = [("SOURCE", "TARGET", "PARTITIONS", "ACTION", "CONFIGS (create) / DIFFERENCES (target -> wanted)")]
    for p in plans:
        have = "new" if p.target_partitions is None else str(p.target_partitions)
        if p.action == "create":
            detail = ", ".join(f"{k}={v}" for k, v in sorted(p.configs.items()))
        else:
            detail = ", ".join(f"{k}: {have_v if have_v is not None else '(unset)'} -> {want}"
                               for k, (have_v, want) in sorted(p.changes.items()))
        rows.append((p.mapping.source, p.mapping.target, f"{p.mapping.partitions} (target {have})", p.action,
                     detail))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    # Topics the include regex never named are only counted: on a big cluster they are most of them.
    shown = {t: why for t, why in skipped.items() if why != NOT_INCLUDED}
    if shown:
        lines.append(f"{len(shown)} topic(s) not replicated:")
        width = max(len(t) for t in shown)
        lines += [f"  {t.ljust(width)}  {why}" for t, why in sorted(shown.items())]
    if others := len(skipped) - len(shown):
        lines.append(f"{others} other topic(s) not matched by the include regex (--format json lists them)")
    return "\n".join(line.rstrip() for line in lines)
