"""How a run fails: the errors that end it with exit code 1."""

from __future__ import annotations


class RuntimeFailure(RuntimeError):
    """A failure while running (exit code 1): the message says what and where."""


class TransientQueryFailure(RuntimeFailure):
    """The streaming query failed on one of TRANSIENT_QUERY_FAILURES: a new query may succeed."""
