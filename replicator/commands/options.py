"""What the commands share: the command-line flags of the option table (replicator/config.py), and
loading the configuration from them (exit code 2 on an invalid one)."""

from __future__ import annotations

import sys

import click

from replicator import config as config_mod


def _load_config(config_file: str | None, flags: dict):
    from replicator.clients import property_check

    try:
        cfg = config_mod.load(flags, config_file)
        property_check.check(cfg)  # librdkafka's own objections, before anything starts
        return cfg
    except config_mod.ConfigError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


_METAVARS = {"int": "INTEGER", "float": "NUMBER", "tuple[str, ...]": "REGEX,..."}


def flag_help(opt: config_mod.Option) -> str:
    if opt.required:
        return f"{opt.doc} [required: here, in the environment or in the --config file]"
    return f"{opt.doc} [default: {opt.shown_default}]"


def _table_flags(flag_for: str):
    # Every flag is a string, checked by the config like the file's and the environment's values (one
    # refusal message, exit 2); None (not given) leaves the option to the environment, file or default.
    return [click.option(opt.flag, opt.name, type=str, metavar=_METAVARS.get(opt.type, "TEXT"),
                         help=flag_help(opt))
            for opt in config_mod.TABLE if opt.flag_for == flag_for]


def connection_options(f):
    """Options shared by every command that talks to a replication's clusters."""
    for opt in reversed([
        click.option("--config", "config_file", type=click.Path(dir_okay=False),
                     help="YAML file with any option (docs/configuration.md) plus `source:`/`target:` librdkafka "
                          "maps."),
        *_table_flags(config_mod.CONNECTION),
    ]):
        f = opt(f)
    return f


def run_options(f):
    """The flags of options only `run` uses."""
    for opt in reversed(_table_flags(config_mod.RUN)):
        f = opt(f)
    return f
