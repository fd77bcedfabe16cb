"""Creating a topic that may already exist: several processes of a job (the driver, a switchover, a
concurrent start) may create the same internal topic, and the one that loses the race is done too."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic_if_missing(admin: AdminClient, topic: NewTopic, timeout: float = 60.0) -> bool:
    """True when this call created the topic, False when it existed already; KafkaException for
    any other refusal (authorization among them, for the caller to name)."""
    fut = admin.create_topics([topic], request_timeout=timeout)[topic.topic]
    try:
        fut.result()
    except KafkaException as e:
        err = e.args[0] if e.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True
