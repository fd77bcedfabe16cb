"""Every kind of invalid configuration is refused before anything runs, naming the key at fault."""

from __future__ import annotations

import pytest

from replicator import config_checks as accepts
from replicator.config import ConfigError, Option, _checked, _redact, ignored_environment, is_secret, load

BASE = {"source_bootstrap_servers": "127.0.0.1:19092", "target_bootstrap_servers": "127.0.0.1:29092",
        "topics": "orders.*"}
MISSING = object()

# (what is wrong, the override, the key the error must name, a phrase the message must contain)
INVALID = [
    ("source bootstrap missing", {"source_bootstrap_servers": MISSING}, "source_bootstrap_servers", "required"),
    ("target bootstrap missing", {"target_bootstrap_servers": MISSING}, "target_bootstrap_servers", "required"),
    ("bootstrap without port", {"source_bootstrap_servers": "localhost"}, "source_bootstrap_servers", "host:port"),
    ("bootstrap port 0", {"target_bootstrap_servers": "h:0"}, "target_bootstrap_servers", "1-65535"),
    ("bootstrap port too high", {"target_bootstrap_servers": "h:70000"}, "target_bootstrap_servers", "1-65535"),
    ("identity onto the source", {"target_bootstrap_servers": "127.0.0.1:19092"}, "target_bootstrap_servers",
     "onto itself"),
    ("topics missing", {"topics": MISSING}, "topics", "required"),
    ("topics not a regex", {"topics": "orders("}, "topics", "regular expression"),
    ("exclude not a regex", {"topics_exclude": "ok,[a-"}, "topics_exclude", "regular expression"),
    ("name with a space", {"name": "my job"}, "name", "letters, digits"),
    ("name too long", {"name": "n" * 101}, "name", "1-100"),
    ("group with a slash", {"offsets_group": "a/b"}, "offsets_group", "249"),
    ("shards zero", {"shards": "0"}, "shards", "between 1 and 4096"),
    ("translation index not a boolean", {"translation_index": "maybe"}, "translation_index", "true or false"),
    ("shards not a number", {"shards": "four"}, "shards", "integer"),
    ("shards a boolean", {"shards": True}, "shards", "boolean"),
    ("spark master scheme", {"master": "foo://x"}, "master", "Spark master URL"),
    ("spark master without threads", {"master": "local[0]"}, "master", "Spark master URL"),
    ("guarantee", {"guarantee": "maybe-once"}, "guarantee", "exactly-once, at-least-once"),
    ("batch duration zero", {"batch_duration_seconds": "0"}, "batch_duration_seconds", "positive"),
    ("class cache relative", {"spark_class_cache": "cache"}, "spark_class_cache", "absolute directory"),
    ("commit interval zero", {"commit_interval_ms": "0"}, "commit_interval_ms", "between 1 and 60000"),
    ("transaction records negative", {"max_records_per_transaction": "-5"}, "max_records_per_transaction", ">= 1"),
    ("transaction seconds zero", {"max_transaction_seconds": "0"}, "max_transaction_seconds", "positive"),
    ("transaction seconds infinite", {"max_transaction_seconds": "inf"}, "max_transaction_seconds", "finite"),
    ("transaction seconds nan", {"max_transaction_seconds": "nan"}, "max_transaction_seconds", "positive"),
    ("transaction timeout tiny", {"transaction_timeout_ms": "10"}, "transaction_timeout_ms", "1000 and 900000"),
    ("transaction timeout above broker max", {"transaction_timeout_ms": "1000000"}, "transaction_timeout_ms",
     "900000"),
    ("timeout shorter than two transactions", {"transaction_timeout_ms": "5000", "max_transaction_seconds": "10"},
     "transaction_timeout_ms", "5000 ms must be at least twice the longest transaction, 10 s"),
    ("transactions longer than the broker allows", {"max_transaction_seconds": "1000"}, "transaction_timeout_ms",
     "transactions can last at most 450 s"),
    ("catch-up seconds zero", {"catch_up_transaction_seconds": "0"}, "catch_up_transaction_seconds", "positive"),
    ("timeout shorter than two catch-up transactions",
     {"transaction_timeout_ms": "5000", "catch_up_transaction_seconds": "3"}, "transaction_timeout_ms",
     "use >= 6000"),
    ("trigger negative", {"trigger_interval_ms": "-1"}, "trigger_interval_ms", ">= 0"),
    ("on data loss", {"on_data_loss": "ignore"}, "on_data_loss", "fail, skip"),
    ("replication policy", {"replication_policy": "custom"}, "replication_policy", "identity, prefix"),
    ("alias with a dot", {"replication_policy": "prefix", "source_alias": "a.b"}, "source_alias", "'.'"),
    ("replication factor zero", {"replication_factor": "0"}, "replication_factor", "between 1 and 32767"),
    ("metrics port too high", {"metrics_port": "70000"}, "metrics_port", "65535"),
    ("metrics port a word", {"metrics_port": "http"}, "metrics_port", "integer"),
    ("readiness negative", {"readiness_window_seconds": "-5"}, "readiness_window_seconds", "positive"),
    ("log format", {"log_format": "xml"}, "log_format", "text, json"),
    ("log level", {"log_level": "TRACE"}, "log_level", "DEBUG, INFO, WARNING, ERROR"),
    ("boolean option", {"sync_topic_configs": "perhaps"}, "sync_topic_configs", "true or false"),
    ("client map is a string", {"source": "security.protocol=SSL"}, "source", "map of librdkafka"),
    ("source isolation overridden", {"source": {"isolation.level": "read_uncommitted"}},
     "source.isolation.level", "cannot be overridden"),
    ("target transactional.id overridden", {"target": {"transactional.id": "x"}}, "target.transactional.id",
     "cannot be overridden"),
    ("target idempotence overridden", {"target": {"enable.idempotence": False}}, "target.enable.idempotence",
     "cannot be overridden"),
    ("bootstrap inside the client map", {"target": {"bootstrap.servers": "x:1"}}, "target.bootstrap.servers",
     "target_bootstrap_servers"),
    ("client property name", {"source": {"Bad Key": "1"}}, "source.Bad Key", "librdkafka property"),
    ("client property nested", {"source": {"ssl.endpoint": {"a": 1}}}, "source.ssl.endpoint", "scalar"),
    ("security protocol misspelt", {"source": {"security.protocol": "PLAINTXT"}}, "source.security.protocol",
     "SASL_SSL"),
    ("sasl mechanism unknown", {"target": {"sasl.mechanism": "PLAIN2"}}, "target.sasl.mechanism", "SCRAM-SHA-512"),
    ("spark keys", {"spark": {"executor.memory": "1g"}}, "spark", "spark."),
    ("spark master in the map", {"spark": {"spark.master": "yarn"}}, "spark.spark.master", "'master' option"),
    ("target acks overridden", {"target": {"acks": "1"}}, "target.acks", "cannot be overridden"),
    ("target transaction timeout property", {"target": {"transaction.timeout.ms": "5"}},
     "target.transaction.timeout.ms", "transaction_timeout_ms"),
    ("unknown option", {"shardz": "4"}, "shardz", "did you mean 'shards'"),
]


