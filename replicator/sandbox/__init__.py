"""Local real-Kafka sandbox: jar resolution and two single-node KRaft clusters."""

from replicator.sandbox.cluster import KafkaCluster, Sandbox
from replicator.sandbox.jars import DEFAULT_KAFKA_VERSION, classpath, kafka_jars

__all__ = ["DEFAULT_KAFKA_VERSION", "KafkaCluster", "Sandbox", "classpath", "kafka_jars"]
