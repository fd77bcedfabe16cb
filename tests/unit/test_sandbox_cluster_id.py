from replicator.sandbox.cluster import _cluster_id, _ephemeral_ports, startup_failure


def test_cluster_ids_never_look_like_an_option_to_the_storage_tool():
    ids = {_cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_a_broker_that_could_not_bind_says_so_and_why_the_port_may_be_taken():
    log = ("[2026-11-26 04:23:19,392] INFO starting\n"
           "[2026-11-26 04:23:19,392] ERROR Unable to start acceptor for PLAINTEXT (kafka.network.DataPlaneAcceptor)\n"
           "org.apache.kafka.common.KafkaException: Socket server failed to bind to 127.0.0.1:34142: Address already "
           "in use.\n[2026-11-26 04:23:19,747] INFO App info kafka.server for 1 unregistered\n")
    low, high = _ephemeral_ports()
    inside = startup_failure(log, low)
    assert "Unable to start acceptor" in inside and f"below {low}" in inside
    assert startup_failure(log, low - 1).endswith(f"port {low - 1} is taken by another process)")
    assert startup_failure("[x] INFO fine\n", high) == ""
