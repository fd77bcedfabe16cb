"""The replicator's one configuration object: every option declared once, typed and validated.

Precedence: command-line flags > environment (`REPLICATOR_<OPTION>`) > YAML file > defaults.
Every bad value raises `ConfigError` naming the key and what is allowed, before any record moves.
Secrets (librdkafka passwords, keys, tokens) never appear in errors or logs: see `redacted()`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from replicator import secret_refs

ENV_PREFIX = "REPLICATOR_"
_SECRET_HINTS = ("password", "secret", "token", "jaas", "key.pem", "keystore.key", "private")
_BOOTSTRAP = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}(,[A-Za-z0-9._\-\[\]:]+:\d{1,5})*$")
# The brokers' default transaction.max.timeout.ms: a producer asking for more is refused at init_transactions().
_MAX_TRANSACTION_TIMEOUT_MS = 900_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,99}$")
_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://.+|k8s://.+|yarn|mesos://.+)$")
# Keys the replicator sets itself on its clients; overriding them would break exactly-once.
_RESERVED_CLIENT_KEYS = {
    "source": {"isolation.level", "enable.auto.commit", "group.id", "enable.partition.eof",
               "auto.offset.reset"},
    "target": {"transactional.id", "enable.idempotence", "isolation.level", "group.id"},
}


_CLIENT_CHOICES = {
    "security.protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    "sasl.mechanism": ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
    "sasl.mechanisms": ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
}


class ConfigError(ValueError):
    """An invalid configuration value; `key` names the option."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"invalid configuration '{key}': {message}")
        self.key = key


def is_secret(key: str) -> bool:
    k = key.lower()
    return any(h in k for h in _SECRET_HINTS)


def _cpu_count() -> int:
    return os.cpu_count() or 2


