"""`bench.run --base-checkout DIR`: the A/B contender runs DIR's own job, and its Spark workers import
DIR's code, not the checkout the bench runs from (their working directory)."""

from __future__ import annotations

from pathlib import Path

from bench import contenders, run
from bench.contenders import BaseCheckout, Job


def test_the_base_runs_its_own_checkouts_job_with_its_workers_on_its_code(monkeypatch, tmp_path):
    started = []
    monkeypatch.setattr(contenders, "Tree", lambda cmd, log, env=None: started.append((cmd, env)))
    job = Job(source="s:1", target="t:1", topic="t", partitions=1, records=1, size=1, tag="x", logdir=tmp_path)
    BaseCheckout(Path("/base")).launch(job)
    cmd, env = started[0]
    assert cmd[:2] == ["/base/.venv/bin/replicator", "run"] and env["PYTHONSAFEPATH"] == "1"
    contenders.Replicator("exactly-once").launch(job)
    cmd, env = started[1]
    assert cmd[0] != "/base/.venv/bin/replicator" and "PYTHONSAFEPATH" not in env


def test_the_option_adds_the_base_contender():
    assert run.parse_args(["--base-checkout", "/base", "--only", "replicator-eos,replicator-eos-base"]
                          ).base_checkout == Path("/base")
