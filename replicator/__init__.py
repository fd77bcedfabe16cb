"""Exactly-once cross-cluster Kafka replication as a Spark Structured Streaming job."""

__version__ = "0.1.0"
