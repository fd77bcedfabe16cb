"""Topic selection: include regexes, exclude regexes (exclude wins), internal topics never."""

from __future__ import annotations

import pytest

from replicator.config import ConfigError, load
from replicator.topics.filter import NOT_INCLUDED, TopicFilter


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state", "__anything",
                                   "app-KSTREAM-repartition-internal", "mm2-offset-syncs.west.internal",
                                   "orders.replica"])
def test_internal_topics_are_never_selected_even_by_a_catch_all(topic):
    f = TopicFilter(".*")
    assert not f.accepts(topic)
    assert f.reason(topic).startswith("internal topic")


def test_include_is_a_full_match_and_exclude_wins():
    f = TopicFilter("orders.*|payments", ("orders-audit.*",))
    assert f.accepts("orders") and f.accepts("orders-eu") and f.accepts("payments")
    assert not f.accepts("payments-eu"), "full match, not search"
    assert not f.accepts("my-orders")
    assert f.reason("my-orders") == NOT_INCLUDED
    assert not f.accepts("orders-audit-2024")
    assert f.reason("orders-audit-2024") == "excluded by orders-audit.*"


def _cfg(**extra):
    return load({"source_bootstrap_servers": "127.0.0.1:1", "target_bootstrap_servers": "127.0.0.1:2", **extra},
                environ={})


def test_include_and_exclude_lists_from_a_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("topics: [orders.*, 'pay(ments)?']\ntopics_exclude: [orders-audit, tmp.*]\n")
    cfg = load({"source_bootstrap_servers": "127.0.0.1:1", "target_bootstrap_servers": "127.0.0.1:2"},
               config_file=path, environ={})
    f = TopicFilter(cfg.topics, cfg.topics_exclude)
    assert [t for t in ("orders", "orders-audit", "pay", "payments", "tmp-1", "x") if f.accepts(t)] == \
        ["orders", "pay", "payments"]


def test_exclude_flag_is_comma_separated_and_every_regex_is_validated():
    assert _cfg(topics="a", topics_exclude="x.*, y").topics_exclude == ("x.*", "y")
    with pytest.raises(ConfigError, match="'topics'"):
        _cfg(topics=["ok", "("])
    with pytest.raises(ConfigError, match="'topics'"):
        _cfg(topics=[])
