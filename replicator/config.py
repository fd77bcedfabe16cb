"""The replicator's one configuration object: every option declared once, in the table below.

Each `ReplicatorConfig` field is one row of the option table: its name, type and default are the
field's; `option(...)` adds how a value is checked, its doc, its section, whether it is a secret, its
environment variable and its command-line flag. Validation, the environment, the CLI flags with their
help (replicator/commands/options.py) and docs/configuration.md (`python -m replicator.config_docs`)
all come from that table. To add an option: add one field here, regenerate the docs.

Precedence: command-line flags > environment (`REPLICATOR_<OPTION>`) > YAML file > defaults.
Every bad value raises `ConfigError` naming the key and what is allowed, before any record moves.
Secrets (librdkafka passwords, keys, tokens) never appear in errors, logs or repr: see `redacted()`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from replicator import config_checks as accepts
from replicator import names, secret_refs
from replicator.config_checks import SECRET_HINTS, Check, ConfigError, is_secret

__all__ = ["ConfigError", "ENV_PREFIX", "OPTIONS", "Option", "ReplicatorConfig", "SECRET_HINTS", "TABLE", "is_secret",
           "load"]

ENV_PREFIX = "REPLICATOR_"
# The brokers' default transaction.max.timeout.ms: a producer asking for more is refused at init_transactions().
_MAX_TRANSACTION_TIMEOUT_MS = 900_000

# Sections of docs/configuration.md, in the order they appear there.
CLUSTERS = "Clusters"
TOPICS = "Topics"
JOB = "Job and Spark"
TRANSACTIONS = "Transactions"
GROUPS = "Consumer groups"
OBSERVABILITY = "Observability"
# Which commands take an option as a command-line flag.
CONNECTION = "every command"  # every command that talks to a replication's clusters
RUN = "run"


def _cpu_count() -> int:
    return os.cpu_count() or 2


@dataclass(frozen=True)
class Option:
    """One row of the option table, as `TABLE` lists them."""

    name: str
    type: str  # the field's annotation, e.g. "int", "tuple[str, ...]"
    default: Any
    check: Check  # its docstring says what is accepted
    section: str
    doc: str
    default_doc: str | None = None  # a computed default, said in words ("the number of cores")
    flag_for: str | None = None  # CONNECTION, RUN or None: no command-line flag
    # "value": REPLICATOR_<NAME> sets it; "properties": REPLICATOR_<NAME>__<PROPERTY> sets one property
    # of the map; "none": no environment variable.
    env: str = "value"
    secret: bool = False  # a map: values of its secret-looking keys; otherwise its whole value
    required: bool = False

    @property
    def flag(self) -> str | None:
        return f"--{self.name.replace('_', '-')}" if self.flag_for else None

    @property
    def env_var(self) -> str | None:
        return {"value": ENV_PREFIX + self.name.upper(), "properties": f"{ENV_PREFIX}{self.name.upper()}__<PROPERTY>",
                "none": None}[self.env]

    @property
    def shown_default(self) -> str:
        if self.required:
            return "required"
        if self.default_doc:
            return self.default_doc
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, float):
            return f"{self.default:g}"
        if self.default in ("", (), {}):
            return "none"
        return str(self.default)


def option(default: Any, check: Check, section: str, doc: str, **row: Any) -> Any:
    """A `ReplicatorConfig` field that is a row of the option table (`row`: Option's optional columns)."""
    spec = {"check": check, "section": section, "doc": doc, **row}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata={"option": spec})
    return field(default=default, metadata={"option": spec})