@dataclass(frozen=True)
class ReplicatorConfig:
    source_bootstrap_servers: str = ""
    target_bootstrap_servers: str = ""
    topics: str = ""
    topics_exclude: tuple[str, ...] = ()
    name: str = "replicator"
    offsets_group: str = ""
    shards: int = 0
    master: str = ""
    guarantee: str = "exactly-once"
    batch_duration_seconds: float = 300.0
    # How long a transaction stays open after its first record once the source is drained (longer
    # under load, see shard_copy): about one transaction per arrival of records, as MirrorMaker 2
    # commits one per poll. 10 ms kept p50 at 21-23 ms against 12-14 ms, for 0-15 % less CPU
    # (BENCHMARKS.md, 2026-11-27).
    commit_interval_ms: int = 2
    # A bound for aborts to re-copy, not for throughput: the time bounds end transactions first (at
    # 200,000, 100 B records ended a catch-up's transactions every 0.44 s, BENCHMARKS.md).
    max_records_per_transaction: int = 1_000_000
    # What a backlog may stretch a transaction to. Its records are invisible until it commits, so
    # this is also the lag a reader sees while the copy keeps up at its ceiling: at 10 s, a steady
    # rate near the ceiling flipped into seconds-long transactions and a visible lag that ran away
    # (BENCHMARKS.md, 105k rec/s). At 1 s the commit's drain still costs a few percent of catch-up.
    max_transaction_seconds: float = 1.0
    # What a transaction may grow to while at least this many seconds of records wait at the source
    # (a catch-up: a reader waits that long anyway). Half the commits of 1 s transactions; each
    # holds the copy loop for about four round trips (BENCHMARKS.md, 2026-12-01).
    catch_up_transaction_seconds: float = 2.0
    transaction_timeout_ms: int = 60_000
    trigger_interval_ms: int = 200
    on_data_loss: str = "fail"
    replication_policy: str = "identity"
    source_alias: str = "source"
    target_alias: str = "target"
    refresh_topics_interval_seconds: float = 10.0
    # Well inside the broker's offsets.retention.minutes (7 days by default) for idle partitions.
    offsets_refresh_interval_seconds: float = 86_400.0
    replication_factor: int = -1
    sync_topic_configs: bool = True
    # A sync describes every replicated topic's configs on both clusters: at 625 topics 260-600 ms
    # of CPU (confluent-kafka builds a Python object per config entry), which once a minute was
    # still a third of an idle job's cost at 5,000 partitions. MirrorMaker 2's default: 10 minutes.
    sync_topic_configs_interval_seconds: float = 600.0
    config_sync_exclude: tuple[str, ...] = ()
    provenance_header: bool = False
    # Exact source->target offset entries written in each copy transaction (consumer-group failover).
    translation_index: bool = True
    # Consumer-group checkpointing and sync (needs the translation index).
    group_sync_interval_seconds: float = 5.0
    groups: str = ".*"
    groups_exclude: tuple[str, ...] = ()  # on top of the internal groups, which are never synced
    sync_group_offsets: bool = True
    mm2_compatible_checkpoints: bool = False
    # Application ACLs follow the replication (consumers' READ continuously, producers' WRITE at
    # promotion: replicator.access.acl_sync); off where the principals may not, or set to false.
    sync_acls: bool = True
    metrics_port: int = 9400
    metrics_host: str = "0.0.0.0"
    readiness_window_seconds: float = 60.0
    log_format: str = "text"
    log_level: str = "INFO"
    source: Mapping[str, str] = field(default_factory=dict)
    target: Mapping[str, str] = field(default_factory=dict)
    spark: Mapping[str, str] = field(default_factory=dict)
    # Where the driver JVM's class-data archive is kept between runs (faster start-up); "off": none.
    spark_class_cache: str = "~/.cache/replicator"
    # Record the archive at this run's clean stop when there is none (the stop then waits for the JVM
    # to write it: seconds on an idle machine, minutes on a loaded one), e.g. once at image build.
    spark_class_cache_record: bool = False

    @property
    def group(self) -> str:
        return self.offsets_group or f"__replicator.{self.name}"

    @property
    def shard_count(self) -> int:
        return self.shards or _cpu_count()

    @property
    def spark_master(self) -> str:
        # local[N,F]: plain local[N] never retries a failed task.
        return self.master or f"local[{_cpu_count()},4]"

    @property
    def longest_transaction_seconds(self) -> float:
        """How long a transaction may grow: in a catch-up, or else keeping up (a catch-up bound at or
        below max_transaction_seconds turns catch-up transactions off)."""
        return max(self.max_transaction_seconds, self.catch_up_transaction_seconds)

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly-once"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ReplicatorConfig:
        raw = json.loads(text)
        for key in ("topics_exclude", "config_sync_exclude", "groups_exclude"):
            raw[key] = tuple(raw[key])
        return cls(**raw)

    def redacted(self) -> dict[str, Any]:
        """A loggable view: secret client properties replaced by '***' (references are kept: they
        say where the secret comes from, not what it is)."""
        out = dataclasses.asdict(self)
        for section in ("source", "target"):
            out[section] = {k: (v if secret_refs.reference(v) else "***") if is_secret(k) else v
                            for k, v in out[section].items()}
        return out

    def client_properties(self, section: str) -> dict[str, str]:
        """The `source:` or `target:` map with `${file:...}`/`${env:...}` references resolved, for a
        Kafka client about to be built. Never log or store the result."""
        return secret_refs.resolve(getattr(self, section), section)


def _positive_int(key: str, value: Any, minimum: int = 1, maximum: int | None = None) -> int:
    # One wording for every refusal, so a user who fixes the type is not surprised by the range next.
    bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
    if isinstance(value, bool):
        raise ConfigError(key, f"expected an integer {bound}, got a boolean")
    try:
        number = int(str(value).replace("_", ""))
    except ValueError:
        raise ConfigError(key, f"expected an integer {bound}, got {value!r}") from None
    if number < minimum or (maximum is not None and number > maximum):
        raise ConfigError(key, f"expected an integer {bound}, got {number}")
    return number


