"""What `replicator topics` prints for each kind of plan."""

from __future__ import annotations

from click.testing import CliRunner

from replicator.cli import main
from replicator.commands.topics import _as_json, _as_table
from replicator.topics.filter import NOT_INCLUDED
from replicator.topics.sync import TopicMapping, TopicPlan

PLANS = [TopicPlan(TopicMapping("c", "east.c", 3), None, {"cleanup.policy": "compact", "retention.ms": "5"}),
         TopicPlan(TopicMapping("p", "east.p", 2), 2, {"retention.ms": "9"}, {"retention.ms": (None, "9")})]
SKIPPED = {"__consumer_offsets": "internal topic (always excluded: __.*)", "x": NOT_INCLUDED}


def test_table_shows_names_actions_configs_differences_and_reasons():
    table = _as_table(PLANS, SKIPPED)
    lines = table.splitlines()
    assert lines[0] == "2 topic(s) replicated:"
    assert lines[2].split() == ["c", "east.c", "3", "(target", "new)", "create", "cleanup.policy=compact,",
                                "retention.ms=5"]
    assert lines[3].split() == ["p", "east.p", "2", "(target", "2)", "sync", "retention.ms:", "(unset)", "->", "9"]
    assert "__consumer_offsets  internal topic" in table
    assert "1 other topic(s) not matched by the include regex" in table
    assert "\nx " not in table


def test_json_lists_everything():
    out = _as_json(PLANS, SKIPPED)
    assert [t["action"] for t in out["topics"]] == ["create", "sync"]
    assert out["topics"][1]["changes"] == {"retention.ms": {"target": None, "wanted": "9"}}
    assert out["not_replicated"] == SKIPPED


def test_registered_and_takes_the_run_connection_options():
    result = CliRunner().invoke(main, ["topics", "--help"])
    assert result.exit_code == 0
    for flag in ("--config", "--source-bootstrap-servers", "--topics-exclude", "--replication-policy",
                 "--source-alias", "--target-alias", "--format"):
        assert flag in result.output


def test_invalid_configuration_exits_2_before_connecting():
    result = CliRunner().invoke(main, ["topics", "--source-bootstrap-servers", "127.0.0.1:1",
                                       "--target-bootstrap-servers", "127.0.0.1:2", "--topics", "("])
    assert result.exit_code == 2
    assert "'topics'" in result.output