@dataclass(frozen=True, repr=False)
class ReplicatorConfig:
    # --- Clusters
    source_bootstrap_servers: str = option(
        "", accepts.bootstrap_servers, CLUSTERS, "The source cluster's brokers, host:port[,host:port...].",
        flag_for=CONNECTION, required=True)
    target_bootstrap_servers: str = option(
        "", accepts.bootstrap_servers, CLUSTERS, "The target cluster's brokers, host:port[,host:port...]: it holds the "
        "copies and the job's offsets, and is the only source of truth.", flag_for=CONNECTION, required=True)
    source: Mapping[str, str] = option(
        {}, accepts.client_properties("source"), CLUSTERS, "librdkafka properties of the source clients (TLS, SASL, "
        "tuning). `REPLICATOR_SOURCE__SASL_PASSWORD=...` sets `sasl.password` (`_` for each `.`). The lag "
        "lookup, fencing and `verify` use kafka-python, which takes only the connection properties: "
        "`security.protocol`, `sasl.mechanism(s)`, `sasl.username`, `sasl.password`, `sasl.kerberos.service.name`, "
        "`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`, `ssl.crl.location`, "
        "`ssl.endpoint.identification.algorithm`, `enable.ssl.certificate.verification` and `client.id`; give TLS "
        "material as files, not `ssl.*.pem`.",
        env="properties", secret=True)
    target: Mapping[str, str] = option(
        {}, accepts.client_properties("target"), CLUSTERS, "librdkafka properties of the target clients; "
        "`REPLICATOR_TARGET__<PROPERTY>` sets one, as for `source`.", env="properties", secret=True)

    # --- Topics
    topics: str = option(
        "", accepts.include_regex, TOPICS, "Source topics to replicate: a regex matching whole names. Internal "
        "topics (`__.*`, `.*[-.]internal`, `.*\\.replica`) never are.", flag_for=CONNECTION, required=True)
    topics_exclude: tuple[str, ...] = option(
        (), accepts.regex_list, TOPICS, "Regexes of source topics not to replicate, although `topics` matches them: "
        "an exclude always wins.", flag_for=CONNECTION)
    replication_policy: str = option(
        "identity", accepts.choice("identity", "prefix"), TOPICS, "How target topics are named: `identity` keeps the "
        "source name; `prefix` names them `<source_alias>.<topic>`, as MirrorMaker 2's default.",
        flag_for=CONNECTION)
    source_alias: str = option(
        "source", accepts.alias, TOPICS, "The source cluster's alias: the prefix of target topic names under the "
        "`prefix` policy.", flag_for=CONNECTION)
    target_alias: str = option(
        "target", accepts.alias, TOPICS, "The target cluster's alias: a source topic whose name carries it as a "
        "prefix is a replica from the target and is never sent back.", flag_for=CONNECTION)
    refresh_topics_interval_seconds: float = option(
        10.0, accepts.positive_number, TOPICS, "How often new matching topics and added partitions are looked for "
        "(new topics are copied from their earliest offset).")
    replication_factor: int = option(
        -1, accepts.replication_factor, TOPICS, "Replication factor of the target topics the job creates.",
        default_doc="-1 (the target broker's default)")
    sync_topic_configs: bool = option(
        True, accepts.boolean, TOPICS, "Keep the target topics' configs in line with the source topics' overrides "
        "(minus per-cluster settings).")
    # A sync describes every replicated topic's configs on both clusters: at 625 topics 260-600 ms
    # of CPU (confluent-kafka builds a Python object per config entry), which once a minute was
    # still a third of an idle job's cost at 5,000 partitions. MirrorMaker 2's default: 10 minutes.
    sync_topic_configs_interval_seconds: float = option(
        600.0, accepts.positive_number, TOPICS, "How often topic configs are synced again.")
    config_sync_exclude: tuple[str, ...] = option(
        (), accepts.regex_list, TOPICS, "Topic config names never copied to the target, on top of the per-cluster "
        "ones.")
    provenance_header: bool = option(
        False, accepts.boolean, TOPICS, "Mark every copied record with a `replicator.source.cluster` header and "
        "never copy a record that came from the target: stops an active/active `identity` pair from looping.")

    # --- Job and Spark
    name: str = option(
        "replicator", accepts.job_name, JOB, "The job's name: it prefixes the transactional ids and names the "
        "default offsets group. Two jobs writing one target need two names.", flag_for=CONNECTION)
    offsets_group: str = option(
        "", accepts.group_id, JOB, "The (fake) consumer group on the target that holds the copied source offsets, "
        "committed in the same transactions as the records.", default_doc="`__replicator.<name>`",
        flag_for=CONNECTION)
    guarantee: str = option(
        "exactly-once", accepts.choice("exactly-once", "at-least-once"), JOB, "`exactly-once`: records and offsets "
        "in one target transaction. `at-least-once`: no transactions; offsets are committed after the records, so "
        "a failure can copy some records twice.", flag_for=RUN)
    shards: int = option(
        0, accepts.integer(1, 4096), JOB, "Transactional shards: each copies its share of the partitions in one "
        "Spark task with its own transactional id. Each needs a task slot of the Spark master.",
        default_doc="the number of cores", flag_for=RUN)
    master: str = option(
        "", accepts.spark_master, JOB, "Spark master URL: where the shards' tasks run.",
        default_doc="`local[<cores>,4]`: local, with task retries", flag_for=RUN)
    batch_duration_seconds: float = option(
        300.0, accepts.positive_number, JOB, "How long a shard task copies before the next micro-batch plans "
        "again (new topics and partitions join at that boundary, or sooner when partitions change).", flag_for=RUN)
    trigger_interval_ms: int = option(
        200, accepts.integer(0), JOB, "Spark's processing-time trigger: the least time between the starts of two "
        "micro-batches (a longer batch is followed at once; 0: no wait).")
    on_data_loss: str = option(
        "fail", accepts.choice("fail", "skip"), JOB, "When retention deleted source records before they were "
        "copied: `fail` stops naming the partition and range; `skip` continues from the log start, logging and "
        "counting the loss.", flag_for=RUN)
    spark: Mapping[str, str] = option(
        {}, accepts.spark_properties, JOB, "Spark properties for the job's session.", env="none")
    # Where the driver JVM's class-data archive is kept between runs (faster start-up): spark_cache.
    spark_class_cache: str = option(
        "auto", accepts.cache_directory, JOB, "Where the driver JVM's class-data archive (half the JVM's start-up "
        "CPU) and the Python workers' SPARK_HOME are kept between runs: `auto` is `$XDG_CACHE_HOME/replicator`, "
        "else `~/.cache/replicator`; an absolute directory; `off`: none (e.g. a read-only filesystem). An archive "
        "already there is used even when the directory is read-only.")
    # A job's own JVM can only write an archive as it exits, which a crash never reaches: the recorder
    # is a separate process, so the first restart after an install is already fast (class_recorder).
    spark_class_cache_record: bool = option(
        True, accepts.boolean, JOB, "When `spark_class_cache` holds no archive for this JVM and Spark, record one "
        "in the background for the next start: a separate short-lived JVM at the lowest CPU priority (a minute on an "
        "idle machine, several on a busy one; up to ~750 MiB as it writes the archive); `false`: only use an archive "
        "that is there already.")

    # --- Transactions
    # About one transaction per arrival of records, as MirrorMaker 2 commits one per poll. 10 ms kept
    # p50 at 21-23 ms against 12-14 ms, for 0-15 % less CPU (docs/design.md, "How a transaction is sized").
    commit_interval_ms: int = option(
        2, accepts.integer(1, 60_000), TRANSACTIONS, "How long a transaction stays open after its first record "
        "once the source is drained (longer under load).", flag_for=RUN)
    # A bound for aborts to re-copy, not for throughput: the time bounds end transactions first (at
    # 200,000, 100 B records ended a catch-up's transactions every 0.44 s, BENCHMARKS.md).
    max_records_per_transaction: int = option(
        1_000_000, accepts.integer(1), TRANSACTIONS, "The most records in one target transaction: bounds what an "
        "abort copies again.", flag_for=RUN)
    # At 10 s, a steady rate near the ceiling flipped into seconds-long transactions and a visible lag
    # that ran away (BENCHMARKS.md, 105k rec/s). At 1 s the commit's drain still costs a few percent.
    max_transaction_seconds: float = option(
        1.0, accepts.positive_number, TRANSACTIONS, "How long a backlog may stretch a transaction. Records are "
        "invisible until their transaction commits, so this is also the lag a reader sees while the copy runs "
        "at its ceiling.")
    # Half the commits of 1 s transactions; each holds the copy loop for about four round trips
    # (docs/design.md, "How a transaction is sized").
    catch_up_transaction_seconds: float = option(
        2.0, accepts.positive_number, TRANSACTIONS, "How long a transaction may grow while at least this many "
        "seconds of records wait at the source (a catch-up: a reader waits that long anyway); longer when commits "
        "are slow (a target across a WAN link): nine durations of the quickest of the last five commits, within "
        "half of transaction_timeout_ms. At or below max_transaction_seconds: no catch-up transactions.")
    transaction_timeout_ms: int = option(
        60_000, accepts.integer(1000, _MAX_TRANSACTION_TIMEOUT_MS), TRANSACTIONS, "The target producers' "
        "transaction.timeout.ms: a transaction left open by a dead task is aborted by the broker after it. At "
        "most the brokers' transaction.max.timeout.ms (900000 by default).")
    # Well inside the broker's offsets.retention.minutes (7 days by default) for idle partitions.
    offsets_refresh_interval_seconds: float = option(
        86_400.0, accepts.positive_number, TRANSACTIONS, "How often an idle partition's unchanged offset is "
        "committed again, so the broker's offsets.retention.minutes never expires it.")

    # --- Consumer groups
    translation_index: bool = option(
        True, accepts.boolean, GROUPS, "Write exact source->target offset entries in each copy transaction, for "
        "consumer-group offset translation and failover; everything below needs it. A start also reads it to "
        "resume where the target's committed copies end when the offsets group is behind them.")
    group_sync_interval_seconds: float = option(
        5.0, accepts.positive_number, GROUPS, "How often the selected source groups' offsets are translated, "
        "checkpointed on the target and synced.")
    groups: str = option(
        ".*", accepts.include_regex, GROUPS, "Source consumer groups to checkpoint and sync. Internal groups, "
        "MirrorMaker 2's and every replicator's own never are.")
    groups_exclude: tuple[str, ...] = option(
        (), accepts.regex_list, GROUPS, "Source consumer groups not to sync, although `groups` matches them.")
    sync_group_offsets: bool = option(
        True, accepts.boolean, GROUPS, "Commit the translated offsets into the same-named target groups while no "
        "application consumes there.")
    mm2_compatible_checkpoints: bool = option(
        False, accepts.boolean, GROUPS, "Also write MirrorMaker 2's `<source_alias>.checkpoints.internal`, for "
        "RemoteClusterUtils and MirrorMaker 2 tooling.")

    # Consumers' READ continuously, producers' WRITE at promotion (replicator.access.acl_sync).
    sync_acls: bool = option(
        True, accepts.boolean, GROUPS, "Copy application ACLs to the target: READ/DESCRIBE of replicated topics and "
        "READ of synced groups while running (ALL becomes READ; WRITE, ALTER and DENY never), the producers' "
        "WRITE/DESCRIBE at switchover/failover. Off by itself where the job's principals may not describe or create "
        "ACLs.")

    # --- Observability
    metrics_port: int = option(
        9400, accepts.integer(0, 65535), OBSERVABILITY, "Port of /metrics, /healthz and /readyz; 0: any free port.",
        flag_for=RUN)
    metrics_host: str = option(
        "0.0.0.0", accepts.listen_host, OBSERVABILITY, "Address the metrics port binds to (127.0.0.1 keeps it on "
        "loopback).", flag_for=RUN)
    readiness_window_seconds: float = option(
        60.0, accepts.positive_number, OBSERVABILITY, "/readyz answers 200 when a micro-batch committed, or the "
        "job was seen caught up (lag 0), within this many seconds.")
    # Inside Kubernetes' 90 s terminationGracePeriodSeconds with room for the process's exit
    # (engine/stop_budget.py; tests/unit/test_stop_budget.py checks every manifest).
    shutdown_timeout_seconds: float = option(
        60.0, accepts.shutdown_timeout, OBSERVABILITY, "A stop (SIGTERM/SIGINT) ends within this many seconds, "
        "whatever cluster is down; a stop that could not commit or fence what was open exits 1.", flag_for=RUN)
    accept_target_cluster_id: str = option(
        "", accepts.cluster_id, JOB, "Accept this new target cluster once in place of the one the job copied "
        "into (a rebuilt target, a failback); the job's refusal prints the id. Left set, it never accepts any "
        "other cluster.", flag_for=RUN)
    log_format: str = option(
        "text", accepts.choice("text", "json"), OBSERVABILITY, "The job's log lines (Spark's too): plain text or "
        "one JSON object per line.", flag_for=RUN)
    log_level: str = option(
        "INFO", accepts.choice("DEBUG", "INFO", "WARNING", "ERROR"), OBSERVABILITY, "The least severe level "
        "logged (Spark's own lines: ERROR and worse).")

    @property
    def group(self) -> str:
        return self.offsets_group or names.offsets_group(self.name)

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
        for opt in TABLE:
            if opt.type.startswith("tuple"):
                raw[opt.name] = tuple(raw[opt.name])
        return cls(**raw)

    def redacted(self) -> dict[str, Any]:
        """A loggable view: secret values replaced by '***' (references are kept: they say where the
        secret comes from, not what it is)."""
        out = dataclasses.asdict(self)
        for opt in TABLE:
            if opt.secret:
                out[opt.name] = _redact(opt.name, out[opt.name])
        return out

    def __repr__(self) -> str:
        return f"ReplicatorConfig({', '.join(f'{k}={v!r}' for k, v in self.redacted().items())})"

    def client_properties(self, section: str) -> dict[str, str]:
        """The `source:` or `target:` map with `${file:...}`/`${env:...}` references resolved, for a
        Kafka client about to be built. Never log or store the result."""
        return secret_refs.resolve(getattr(self, section), section)