def _flags(override: dict) -> dict:
    merged = {**BASE, **override}
    return {k: v for k, v in merged.items() if v is not MISSING}


def test_at_least_25_kinds_of_invalid_configuration_are_covered():
    assert len({key for _, _, key, _ in INVALID}) >= 25


@pytest.mark.parametrize("what, override, key, phrase", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_configuration_names_the_key(what, override, key, phrase):
    with pytest.raises(ConfigError) as e:
        load(_flags(override), environ={})
    assert e.value.key == key
    assert f"'{key}'" in str(e.value) and phrase in str(e.value), str(e.value)


@pytest.mark.parametrize("text, phrase", [
    ("shards: [1, 2", "not valid YAML"),
    ("- a list\n- at top level", "map of options"),
])
def test_invalid_config_files(tmp_path, text, phrase):
    e = _refused_file(tmp_path, text)
    assert e.key == "config" and phrase in str(e)


@pytest.mark.parametrize("line", [
    "sasl.password: @S3cr3t-pw", "sasl.password: `S3cr3t-pw", 'sasl.password: "S3cr3t-pw"x',
    "sasl.password: S3cr3t-pw: more", "sasl.password: 'S3cr3t-pw",
])
def test_a_config_file_that_is_not_yaml_is_refused_without_quoting_its_lines(tmp_path, line):
    """PyYAML's message quotes the offending line, which may hold a password."""
    msg = str(_refused_file(tmp_path, f"source:\n  {line}\n"))
    assert "not valid YAML" in msg and ("line 2," in msg or "line 3," in msg), msg
    assert "S3cr3t" not in msg and "@" not in msg and "`" not in msg, msg


@pytest.mark.parametrize("text, key, phrase", [
    ("groups:\n", "groups", "expected text, got nothing"),
    ("name: ~\n", "name", "expected text, got nothing"),
    ("source_alias: on\n", "source_alias", "got true/false"),
    ("target_alias: {orders: 1}\n", "target_alias", "got a map"),
    ("config_sync_exclude: {a: 1}\n", "config_sync_exclude", "a YAML list, or comma-separated"),
    ("offsets_group: [a, b]\n", "offsets_group", "got a list"),
    ("metrics_host:\n", "metrics_host", "expected text"),
    ("topics_exclude: 5\n", "topics_exclude", "a YAML list, or comma-separated"),
    ("groups_exclude: true\n", "groups_exclude", "a YAML list, or comma-separated"),
    ("source: {client.id: }\n", "source.client.id", "no value"),
])
def test_a_yaml_value_of_the_wrong_kind_is_refused_not_turned_into_text(tmp_path, text, key, phrase):
    """An empty `groups:` line was the regex 'None' (no group ever synced); `topics_exclude: 5` a traceback."""
    e = _refused_file(tmp_path, text)
    assert e.key == key and phrase in str(e), str(e)


@pytest.mark.parametrize("value", ["0777", "12:34:56", "1.10", "123456", "true"])
def test_an_unquoted_password_yaml_would_read_as_a_number_is_refused_unshown(tmp_path, value):
    path = tmp_path / "replicator.yaml"
    path.write_text(f"source:\n  sasl.password: {value}\ntarget:\n  sasl.password: '{value}'\n")
    with pytest.raises(ConfigError) as e:
        load(_flags({}), config_file=path, environ={})
    assert e.value.key == "source.sasl.password" and "quote the value" in str(e.value)
    assert value not in str(e.value) and str(yaml_number(value)) not in str(e.value)
    path.write_text(f"source:\n  sasl.password: '{value}'\n")
    assert load(_flags({}), config_file=path, environ={}).source["sasl.password"] == value


def yaml_number(text: str):
    import yaml

    return yaml.safe_load(text)


@pytest.mark.parametrize("text, key, phrase", [
    ("source:\n  sasl.username: u\ntopics: x\nsource:\n  sasl.password: pw\n", "config",
     "'source' is set twice (lines 1 and 4)"),
    ("topics_exclude: a\ntopics-exclude: b\n", "topics_exclude", "twice, under two spellings"),
    ("source:\n  linger.ms: 5\n  linger.ms: 6\n", "config", "'linger.ms' is set twice"),
])
def test_a_key_set_twice_in_the_file_is_refused(tmp_path, text, key, phrase):
    """PyYAML keeps the last of two equal keys: a second `source:` block dropped the first."""
    e = _refused_file(tmp_path, text)
    assert e.key == key and phrase in str(e), str(e)


def _refused_file(tmp_path, text: str) -> ConfigError:
    """The refusal of a config file holding `text`."""
    path = tmp_path / "replicator.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load(_flags({}), config_file=path, environ={})
    return e.value


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError) as e:
        load(_flags({}), config_file=tmp_path / "absent.yaml", environ={})
    assert e.value.key == "config" and "cannot read" in str(e.value)


