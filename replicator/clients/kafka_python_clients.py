"""Settings for kafka-python, the second Kafka client the job uses, from its librdkafka properties.

kafka-python serves what librdkafka lacks or does slowly from Python: ListTransactions (fencing
layouts that never committed), the lag lookups of a running job (a few list requests every few
seconds: 5x-10x less CPU than confluent-kafka's per-partition futures at 5,000 partitions) and
`verify`, whose checker must not share the copier's client.
"""

from __future__ import annotations

import contextlib
import ssl
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
    "ssl.crl.location": "ssl_crlfile",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
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
    # The two ways librdkafka is told to trust a broker it cannot check: kafka-python checks by
    # default, and its clients (lag, fencing, verify) failed the TLS handshake that `run`'s passed.
    if props.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        out["ssl_check_hostname"] = False
    if props.get("enable.ssl.certificate.verification", "true").lower() in ("false", "0"):
        out["ssl_check_hostname"] = False
        out["ssl_context"] = _unverified_context(out)
    return out


def _unverified_context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    """A TLS context that accepts any broker certificate, and presents the client certificate the
    settings name (kafka-python reads none of its ssl_* file settings once given a context)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if settings.get("ssl_certfile"):
        context.load_cert_chain(settings["ssl_certfile"], settings.get("ssl_keyfile"), settings.get("ssl_password"))
    return context


def admin_client(props: Mapping[str, str], bootstrap: str):
    """A kafka-python admin client for these librdkafka properties (imported on use: only some
    commands and features need kafka-python)."""
    from kafka import KafkaAdminClient

    return KafkaAdminClient(**client_settings(props, bootstrap))
