"""Which broker of a multi-broker cluster plays a role right now: the leader of a partition, the
transaction coordinator of a transactional id, the group coordinator of a group. Faults aimed at a
role hit that broker, so a fault is a leader election or a coordinator moving, not an outage."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from replicator.clients.client_errors import while_retriable

# A broker just restarted by the previous fault answers ListTransactions with "coordinator load in
# progress" until it has read its transaction log: the lookup waits that out instead of failing the
# run (make chaos: source-txn-coordinator-kill right after source-leader-isolate).
_LOOKUP_TIMEOUT_S = 120.0


def partition_leader(bootstrap: str, topic: str, partition: int) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return meta.topics[topic].partitions[partition].leader


def transaction_coordinator(bootstrap: str, prefix: str) -> int:
    """The broker listing a transactional id starting with `prefix` (ListTransactions is answered by
    each broker for the transactional ids it coordinates)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=30_000)
    try:
        listing = while_retriable(admin.list_transactions, _LOOKUP_TIMEOUT_S, "listing transactions")
        for broker, rows in sorted(listing.items()):
            if any(r.transactional_id.startswith(prefix) for r in rows):
                return broker
    finally:
        admin.close()
    raise LookupError(f"no transactional id {prefix}* on {bootstrap}")


def group_coordinator(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=30).coordinator.id