def test_invalid_values_from_the_file_and_the_environment_name_the_key(tmp_path):
    path = tmp_path / "replicator.yaml"
    path.write_text("shards: -3\n")
    with pytest.raises(ConfigError) as e:
        load(_flags({}), config_file=path, environ={})
    assert e.value.key == "shards"
    with pytest.raises(ConfigError) as e:
        load(_flags({}), environ={"REPLICATOR_COMMIT_INTERVAL_MS": "lots"})
    assert e.value.key == "commit_interval_ms"


@pytest.mark.parametrize("value", ["two", True, 0, 5000])
def test_a_bounded_integer_names_its_whole_range_whatever_is_wrong(value):
    with pytest.raises(ConfigError) as e:
        load(_flags({"shards": value}), environ={})
    assert e.value.key == "shards" and "between 1 and 4096" in str(e.value), str(e.value)


@pytest.mark.parametrize("value", [0, -2, 40000, "three", True])
def test_replication_factor_refusals_name_the_default_too(value):
    with pytest.raises(ConfigError) as e:
        load(_flags({"replication_factor": value}), environ={})
    assert e.value.key == "replication_factor" and "-1" in str(e.value) and "32767" in str(e.value), str(e.value)


@pytest.mark.parametrize("value, factor", [("-1", -1), (-1, -1), (3, 3), ("2", 2)])
def test_replication_factor_accepts_the_default_and_counts(value, factor):
    assert load(_flags({"replication_factor": value}), environ={}).replication_factor == factor


