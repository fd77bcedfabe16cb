"""What the commands share: the options of every command that talks to a replication's clusters,
and loading the configuration from them (exit code 2 on an invalid one)."""

from __future__ import annotations

import sys

import click


def _load_config(config_file: str | None, flags: dict):
    from replicator import config as config_mod

    try:
        return config_mod.load(flags, config_file)
    except config_mod.ConfigError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


def connection_options(f):
    """Options shared by every command that talks to a replication's clusters."""
    for opt in reversed([
        click.option("--config", "config_file", type=click.Path(dir_okay=False),
                     help="YAML file with any option below plus `source:`/`target:` librdkafka maps."),
        click.option("--source-bootstrap-servers", help="Source cluster, host:port[,host:port]."),
        click.option("--target-bootstrap-servers", help="Target cluster, host:port[,host:port]."),
        click.option("--topics", help="Regex of source topics to replicate (full match)."),
        click.option("--topics-exclude", help="Comma-separated regexes to exclude (exclude wins)."),
        click.option("--name", help="Job name: prefixes transactional ids; default group __replicator.NAME."),
        click.option("--offsets-group", help="The fake consumer group on the target holding offsets."),
        click.option("--replication-policy", help="identity (same names) or prefix (ALIAS.topic)."),
        click.option("--source-alias", help="Source cluster alias used by the prefix policy."),
        click.option("--target-alias", help="Target cluster alias: topics carrying it as a prefix are "
                                            "replicas from the target and are never sent back."),
    ]):
        f = opt(f)
    return f