def _redact(key: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _redact(k, v) if is_secret(k) else v for k, v in value.items()}
    return value if isinstance(value, str) and secret_refs.reference(value) else "***"


TABLE: tuple[Option, ...] = tuple(
    Option(name=f.name, type=str(f.type), default=f.default if f.default is not dataclasses.MISSING else {},
           **f.metadata["option"])
    for f in dataclasses.fields(ReplicatorConfig))
_BY_NAME = {opt.name: opt for opt in TABLE}
OPTIONS = tuple(_BY_NAME)
_PROPERTY_MAPS = tuple(opt.name for opt in TABLE if opt.env == "properties")


def _not_onto_itself(config: ReplicatorConfig) -> None:
    """With the `identity` policy, the target may not share a broker with the source (every topic would be
    copied onto itself)."""
    if (config.replication_policy == "identity"
            and set(config.source_bootstrap_servers.split(",")) & set(config.target_bootstrap_servers.split(","))):
        raise ConfigError("target_bootstrap_servers", "names the source cluster: with the identity policy every "
                                                      "topic would be copied onto itself; use another cluster or "
                                                      "replication_policy=prefix")


def _timeout_outlasts_transactions(config: ReplicatorConfig) -> None:
    """`transaction_timeout_ms` is at least twice the longest transaction (the larger of
    `max_transaction_seconds` and `catch_up_transaction_seconds`), so a transaction never outlives its
    timeout."""
    if config.transaction_timeout_ms < config.longest_transaction_seconds * 1000 * 2:
        longest, needed = config.longest_transaction_seconds, math.ceil(config.longest_transaction_seconds * 2000)
        fix = (f"use >= {needed} or shorter transactions" if needed <= _MAX_TRANSACTION_TIMEOUT_MS else
               f"transactions can last at most {_MAX_TRANSACTION_TIMEOUT_MS // 2000} s")
        raise ConfigError("transaction_timeout_ms", f"{config.transaction_timeout_ms} ms must be at least twice the "
                                                    f"longest transaction, {longest:g} s (the larger of "
                                                    "max_transaction_seconds and catch_up_transaction_seconds), so "
                                                    f"a transaction never outlives its timeout: {fix}")


