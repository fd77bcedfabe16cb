"""The secure sandbox is what it claims: TLS everywhere, authentication, and default deny."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from replicator.clients.kafka_clients import with_logging
from tests.secure_helpers import admin

BIN = Path(sys.executable).with_name("replicator")


def test_admin_creates_topics_and_others_see_nothing(secure_sandbox, unique):
    for cluster in ("source", "target"):
        topic = f"sec-smoke-{unique}"
        root = admin(secure_sandbox, cluster)
        root.create_topics([NewTopic(topic, 1, 1)], request_timeout=30)[topic].result()
        # The controller answered; the broker's metadata may show the topic a moment later.
        deadline = time.monotonic() + 60
        while topic not in root.list_topics(timeout=30).topics:
            assert time.monotonic() < deadline, f"{topic} not listed 60 s after its creation"
            time.sleep(0.2)
        # Authenticated, but no ACL: the topic is invisible and creating one is refused.
        other = admin(secure_sandbox, cluster, "other")
        assert topic not in other.list_topics(timeout=30).topics
        denied = other.create_topics([NewTopic(f"{topic}-x", 1, 1)], request_timeout=30)[f"{topic}-x"]
        try:
            denied.result()
            raise AssertionError("a principal without ACLs created a topic")
        except KafkaException as e:
            assert "authoriz" in e.args[0].str().lower()


def test_plaintext_clients_are_not_served(secure_sandbox):
    client = AdminClient(with_logging({"bootstrap.servers": secure_sandbox.target.bootstrap,
                                       "socket.timeout.ms": 5000}))
    try:
        client.list_topics(timeout=5)
        raise AssertionError("a PLAINTEXT client got metadata from the secure target")
    except KafkaException:
        pass


def test_status_prints_client_properties_without_secrets(secure_sandbox):
    env = {**os.environ, "REPLICATOR_SANDBOX_DIR": str(secure_sandbox.root)}
    text = subprocess.run([str(BIN), "sandbox", "status"], capture_output=True, text=True, env=env,
                          check=True).stdout
    assert "SASL_SSL" in text and "SCRAM-SHA-512" in text and "ca.pem" in text
    assert "ssl.certificate.location" in text  # the mTLS source
    for secret in secure_sandbox.target.security.secrets():
        assert secret not in text
    status = json.loads(subprocess.run([str(BIN), "sandbox", "status", "--format", "json"], capture_output=True,
                                       text=True, env=env, check=True).stdout)
    assert status["target"]["client_properties"]["sasl.password"].startswith("${file:")


def test_kafka_python_clients_trust_a_broker_as_librdkafka_is_told_to(secure_sandbox):
    """`ssl.endpoint.identification.algorithm: none` and `enable.ssl.certificate.verification: false`
    reach kafka-python's clients (lag, fencing, verify) too: they failed the handshake `run` passed."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from replicator.clients.kafka_python_clients import client_settings

    props = secure_sandbox.client_properties("target", "admin")
    assert props.get("ssl.ca.location")
    # The broker's certificate names 127.0.0.1 only; without a CA nothing verifies it.
    by_name = secure_sandbox.target.bootstrap.replace("127.0.0.1", "localhost")
    no_ca = {k: v for k, v in props.items() if k != "ssl.ca.location"}
    cases = [(props, by_name, {"ssl.endpoint.identification.algorithm": "none"}),
             (no_ca, secure_sandbox.target.bootstrap, {"enable.ssl.certificate.verification": "false"})]
    for base, bootstrap, trust in cases:
        try:
            KafkaAdminClient(**client_settings(base, bootstrap), bootstrap_timeout_ms=5000).close()
            raise AssertionError(f"{bootstrap} passed the TLS checks without {trust}")
        except KafkaError:
            pass
        admin = KafkaAdminClient(**client_settings({**base, **trust}, bootstrap))
        try:
            assert admin.describe_cluster().get("cluster_id"), trust
        finally:
            admin.close()
