"""`verify`'s judgement of hanging transactions, from hand-built partition and coordinator views."""

from replicator.commands.verify import hanging_on_partitions

TP = ("t", 0, 7)  # topic, partition, producer id


def test_open_at_both_reads_and_unknown_to_the_coordinator_is_hanging():
    hanging = hanging_on_partitions({TP: (1, 708)}, {TP: (1, 708)}, {})
    assert hanging == [{"partition": "t[0]", "producer_id": 7, "producer_epoch": 1, "start_offset": 708,
                        "reason": "open on the partition, unknown to its transaction coordinator"}]


def test_a_coordinator_listing_the_partition_clears_it():
    assert hanging_on_partitions({TP: (1, 708)}, {TP: (1, 708)}, {7: {("t", 0)}}) == []


def test_the_coordinator_listing_other_partitions_of_the_producer_does_not():
    assert len(hanging_on_partitions({TP: (1, 708)}, {TP: (1, 708)}, {7: {("t", 1)}})) == 1


def test_a_transaction_begun_while_the_coordinators_were_read_is_not_judged():
    # The job's next transaction: nothing open at the first read, or the previous one (another start).
    assert hanging_on_partitions({}, {TP: (1, 708)}, {}) == []
    assert hanging_on_partitions({TP: (1, 650)}, {TP: (1, 708)}, {}) == []


def test_a_transaction_that_ended_meanwhile_is_not_judged():
    assert hanging_on_partitions({TP: (1, 708)}, {}, {}) == []
