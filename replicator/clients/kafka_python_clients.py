"""Settings for kafka-python, the second Kafka client the job uses, from its librdkafka properties.

kafka-python serves what librdkafka lacks or does slowly from Python: ListTransactions (fencing
layouts that never committed), the lag lookups of a running job (a few list requests every few
seconds: 5x-10x less CPU than confluent-kafka's per-partition futures at 5,000 partitions) and
`verify`, whose checker must not share the copier's client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

# librdkafka property -> kafka-python setting; the rest (tuning) has no meaning for these lookups.
_CLIENT_KEYS = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
}


def close_quietly(client) -> None:
    """Closes a kafka-python client that is being dropped (after a failed lookup, at shutdown)."""
    if client is not None:
        with contextlib.suppress(Exception):
            client.close()


def client_settings(props: Mapping[str, str], bootstrap: str) -> dict[str, Any]:
    out: dict[str, Any] = {"bootstrap_servers": bootstrap.split(","), "request_timeout_ms": 30_000}
    for key, value in props.items():
        if key in _CLIENT_KEYS:
            out[_CLIENT_KEYS[key]] = value.upper() if key == "security.protocol" else value
    return out


def admin_client(props: Mapping[str, str], bootstrap: str):
    """A kafka-python admin client for these librdkafka properties (imported on use: only some
    commands and features need kafka-python)."""
    from kafka import KafkaAdminClient

    return KafkaAdminClient(**client_settings(props, bootstrap))
