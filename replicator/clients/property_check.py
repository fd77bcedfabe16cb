"""One client property tried on a librdkafka client that is never connected, for the configuration's
checks: a misspelt name or a value librdkafka cannot parse is said before anything starts, not as a
connection failure after the job started (exit 1 where a bad value is exit 2)."""

from __future__ import annotations

import difflib
import logging

from confluent_kafka import Consumer, KafkaException, Producer

from replicator.config import ReplicatorConfig
from replicator.config_checks import ConfigError, is_secret

# "No bootstrap.servers configured": true of every client built here, and no news.
_QUIET = logging.getLogger("replicator.config.librdkafka")
_QUIET.disabled = True


def check(cfg: ReplicatorConfig) -> None:
    """Raises ConfigError naming the first `source:` or `target:` property librdkafka refuses."""
    for section in ("source", "target"):
        for name, value in cfg.client_properties(section).items():
            found = refusal(section, name, value)
            if found is None:
                continue
            unknown, said = found
            if unknown:
                raise ConfigError(f"{section}.{name}", "not a librdkafka property"
                                  + (f"; did you mean '{said}'?" if said else ""))
            # librdkafka quotes the value it refuses: a secret's is not repeated.
            raise ConfigError(f"{section}.{name}", "librdkafka refuses the value" + (
                " (not shown: it may hold a secret)" if is_secret(name) else f": {said}"))


def refusal(section: str, name: str, value: str) -> tuple[bool, str] | None:
    """None when librdkafka takes `name: value` on a client of the section's kind (the source's
    consumer, the target's producer); else (True, a close property name or "") for an unknown name,
    (False, librdkafka's words, which quote the value) for a value it refuses."""
    try:
        client = (Consumer({"group.id": "config-check", name: value, "logger": _QUIET}) if section == "source"
                  else Producer({name: value, "logger": _QUIET}))
    except KafkaException as e:
        said = e.args[0].str()
        if said.startswith("No such configuration property"):
            close = difflib.get_close_matches(name, _KNOWN, n=1)
            return True, close[0] if close else ""
        # "Failed to create ...": the client itself, which needs the other properties (a SASL
        # protocol alone asks for GSSAPI); the real client says it, naming the cluster.
        return None if said.startswith("Failed to create") else (False, said)
    except (TypeError, ValueError):
        return None  # not librdkafka's objection: the real client reports it with the cluster's name
    del client
    return None


# Names librdkafka takes, for the "did you mean" of a misspelt one (those set most often).
_KNOWN = ["security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
          "sasl.kerberos.service.name", "sasl.kerberos.principal", "sasl.kerberos.keytab", "sasl.oauthbearer.method",
          "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.token.endpoint.url",
          "sasl.oauthbearer.scope", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
          "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem", "ssl.key.password", "ssl.keystore.location",
          "ssl.keystore.password", "ssl.crl.location", "ssl.endpoint.identification.algorithm",
          "enable.ssl.certificate.verification", "client.id", "client.rack", "compression.type", "linger.ms",
          "batch.size", "batch.num.messages", "message.max.bytes", "fetch.max.bytes", "fetch.min.bytes",
          "fetch.wait.max.ms", "max.partition.fetch.bytes", "queued.max.messages.kbytes",
          "queued.min.messages", "queue.buffering.max.kbytes", "queue.buffering.max.messages",
          "socket.timeout.ms", "socket.keepalive.enable", "socket.send.buffer.bytes",
          "socket.receive.buffer.bytes", "request.timeout.ms", "retry.backoff.ms", "reconnect.backoff.ms",
          "reconnect.backoff.max.ms", "metadata.max.age.ms", "topic.metadata.refresh.interval.ms",
          "statistics.interval.ms", "debug", "client.dns.lookup", "connections.max.idle.ms", "acks",
          "delivery.timeout.ms", "message.timeout.ms", "broker.address.family"]
