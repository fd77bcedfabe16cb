"""librdkafka's own objections to a `source:`/`target:` property come before anything starts, as an
invalid configuration naming the property (exit 2), not as a connection failure after the start."""

from __future__ import annotations

import pytest

from replicator.clients import property_check
from replicator.config import ConfigError, load

BASE = {"source_bootstrap_servers": "a:1", "target_bootstrap_servers": "b:1", "topics": "x"}


@pytest.mark.parametrize("section, props, key, phrase", [
    ("source", {"sasl.pasword": "pw"}, "source.sasl.pasword", "did you mean 'sasl.password'?"),
    ("target", {"compresion.type": "lz4"}, "target.compresion.type", "did you mean 'compression.type'?"),
    ("target", {"compression.type": "lz5"}, "target.compression.type", 'Invalid value "lz5"'),
    ("source", {"fetch.wait.max.ms": "soon"}, "source.fetch.wait.max.ms", "Invalid value"),
])
def test_a_property_librdkafka_refuses_is_named(section, props, key, phrase):
    with pytest.raises(ConfigError) as e:
        property_check.check(load({**BASE, section: props}, environ={}))
    assert e.value.key == key and phrase in str(e.value), str(e.value)


def test_a_refused_secret_value_is_not_repeated(monkeypatch):
    monkeypatch.setattr(property_check, "refusal", lambda section, name, value: (False, f'Invalid value "{value}"'))
    with pytest.raises(ConfigError) as e:
        property_check.check(load({**BASE, "target": {"ssl.key.password": "hunter2"}}, environ={}))
    assert "hunter2" not in str(e.value) and "not shown" in str(e.value)


def test_what_only_the_whole_client_can_judge_is_left_to_it():
    """A SASL protocol alone asks librdkafka for GSSAPI, which this build lacks: not an objection."""
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
             "sasl.password": "p", "linger.ms": "5"}
    property_check.check(load({**BASE, "source": props, "target": props}, environ={}))
