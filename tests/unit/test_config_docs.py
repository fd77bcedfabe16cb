"""The option table is the one source of docs/configuration.md, the environment variables and the
command-line flags: a stale document, an undocumented option or a flag that says another default fails."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from replicator import config, config_docs
from replicator.cli import main

# Every command that talks to a replication's clusters takes the connection flags.
CONNECTION_COMMANDS = ["acls", "divergence", "failback", "failover", "groups", "lag", "run", "switchover", "topics",
                       "verify"]


def test_docs_configuration_md_is_generated_from_the_table():
    assert config_docs.PATH.read_text() == config_docs.render(), (
        f"docs/configuration.md is stale: regenerate it with `{config_docs.COMMAND}`")


def test_check_mode_says_which_command_regenerates_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(config_docs, "PATH", stale)
    assert config_docs.main(["--check"]) == 1
    assert config_docs.COMMAND in capsys.readouterr().err
    assert config_docs.main([]) == 0 and config_docs.main(["--check"]) == 0
    assert stale.read_text() == config_docs.render()


def test_every_option_is_documented_with_what_it_accepts():
    text = config_docs.render()
    for opt in config.TABLE:
        assert f"### `{opt.name}`" in text, opt.name
        assert opt.doc.endswith(".") and len(opt.doc) > 20, opt.name
        assert opt.check.__doc__, f"{opt.name}: its check needs a docstring saying what it accepts"
        assert opt.env in ("value", "properties", "none"), opt.name
        assert opt.flag_for in (None, config.CONNECTION, config.RUN), opt.name
    # These six were once in no document.
    for name in ("guarantee", "max_records_per_transaction", "transaction_timeout_ms", "trigger_interval_ms",
                 "log_format", "log_level"):
        assert f"`{config.ENV_PREFIX}{name.upper()}`" in text
    for cross_check in config.CROSS_CHECKS:
        assert cross_check.__doc__, cross_check.__name__


def _flags(command: str) -> dict[str, str]:
    """The command's flags and their help texts, as `--help` prints them."""
    with click.Context(main) as ctx:
        cmd = main.get_command(ctx, command)
    return {o.opts[0]: o.help or "" for o in cmd.params if isinstance(o, click.Option)}


def test_run_takes_every_flag_of_the_table_with_the_tables_default():
    flags = _flags("run")
    flagged = [opt for opt in config.TABLE if opt.flag]
    assert {o.name for o in flagged if o.flag_for == config.RUN} >= {"shards", "guarantee", "log_format"}
    assert set(flags) == {o.flag for o in flagged} | {"--config"}
    for opt in flagged:
        assert flags[opt.flag].startswith(opt.doc + " [")
        assert flags[opt.flag].endswith("[required: here, in the environment or in the --config file]" if opt.required
                                        else f"[default: {opt.shown_default}]")
    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0 and "[default: the number of cores]" in " ".join(result.output.split())


@pytest.mark.parametrize("command", CONNECTION_COMMANDS)
def test_every_cluster_command_takes_the_connection_flags(command):
    flags = _flags(command)
    for opt in config.TABLE:
        if opt.flag_for == config.CONNECTION:
            assert opt.flag in flags, f"{command} lacks {opt.flag}"
        elif opt.flag_for == config.RUN and command != "run":
            assert opt.flag not in flags, f"{command} takes the run-only {opt.flag}"


def test_a_flag_reaches_the_config_and_is_refused_there_with_exit_2():
    result = CliRunner().invoke(main, ["topics", "--source-bootstrap-servers", "127.0.0.1:1",
                                       "--target-bootstrap-servers", "127.0.0.1:2", "--topics", "t",
                                       "--name", "two words"])
    assert result.exit_code == 2
    assert "invalid configuration 'name'" in result.output


def test_every_documented_environment_variable_is_read():
    base = {"REPLICATOR_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REPLICATOR_TARGET_BOOTSTRAP_SERVERS": "127.0.0.1:2",
            "REPLICATOR_TOPICS": "t"}
    for opt in config.TABLE:
        if opt.env == "value" and not opt.required:
            # A value its check refuses: the refusal proves the variable reached the option.
            with pytest.raises(config.ConfigError) as e:
                config.load(environ={**base, opt.env_var: "\x00(["})
            assert e.value.key == opt.name, opt.name
        elif opt.env == "properties":
            var = opt.env_var.replace("<PROPERTY>", "CLIENT_ID")
            assert getattr(config.load(environ={**base, var: "x"}), opt.name) == {"client.id": "x"}
