from replicator.sandbox.cluster import _cluster_id


def test_cluster_ids_never_look_like_an_option_to_the_storage_tool():
    ids = {_cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