def _positive_float(key: str, value: Any) -> float:
    if isinstance(value, bool):  # YAML reads yes/no/on/off as booleans, and float(True) is 1.0
        raise ConfigError(key, "expected a finite positive number, got a boolean")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"expected a finite positive number, got {value!r}") from None
    if not 0 < number < float("inf"):
        raise ConfigError(key, f"expected a finite positive number, got {number}")
    return number


def _replication_factor(key: str, value: Any) -> int:
    if str(value).strip() == "-1":
        return -1
    try:
        return _positive_int(key, value, 1, 32767)
    except ConfigError:
        raise ConfigError(key, "expected -1 (the target broker's default) or an integer between 1 and 32767, "
                          f"got {value!r}") from None


def _choice(*allowed: str) -> Callable[[str, Any], str]:
    canonical = {a.lower(): a for a in allowed}

    def check(key: str, value: Any) -> str:
        # `log_level: info` or REPLICATOR_GUARANTEE=Exactly-Once mean what they say; only the spelling differs.
        found = canonical.get(value.strip().lower()) if isinstance(value, str) else None
        if found is None:
            raise ConfigError(key, f"expected one of {', '.join(allowed)}; got {value!r}")
        return found
    return check


def _host(key: str, value: Any) -> str:
    text = str(value).strip()
    if not re.match(r"^[A-Za-z0-9.\-:]+$", text):
        raise ConfigError(key, f"expected a host name or IP address to listen on, got {text!r}")
    return text


def _bootstrap(key: str, value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ConfigError(key, "required: a comma-separated list of host:port")
    if not _BOOTSTRAP.match(text):
        raise ConfigError(key, f"expected a comma-separated list of host:port, got {text!r}")
    for part in text.split(","):
        port = int(part.rsplit(":", 1)[1])
        if not 0 < port < 65536:
            raise ConfigError(key, f"port {port} is outside 1-65535")
    return text


def _regex(key: str, value: Any) -> str:
    text = str(value)
    if not text:
        raise ConfigError(key, "required: a regular expression matching source topic names")
    try:
        re.compile(text)
    except re.error as e:
        raise ConfigError(key, f"not a valid regular expression ({e})") from None
    return text


def _include_regex(key: str, value: Any) -> str:
    """One regex, or a YAML list of them folded into one alternation (full-matched either way)."""
    if isinstance(value, (list, tuple)):
        items = [_regex(key, v) for v in value]
        return "|".join(f"(?:{i})" for i in items) if items else _regex(key, "")
    return _regex(key, value)


def _boolean(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ConfigError(key, f"expected true or false, got {value!r}")


def _regex_list(key: str, value: Any) -> tuple[str, ...]:
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value or [])
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(key, f"expected a list of regular expressions, got {item!r}")
        _regex(key, item)
    return tuple(i for i in items if i)


def _name(key: str, value: Any) -> str:
    text = str(value)
    if not _NAME.match(text):
        raise ConfigError(key, "expected 1-100 characters of letters, digits, '.', '_' or '-', "
                               f"starting with a letter or digit; got {text!r}")
    return text


def _alias(key: str, value: Any) -> str:
    # No '.': it separates the alias from the topic in prefix-policy names (`alias.topic`).
    text = str(value)
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,99}$", text):
        raise ConfigError(key, f"expected letters, digits, '_' or '-' (no '.'), got {text!r}")
    return text


def _group(key: str, value: Any) -> str:
    text = str(value)
    if text and (len(text) > 249 or not re.match(r"^[A-Za-z0-9._\-]+$", text)):
        raise ConfigError(key, "expected up to 249 characters of letters, digits, '.', '_' or '-'")
    return text


