"""What each kind of option value accepts: one small named check per kind.

A check takes the option's key and the raw value (from YAML, the environment or a flag) and returns the
typed value, or raises `ConfigError` naming the key and what is allowed. Its docstring is that "what is
allowed": `--help` and docs/configuration.md print it, so it reads as a noun phrase.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from replicator import secret_refs

Check = Callable[[str, Any], Any]

SECRET_HINTS = ("password", "secret", "token", "jaas", "key.pem", "keystore.key", "private")


def is_secret(key: str) -> bool:
    k = key.lower()
    return any(h in k for h in SECRET_HINTS)


_BOOTSTRAP = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}(,[A-Za-z0-9._\-\[\]:]+:\d{1,5})*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,99}$")
_MASTER = re.compile(r"^(local(\[(\*|[1-9]\d*)(,\d+)?\])?|spark://.+|k8s://.+|yarn|mesos://.+)$")
# Keys the replicator sets itself on its clients; overriding them would break exactly-once.
RESERVED_CLIENT_KEYS = {
    "source": {"isolation.level", "enable.auto.commit", "group.id", "enable.partition.eof",
               "auto.offset.reset", "enable.auto.offset.store"},
    "target": {"transactional.id", "enable.idempotence", "isolation.level", "group.id", "acks"},
}
# Client properties an option of the replicator's own sets: a value here was overridden silently.
_CLIENT_OPTIONS = {"bootstrap.servers": "{section}_bootstrap_servers",
                   "transaction.timeout.ms": "transaction_timeout_ms"}
# Spark settings the job owns: `master` is the option, and the redaction keeps secrets out of Spark's UI and logs.
_SPARK_OWN = {"spark.master": "use the 'master' option", "spark.sql.redaction.options.regex":
              "set by the replicator: it keeps the configuration's secrets out of Spark's plans and logs"}
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


def integer(minimum: int = 1, maximum: int | None = None) -> Check:
    # One wording for every refusal, so a user who fixes the type is not surprised by the range next.
    bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"

    def check(key: str, value: Any) -> int:
        if isinstance(value, bool):
            raise ConfigError(key, f"expected an integer {bound}, got a boolean")
        try:
            number = int(str(value).replace("_", ""))
        except ValueError:
            raise ConfigError(key, f"expected an integer {bound}, got {value!r}") from None
        if number < minimum or (maximum is not None and number > maximum):
            raise ConfigError(key, f"expected an integer {bound}, got {number}")
        return number
    check.__doc__ = f"an integer {bound}"
    return check


def positive_number(key: str, value: Any) -> float:
    """a finite number > 0"""
    if isinstance(value, bool):  # YAML reads yes/no/on/off as booleans, and float(True) is 1.0
        raise ConfigError(key, "expected a finite positive number, got a boolean")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"expected a finite positive number, got {value!r}") from None
    if not 0 < number < float("inf"):
        raise ConfigError(key, f"expected a finite positive number, got {number}")
    return number


_replicas = integer(1, 32767)


def replication_factor(key: str, value: Any) -> int:
    """-1 (the target broker's default) or an integer between 1 and 32767"""
    if str(value).strip() == "-1":
        return -1
    try:
        return _replicas(key, value)
    except ConfigError:
        raise ConfigError(key, "expected -1 (the target broker's default) or an integer between 1 and 32767, "
                          f"got {value!r}") from None


def choice(*allowed: str) -> Check:
    canonical = {a.lower(): a for a in allowed}

    def check(key: str, value: Any) -> str:
        # `log_level: info` or REPLICATOR_GUARANTEE=Exactly-Once mean what they say; only the spelling differs.
        found = canonical.get(value.strip().lower()) if isinstance(value, str) else None
        if found is None:
            raise ConfigError(key, f"expected one of {', '.join(allowed)}; got {value!r}")
        return found
    check.__doc__ = f"one of {', '.join(allowed)} (any case)"
    return check


def _text(key: str, value: Any) -> str:
    """`value` as text; a YAML null, boolean, map or list is refused rather than turned into 'None',
    'True' or its Python repr (an empty `groups:` line became the regex 'None' and synced nothing)."""
    if value is None or isinstance(value, (bool, Mapping, list, tuple)):
        got = ("nothing (an empty value in the file)" if value is None else
               "true/false (quote it)" if isinstance(value, bool) else
               "a map" if isinstance(value, Mapping) else "a list")
        raise ConfigError(key, f"expected text, got {got}; leave the option out to keep its default")
    return str(value)


def listen_host(key: str, value: Any) -> str:
    """a host name or IP address to listen on"""
    text = _text(key, value).strip()
    if not re.match(r"^[A-Za-z0-9.\-:]+$", text):
        raise ConfigError(key, f"expected a host name or IP address to listen on, got {text!r}")
    return text


def bootstrap_servers(key: str, value: Any) -> str:
    """a comma-separated list of host:port"""
    text = _text(key, value).strip()
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
    text = _text(key, value)
    if not text:
        raise ConfigError(key, "required: a regular expression matching source topic names")
    try:
        re.compile(text)
    except re.error as e:
        raise ConfigError(key, f"not a valid regular expression ({e})") from None
    return text


def include_regex(key: str, value: Any) -> str:
    """a regular expression, or a YAML list of them, matching whole names"""
    if isinstance(value, (list, tuple)):
        # Folded into one alternation, full-matched as a single regex is.
        items = [_regex(key, v) for v in value]
        return "|".join(f"(?:{i})" for i in items) if items else _regex(key, "")
    return _regex(key, value)


def regex_list(key: str, value: Any) -> tuple[str, ...]:
    """regular expressions: a YAML list, or comma-separated in the environment and on the command line"""
    if value is not None and not isinstance(value, (str, list, tuple)):
        raise ConfigError(key, "expected regular expressions: a YAML list, or comma-separated text")
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value or [])
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(key, f"expected a list of regular expressions, got {item!r}")
        _regex(key, item)
    return tuple(i for i in items if i)


