from bench.kafka_ops import finalized_level

# FeatureCommand describe, as Kafka 4.1.2 prints it (tab-separated), with SLF4J noise around it.
DESCRIBE = (
    "SLF4J(W): No SLF4J providers were found.\n"
    "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1\tEpoch: 9469\n"
    "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.1-IV1\t"
    "FinalizedVersionLevel: 4.1-IV1\tEpoch: 9469\n"
    "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\tFinalizedVersionLevel: 2\t"
    "Epoch: 9469\n"
)


def test_the_finalized_transaction_version_is_read_from_its_own_line():
    assert finalized_level(DESCRIBE, "transaction.version") == 2
    assert finalized_level(DESCRIBE, "group.version") == 1


def test_a_feature_the_cluster_does_not_report_is_none():
    assert finalized_level(DESCRIBE, "share.version") is None
    assert finalized_level("", "transaction.version") is None