def _master(key: str, value: Any) -> str:
    text = str(value)
    if text and not _MASTER.match(text):
        raise ConfigError(key, "expected a Spark master URL: local, local[N], local[N,F], local[*], "
                               f"spark://host:port, k8s://..., yarn; got {text!r}")
    return text


def _client_props(section: str) -> Callable[[str, Any], dict[str, str]]:
    def check(key: str, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(key, "expected a map of librdkafka properties (key: value)")
        out: dict[str, str] = {}
        for k, v in value.items():
            if not isinstance(k, str) or not re.match(r"^[a-z0-9][a-z0-9._\-]*$", k):
                raise ConfigError(f"{key}.{k}", "not a librdkafka property name")
            if k in _RESERVED_CLIENT_KEYS[section]:
                raise ConfigError(f"{key}.{k}", "set by the replicator itself (exactly-once depends on "
                                                "it) and cannot be overridden")
            if k == "bootstrap.servers":
                raise ConfigError(f"{key}.{k}", f"use '{section}_bootstrap_servers' instead")
            if isinstance(v, (dict, list)):
                raise ConfigError(f"{key}.{k}", "expected a scalar value")
            out[k] = str(v).lower() if isinstance(v, bool) else str(v)
            # A misspelt security setting otherwise surfaces only as an opaque connection failure.
            allowed = _CLIENT_CHOICES.get(k)
            if allowed and out[k].upper() not in allowed:
                raise ConfigError(f"{key}.{k}", f"expected one of {', '.join(allowed)}; got {out[k]!r}")
            try:
                secret_refs.resolve_value(f"{key}.{k}", out[k])  # fail now, not at the first connection
            except secret_refs.SecretReferenceError as e:
                raise ConfigError(f"{key}.{k}", str(e).split(": ", 1)[1]) from None
        return out
    return check


def _spark_conf(key: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(str(k).startswith("spark.") for k in value):
        raise ConfigError(key, "expected a map of Spark properties whose keys start with 'spark.'")
    return {str(k): str(v) for k, v in value.items()}


def _class_cache(key: str, value: Any) -> str:
    text = str(value).strip()
    if text != "off" and not (text.startswith("/") or text.startswith("~")):
        raise ConfigError(key, "expected an absolute directory (or ~/...) or 'off'")
    return text


_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "source_bootstrap_servers": _bootstrap,
    "target_bootstrap_servers": _bootstrap,
    "topics": _include_regex,
    "topics_exclude": _regex_list,
    "name": _name,
    "offsets_group": _group,
    "shards": lambda k, v: _positive_int(k, v, 1, 4096),
    "master": _master,
    "guarantee": _choice("exactly-once", "at-least-once"),
    "batch_duration_seconds": _positive_float,
    "commit_interval_ms": lambda k, v: _positive_int(k, v, 1, 60_000),
    "max_records_per_transaction": lambda k, v: _positive_int(k, v, 1),
    "max_transaction_seconds": _positive_float,
    "catch_up_transaction_seconds": _positive_float,
    "transaction_timeout_ms": lambda k, v: _positive_int(k, v, 1000, _MAX_TRANSACTION_TIMEOUT_MS),
    "trigger_interval_ms": lambda k, v: _positive_int(k, v, 0),
    "on_data_loss": _choice("fail", "skip"),
    "replication_policy": _choice("identity", "prefix"),
    "source_alias": _alias,
    "target_alias": _alias,
    "refresh_topics_interval_seconds": _positive_float,
    "offsets_refresh_interval_seconds": _positive_float,
    "replication_factor": _replication_factor,
    "sync_topic_configs": _boolean,
    "sync_topic_configs_interval_seconds": _positive_float,
    "config_sync_exclude": _regex_list,
    "provenance_header": _boolean,
    "translation_index": _boolean,
    "group_sync_interval_seconds": _positive_float,
    "groups": _include_regex,
    "groups_exclude": _regex_list,
    "sync_group_offsets": _boolean,
    "mm2_compatible_checkpoints": _boolean,
    "sync_acls": _boolean,
    "metrics_port": lambda k, v: _positive_int(k, v, 0, 65535),
    "metrics_host": _host,
    "readiness_window_seconds": _positive_float,
    "log_format": _choice("text", "json"),
    "log_level": _choice("DEBUG", "INFO", "WARNING", "ERROR"),
    "source": _client_props("source"),
    "target": _client_props("target"),
    "spark": _spark_conf,
    "spark_class_cache": _class_cache,
    "spark_class_cache_record": _boolean,
}
OPTIONS = tuple(_VALIDATORS)


def _normalise_key(key: str) -> str:
    return key.strip().replace("-", "_").lower()


def read_file(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError("config", f"cannot read {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError("config", f"{path} is not valid YAML ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} must hold a map of options at top level")
    return {_normalise_key(str(k)): v for k, v in data.items()}


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for env_key, value in environ.items():
        if not env_key.startswith(ENV_PREFIX) or env_key.startswith(ENV_PREFIX + "TEST_"):
            continue
        rest = env_key[len(ENV_PREFIX):]
        # REPLICATOR_SOURCE__SASL_PASSWORD=... sets source: {sasl.password: ...}
        section, sep, prop = rest.partition("__")
        if sep and section.lower() in ("source", "target"):
            out.setdefault(f"{section.lower()}.", {})[prop.lower().replace("_", ".")] = value
            continue
        key = _normalise_key(rest)
        if key in _VALIDATORS and key not in ("source", "target", "spark"):
            out[key] = value
    return out


def load(flags: Mapping[str, Any] | None = None, config_file: str | Path | None = None,
         environ: Mapping[str, str] | None = None) -> ReplicatorConfig:
    """Merges file, environment and flags (in rising precedence) and validates every value."""
    merged: dict[str, Any] = {}
    if config_file:
        merged.update(read_file(config_file))
    env = from_environment(os.environ if environ is None else environ)
    for section in ("source", "target"):
        extra = env.pop(f"{section}.", None)
        if extra:
            base = merged.get(section) or {}
            if not isinstance(base, Mapping):
                raise ConfigError(section, "expected a map of librdkafka properties (key: value)")
            merged[section] = {**base, **extra}
    merged.update(env)
    merged.update({_normalise_key(k): v for k, v in (flags or {}).items() if v is not None})

    unknown = sorted(set(merged) - set(_VALIDATORS))
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], OPTIONS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(unknown[0], f"unknown option; {hint}known options are: {', '.join(OPTIONS)}")
    values = {key: _VALIDATORS[key](key, value) for key, value in merged.items()}
    for required in ("source_bootstrap_servers", "target_bootstrap_servers", "topics"):
        if required not in values:
            _VALIDATORS[required](required, "")
    config = ReplicatorConfig(**values)
    if (config.replication_policy == "identity"
            and set(config.source_bootstrap_servers.split(",")) & set(config.target_bootstrap_servers.split(","))):
        raise ConfigError("target_bootstrap_servers", "names the source cluster: with the identity policy every "
                                                      "topic would be copied onto itself; use another cluster or "
                                                      "replication_policy=prefix")
    if config.transaction_timeout_ms < config.longest_transaction_seconds * 1000 * 2:
        longest, needed = config.longest_transaction_seconds, math.ceil(config.longest_transaction_seconds * 2000)
        fix = (f"use >= {needed} or shorter transactions" if needed <= _MAX_TRANSACTION_TIMEOUT_MS else
               f"transactions can last at most {_MAX_TRANSACTION_TIMEOUT_MS // 2000} s")
        raise ConfigError("transaction_timeout_ms", f"{config.transaction_timeout_ms} ms must be at least twice the "
                                                    f"longest transaction, {longest:g} s (the larger of "
                                                    "max_transaction_seconds and catch_up_transaction_seconds), so "
                                                    f"a transaction never outlives its timeout: {fix}")
    return config