@pytest.mark.parametrize("value", [True, False])
def test_a_yaml_boolean_is_not_taken_for_seconds(value):
    with pytest.raises(ConfigError) as e:
        load(_flags({"batch_duration_seconds": value}), environ={})
    assert e.value.key == "batch_duration_seconds" and "boolean" in str(e.value), str(e.value)


def test_choices_are_read_in_any_case_and_stored_as_documented():
    cfg = load(_flags({"log_level": "info", "guarantee": " Exactly-Once", "on_data_loss": "SKIP"}), environ={})
    assert (cfg.log_level, cfg.guarantee, cfg.on_data_loss) == ("INFO", "exactly-once", "skip")
    with pytest.raises(ConfigError) as e:
        load(_flags({"log_level": "verbose"}), environ={})
    assert e.value.key == "log_level" and "DEBUG, INFO, WARNING, ERROR" in str(e.value)


def test_secret_values_never_appear_in_errors():
    with pytest.raises(ConfigError) as e:
        load(_flags({"source": {"sasl.password": "hunter2", "security.protocol": "SASL_PLAINTXT"}}), environ={})
    assert "hunter2" not in str(e.value)
    assert is_secret("sasl.password")


def test_flags_win_over_environment_over_file(tmp_path):
    path = tmp_path / "replicator.yaml"
    path.write_text("shards: 2\nname: from-file\nlog_level: ERROR\n")
    cfg = load({**BASE, "shards": "8"}, config_file=path,
               environ={"REPLICATOR_SHARDS": "4", "REPLICATOR_NAME": "from-env"})
    assert (cfg.shards, cfg.name, cfg.log_level) == (8, "from-env", "ERROR")