# Checks of options against each other, after each option's own; docs/configuration.md lists their docstrings.
CROSS_CHECKS = (_not_onto_itself, _timeout_outlasts_transactions)


def _normalise_key(key: str) -> str:
    return key.strip().replace("-", "_").lower()


def _checked(opt: Option, value: Any) -> Any:
    try:
        return opt.check(opt.name, value)
    except ConfigError as e:
        # A scalar check may echo the value it refuses; a map's refusals never echo its values.
        if opt.secret and e.key == opt.name and not opt.type.startswith("Mapping"):
            raise ConfigError(opt.name, f"expected {opt.check.__doc__} (the value is not shown: it may hold a "
                                        "secret)") from None
        raise


def read_file(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError("config", f"cannot read {path}: {e.strerror}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader) or {}
    except _DuplicateKey as e:
        raise ConfigError("config", f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError("config", f"{path} is not valid YAML ({_yaml_error_without_text(e)})") from None
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} must hold a map of options at top level")
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = _normalise_key(str(k))
        if key in out:  # topics-exclude next to topics_exclude: only one would count
            raise ConfigError(key, f"{path} sets it twice, under two spellings")
        out[key] = v
    return out


class _DuplicateKey(ValueError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys: a second `source:` block silently dropped the first,
    credentials and all. Refused instead, naming the key and both lines."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise _DuplicateKey(f"'{key}' is set twice (lines {seen[key]} and {key_node.start_mark.line + 1}); "
                                    "only one can count")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _yaml_error_without_text(e: yaml.YAMLError) -> str:
    """What PyYAML found and where, without the snippet of the file its message quotes: the line
    it quotes may hold a password."""
    if not isinstance(e, yaml.MarkedYAMLError):
        return type(e).__name__
    what = "; ".join(x for x in (e.context, e.problem) if x) or "syntax error"
    what = re.sub(r"'(?!<)[^']*'", "(hidden)", what)  # "found character '@'": a password's first character
    mark = e.problem_mark or e.context_mark
    return f"{what}, line {mark.line + 1}, column {mark.column + 1}" if mark else what


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for env_key, value in environ.items():
        if not env_key.startswith(ENV_PREFIX) or env_key.startswith(ENV_PREFIX + "TEST_"):
            continue
        rest = env_key[len(ENV_PREFIX):]
        # REPLICATOR_SOURCE__SASL_PASSWORD=... sets source: {sasl.password: ...}
        section, sep, prop = rest.partition("__")
        if sep and section.lower() in _PROPERTY_MAPS:
            out.setdefault(f"{section.lower()}.", {})[prop.lower().replace("_", ".")] = value
            continue
        key = _normalise_key(rest)
        if key in _BY_NAME and _BY_NAME[key].env == "value":
            out[key] = value
    return out


# REPLICATOR_* variables that are not options: the sandbox's, the test and benchmark harnesses'.
_OTHER_ENV = ("SANDBOX_", "CACHE_DIR", "TEST_", "CHAOS_", "SOAK_", "BENCH_", "K8S_")
# What Kubernetes injects for a Service named replicator or replicator-<x> (service links):
# <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT[_<port name>], <NAME>_PORT[_<n>_<PROTO>[_ADDR|_PORT|_PROTO]].
# <NAME>_PORT alone only with its tcp://<ip>:<port> value: REPLICATOR_METRIC_PORT=9400 is a typo.
_SERVICE_LINK = re.compile(r"(?:[A-Z0-9_]+_)?(?:SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?"
                           r"|PORT_\d+_(?:TCP|UDP|SCTP)(?:_ADDR|_PORT|_PROTO)?)")
_SERVICE_PORT = re.compile(r"(?:[A-Z0-9_]+_)?PORT")
_SERVICE_ADDRESS = re.compile(r"(?:tcp|udp|sctp)://")


def ignored_environment(environ: Mapping[str, str], referenced: Iterable[str] = ()) -> list[tuple[str, str | None]]:
    """REPLICATOR_* variables that set nothing (a misspelt option), each with the closest option's
    variable; `referenced`: those a `${env:NAME}` value reads. Not refused: Kubernetes puts service
    links of the same shape into every pod."""
    env_options = [f"{ENV_PREFIX}{opt.name.upper()}" for opt in TABLE if opt.env == "value"]
    skip = set(referenced)
    out = []
    for name in sorted(environ):
        rest = name[len(ENV_PREFIX):]
        if (not name.startswith(ENV_PREFIX) or name in skip or rest.startswith(_OTHER_ENV)
                or _SERVICE_LINK.fullmatch(rest)
                or (_SERVICE_PORT.fullmatch(rest) and _SERVICE_ADDRESS.match(environ[name]))):
            continue
        section, sep, _ = rest.partition("__")
        if (sep and section.lower() in _PROPERTY_MAPS) or _normalise_key(rest) in _BY_NAME:
            continue
        close = difflib.get_close_matches(name, env_options, n=1)
        out.append((name, close[0] if close else None))
    return out


def load(flags: Mapping[str, Any] | None = None, config_file: str | Path | None = None,
         environ: Mapping[str, str] | None = None) -> ReplicatorConfig:
    """Merges file, environment and flags (in rising precedence) and validates every value."""
    merged: dict[str, Any] = {}
    if config_file:
        merged.update(read_file(config_file))
    env = from_environment(os.environ if environ is None else environ)
    for section in _PROPERTY_MAPS:
        extra = env.pop(f"{section}.", None)
        if extra:
            base = merged.get(section) or {}
            if not isinstance(base, Mapping):
                raise ConfigError(section, "expected a map of librdkafka properties (key: value)")
            merged[section] = {**base, **extra}
    merged.update(env)
    merged.update({_normalise_key(k): v for k, v in (flags or {}).items() if v is not None})

    unknown = sorted(set(merged) - set(_BY_NAME))
    if unknown:
        close = difflib.get_close_matches(unknown[0], OPTIONS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(unknown[0], f"unknown option; {hint}known options are: {', '.join(OPTIONS)}")
    values = {key: _checked(_BY_NAME[key], value) for key, value in merged.items()}
    for opt in TABLE:
        if opt.required and opt.name not in values:
            opt.check(opt.name, "")  # says what is required
            raise ConfigError(opt.name, "required")
    config = ReplicatorConfig(**values)
    for cross_check in CROSS_CHECKS:
        cross_check(config)
    return config
