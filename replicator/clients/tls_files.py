"""Local checks of a cluster's TLS files before any connection: a missing key, an unreadable CA or
an expired client certificate would otherwise surface as a client that cannot be built (a stack
trace) or as a broker closing the handshake ("SSL handshake failed"), neither naming the cause."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

_FILES = {"ssl.ca.location": "CA certificate", "ssl.certificate.location": "client certificate",
          "ssl.key.location": "private key", "ssl.keystore.location": "keystore"}


def problems(props: Mapping[str, str]) -> list[str]:
    """What is wrong with the TLS files these client properties name (empty: nothing found)."""
    out = []
    for key, what in _FILES.items():
        path = props.get(key)
        if not path:
            continue
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            out.append(f"{key}: cannot read the {what} {path}: {e.strerror}")
            continue
        if key == "ssl.certificate.location":
            out += _certificate_problems(key, path, data)
    return out


def _certificate_problems(key: str, path: str, data: bytes) -> list[str]:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError:
        return []  # not PEM (e.g. DER); librdkafka will judge it
    now = datetime.datetime.now(datetime.UTC)
    if cert.not_valid_after_utc < now:
        return [f"{key}: the client certificate {path} ({cert.subject.rfc4514_string()}) expired on "
                f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"]
    if cert.not_valid_before_utc > now:
        return [f"{key}: the client certificate {path} ({cert.subject.rfc4514_string()}) is not valid before "
                f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"]
    return []