def test_a_misspelt_environment_variable_is_named_with_the_option_it_resembles():
    environ = {
        "REPLICATOR_SHARD": "4", "REPLICATOR_TOPICS_EXCLUDES": "x", "REPLICATOR_METRIC_PORT": "9400",  # misspelt
        "REPLICATOR_SHARDS": "4", "REPLICATOR_SOURCE__SASL_PASSWORD": "pw", "REPLICATOR_SANDBOX_PORT_SHIFT": "1",
        "REPLICATOR_TEST_FAULT": "x", "REPLICATOR_APP_PASSWORD": "pw",  # an option, a property, the harness's, a ref
        # Kubernetes' service links of Services named replicator and replicator-metrics:
        "REPLICATOR_SERVICE_HOST": "10.0.0.1", "REPLICATOR_SERVICE_PORT_METRICS": "9400",
        "REPLICATOR_PORT": "tcp://10.0.0.1:9400", "REPLICATOR_METRIC_SERVICE_PORT": "9400",
        "REPLICATOR_ACME_PORT": "tcp://10.0.0.2:80", "REPLICATOR_METRICS_PORT_9400_TCP_ADDR": "10.0.0.1",
        "OTHER": "x"}
    assert ignored_environment(environ, referenced={"REPLICATOR_APP_PASSWORD"}) == [
        ("REPLICATOR_METRIC_PORT", "REPLICATOR_METRICS_PORT"), ("REPLICATOR_SHARD", "REPLICATOR_SHARDS"),
        ("REPLICATOR_TOPICS_EXCLUDES", "REPLICATOR_TOPICS_EXCLUDE")]


def test_the_cli_warns_of_an_ignored_variable_and_not_of_one_a_reference_reads(tmp_path, monkeypatch):
    from replicator.commands.options import ignored_environment_lines

    monkeypatch.setenv("REPLICATOR_SHARD", "4")
    monkeypatch.setenv("REPLICATOR_APP_PASSWORD", "pw")
    cfg = load(_flags({"target": {"sasl.password": "${env:REPLICATOR_APP_PASSWORD}"}}), environ={})
    lines = ignored_environment_lines(cfg)
    assert lines == ["environment variable REPLICATOR_SHARD is not an option and is ignored; "
                     "did you mean REPLICATOR_SHARDS?"]


def test_valid_configuration_with_security_settings_and_prefix_onto_the_same_cluster():
    cfg = load(_flags({"target_bootstrap_servers": "127.0.0.1:19092", "replication_policy": "prefix",
                       "source": {"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512"}}),
               environ={})
    assert cfg.source["security.protocol"] == "sasl_ssl"
    assert cfg.group == "__replicator.replicator"


def test_secret_client_properties_never_appear_in_repr_or_the_loggable_view(monkeypatch):
    monkeypatch.setenv("REPLICATOR_TEST_KEY_PW", "k3y")
    cfg = load(_flags({"target": {"sasl.password": "hunter2", "sasl.username": "alice",
                                  "ssl.key.password": "${env:REPLICATOR_TEST_KEY_PW}"}}), environ={})
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg) and "k3y" not in repr(cfg)
    shown = cfg.redacted()["target"]
    assert shown == {"sasl.password": "***", "sasl.username": "alice",
                     "ssl.key.password": "${env:REPLICATOR_TEST_KEY_PW}"}
    assert cfg.target["sasl.password"] == "hunter2"  # the job itself still has it


def test_a_secret_option_is_refused_without_echoing_its_value():
    """No scalar option is a secret yet; one that is marked so never has its value in a refusal."""
    token = Option(name="token", type="str", default="", check=accepts.job_name, section="x", doc="A token.",
                   secret=True)
    with pytest.raises(ConfigError) as e:
        _checked(token, "hunter 2")
    assert e.value.key == "token" and "hunter" not in str(e.value) and "letters, digits" in str(e.value)
    assert _redact("token", "hunter2") == "***" and _redact("token", "${env:TOKEN}") == "${env:TOKEN}"


def test_environment_client_properties_merge_into_the_files_map(tmp_path):
    path = tmp_path / "replicator.yaml"
    path.write_text("source:\n  security.protocol: SASL_SSL\n  sasl.username: alice\n")
    cfg = load(_flags({}), config_file=path, environ={"REPLICATOR_SOURCE__SASL_USERNAME": "bob",
                                                      "REPLICATOR_SOURCE__SASL_MECHANISM": "PLAIN"})
    assert cfg.source == {"security.protocol": "SASL_SSL", "sasl.username": "bob", "sasl.mechanism": "PLAIN"}