def boolean(key: str, value: Any) -> bool:
    """true or false (also yes/no, on/off, 1/0)"""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ConfigError(key, f"expected true or false, got {value!r}")


def job_name(key: str, value: Any) -> str:
    """1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"""
    text = _text(key, value)
    if not _NAME.match(text):
        raise ConfigError(key, "expected 1-100 characters of letters, digits, '.', '_' or '-', "
                               f"starting with a letter or digit; got {text!r}")
    return text


def alias(key: str, value: Any) -> str:
    """letters, digits, '_' or '-' (no '.')"""
    # No '.': it separates the alias from the topic in prefix-policy names (`alias.topic`).
    text = _text(key, value)
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,99}$", text):
        raise ConfigError(key, f"expected letters, digits, '_' or '-' (no '.'), got {text!r}")
    return text


def group_id(key: str, value: Any) -> str:
    """up to 249 letters, digits, '.', '_' or '-'"""
    text = _text(key, value)
    if text and (len(text) > 249 or not re.match(r"^[A-Za-z0-9._\-]+$", text)):
        raise ConfigError(key, "expected up to 249 characters of letters, digits, '.', '_' or '-'")
    return text


def spark_master(key: str, value: Any) -> str:
    """a Spark master URL: local, local[N], local[N,F], local[*], spark://host:port, k8s://..., yarn"""
    text = _text(key, value)
    if text and not _MASTER.match(text):
        raise ConfigError(key, "expected a Spark master URL: local, local[N], local[N,F], local[*], "
                               f"spark://host:port, k8s://..., yarn; got {text!r}")
    return text


def client_properties(section: str) -> Check:
    def check(key: str, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(key, "expected a map of librdkafka properties (key: value)")
        out: dict[str, str] = {}
        for k, v in value.items():
            if not isinstance(k, str) or not re.match(r"^[a-z0-9][a-z0-9._\-]*$", k):
                raise ConfigError(f"{key}.{k}", "not a librdkafka property name")
            if k in RESERVED_CLIENT_KEYS[section]:
                raise ConfigError(f"{key}.{k}", "set by the replicator itself (exactly-once depends on "
                                                "it) and cannot be overridden")
            if k in _CLIENT_OPTIONS:
                raise ConfigError(f"{key}.{k}", f"use '{_CLIENT_OPTIONS[k].format(section=section)}' instead")
            if isinstance(v, (dict, list)):
                raise ConfigError(f"{key}.{k}", "expected a scalar value")
            if v is None:
                raise ConfigError(f"{key}.{k}", "no value: give one, or leave the property out")
            if is_secret(k) and not isinstance(v, str):
                # YAML reads an unquoted 0777 as 511 and 12:34:56 as 45296: the client would send those.
                raise ConfigError(f"{key}.{k}", "expected text: quote the value in the file (unquoted, YAML reads "
                                                "forms such as 007, 1.50 or 10:30 as numbers and changes them); the "
                                                "value is not shown")
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
    reserved = ", ".join(sorted(RESERVED_CLIENT_KEYS[section]))
    check.__doc__ = (f"a map of librdkafka properties, any value a `${{file:PATH}}` or `${{env:VAR}}` reference; "
                     f"not {' or '.join(sorted(_CLIENT_OPTIONS))} (options of their own), nor {reserved} (set by "
                     "the replicator)")
    return check


def spark_properties(key: str, value: Any) -> dict[str, str]:
    """a map of Spark properties whose keys start with 'spark.'"""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(str(k).startswith("spark.") for k in value):
        raise ConfigError(key, "expected a map of Spark properties whose keys start with 'spark.'")
    for k in value:
        if str(k) in _SPARK_OWN:
            raise ConfigError(f"{key}.{k}", _SPARK_OWN[str(k)])
    return {str(k): str(v) for k, v in value.items()}


def cache_directory(key: str, value: Any) -> str:
    """`auto`, an absolute directory (or ~/...) or `off`"""
    text = _text(key, value).strip()
    if text not in ("auto", "off") and not (text.startswith("/") or text.startswith("~")):
        raise ConfigError(key, "expected 'auto', an absolute directory (or ~/...) or 'off'")
    return text


def shutdown_timeout(key: str, value: Any) -> float:
    """seconds between 10 and 3600"""
    seconds = positive_number(key, value)
    if not 10 <= seconds <= 3600:
        raise ConfigError(key, f"expected seconds between 10 and 3600 (each step of the stop gets a share: fencing "
                               f"alone needs a few seconds), got {seconds:g}")
    return seconds


def cluster_id(key: str, value: Any) -> str:
    """a Kafka cluster id (letters, digits, `_` and `-`), or empty"""
    text = _text(key, value).strip()
    if text and not re.match(r"^[A-Za-z0-9_\-]{1,64}$", text):
        raise ConfigError(key, f"expected a Kafka cluster id (letters, digits, '_' and '-', as the job's refusal "
                               f"prints it), got {text!r}")
    return text
