"""Fault-injection harness (the anchor: Kafka's tests/kafkatest/tests/core/transactions_test.py)."""
