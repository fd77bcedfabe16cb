"""What the commands share: the command-line flags of the option table (replicator/config.py), and
loading the configuration from them (exit code 2 on an invalid one)."""

from __future__ import annotations

import dataclasses
import os
import sys

import click

from replicator import config as config_mod


def _load_config(config_file: str | None, flags: dict, echo_ignored: bool = True):
    """The validated configuration, or exit 2. `echo_ignored`: name on stderr the REPLICATOR_*
    variables that set nothing (`run` logs them instead, once its log format is set)."""
    from replicator.clients import property_check

    try:
        cfg = config_mod.load(flags, config_file)
        property_check.check(cfg)  # librdkafka's own objections, before anything starts
    except config_mod.ConfigError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    if echo_ignored:
        for line in ignored_environment_lines(cfg):
            click.echo(f"warning: {line}", err=True)
    return cfg


def ignored_environment_lines(cfg) -> list[str]:
    from replicator.secret_refs import reference

    values = [v for v in dataclasses.asdict(cfg).values() if isinstance(v, str)]
    values += [v for section in (cfg.source, cfg.target, cfg.spark) for v in section.values() if isinstance(v, str)]
    referenced = {ref[1] for v in values if (ref := reference(v)) is not None and ref[0] == "env"}
    return [f"environment variable {name} is not an option and is ignored"
            f"{f'; did you mean {close}?' if close else ''}"
            for name, close in config_mod.ignored_environment(os.environ, referenced)]


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
