"""Secrets by reference: resolved only when a client is built, never kept in the config."""

from __future__ import annotations

import pytest

from replicator import config as config_mod

BASE = {"source_bootstrap_servers": "a:1", "target_bootstrap_servers": "b:2", "topics": "t"}


def test_file_and_env_references_resolve_only_for_clients(tmp_path):
    (tmp_path / "pw").write_text("s3cret-from-file\n")
    cfg = config_mod.load({**BASE}, environ={"REPLICATOR_TARGET__SASL_PASSWORD": f"${{file:{tmp_path / 'pw'}}}"})
    assert "s3cret" not in cfg.to_json() and "s3cret" not in str(cfg.redacted())
    assert cfg.client_properties("target")["sasl.password"] == "s3cret-from-file"


def test_env_reference_resolves_from_the_process_environment(monkeypatch):
    monkeypatch.setenv("SRC_PW", "s3cret-from-env")
    cfg = config_mod.load({**BASE}, environ={"REPLICATOR_SOURCE__SASL_PASSWORD": "${env:SRC_PW}"})
    assert cfg.client_properties("source")["sasl.password"] == "s3cret-from-env"


def test_unresolvable_reference_names_the_key_not_a_value(tmp_path):
    with pytest.raises(config_mod.ConfigError) as e:
        config_mod.load({**BASE}, environ={"REPLICATOR_TARGET__SASL_PASSWORD": f"${{file:{tmp_path / 'nope'}}}"})
    assert e.value.key == "target.sasl.password" and "cannot read" in str(e.value)
    with pytest.raises(config_mod.ConfigError) as e:
        config_mod.load({**BASE}, environ={"REPLICATOR_SOURCE__SASL_PASSWORD": "${env:REPLICATOR_NO_SUCH_VAR}"})
    assert "REPLICATOR_NO_SUCH_VAR is not set" in str(e.value)


def test_plain_secret_values_are_redacted():
    cfg = config_mod.load({**BASE}, environ={"REPLICATOR_TARGET__SASL_PASSWORD": "plain-pw"})
    assert cfg.redacted()["target"]["sasl.password"] == "***"
