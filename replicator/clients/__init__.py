"""The Kafka clients and their quirks: confluent-kafka factories (`kafka_clients`), kafka-python
settings (`kafka_python_clients`), error classification and local checks of TLS files."""
