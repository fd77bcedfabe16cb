"""Secrets by reference: `${file:/path}` and `${env:NAME}` as client property values.

A Kubernetes Secret mounted as files or exposed as environment variables then never has to be
copied into the config file. The reference is what travels (in the config, to Spark tasks, in any
dump of either); the value is read only when a Kafka client is built, in the process that builds
it, and is never kept in the config object.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

_REFERENCE = re.compile(r"^\$\{(file|env):([^}]+)\}$")


class SecretReferenceError(ValueError):
    """A reference that cannot be resolved; the message names the property, never a value."""


def reference(value: str) -> tuple[str, str] | None:
    """(kind, target) when `value` is a reference, else None."""
    match = _REFERENCE.match(value.strip())
    return (match.group(1), match.group(2)) if match else None


def resolve_value(key: str, value: str) -> str:
    ref = reference(value)
    if ref is None:
        return value
    kind, target = ref
    if kind == "env":
        if target not in os.environ:
            raise SecretReferenceError(f"{key}: environment variable {target} is not set")
        return os.environ[target]
    try:
        # One trailing newline is what `echo pw > file` and most Secret tooling add; it is not part
        # of the password.
        text = Path(target).read_text()
    except OSError as e:
        raise SecretReferenceError(f"{key}: cannot read {target}: {e.strerror}") from None
    return text[:-1] if text.endswith("\n") else text


def resolve(props: Mapping[str, str], section: str = "") -> dict[str, str]:
    """The client properties with every reference replaced by its current value."""
    prefix = f"{section}." if section else ""
    return {k: resolve_value(prefix + k, v) for k, v in props.items()}


def check(props: Mapping[str, str], section: str) -> None:
    """Fails on a reference that would not resolve now (the value itself is thrown away)."""
    resolve(props, section)
