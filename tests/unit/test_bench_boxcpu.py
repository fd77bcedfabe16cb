"""The bench's account of the rest of the box: what the brokers spent and what caps a ratio."""

from __future__ import annotations

import os

import pytest

from bench import boxcpu, report
from bench.boxcpu import BoxSample


def test_shares_over_a_window():
    a = BoxSample(brokers_cpu_s=10.0, idle_s=100.0, steal_s=1.0, total_s=1000.0)
    b = BoxSample(brokers_cpu_s=13.0, idle_s=101.0, steal_s=3.0, total_s=1020.0)
    share = boxcpu.between(a, b, gigabytes=0.5)
    assert share.brokers_cpu_s_per_gb == pytest.approx(6.0)
    assert share.idle_share == pytest.approx(0.05)
    assert share.steal_share == pytest.approx(0.10)


def test_an_empty_window_measures_nothing():
    a = BoxSample(1.0, 1.0, 0.0, 10.0)
    assert boxcpu.between(a, a, 1.0) == boxcpu.BoxShare(0.0, 0.0, 0.0)


def test_the_cap_is_the_ratio_of_whole_box_costs():
    # MM2 at 18 CPU-s/GB with brokers at 6 against ours at 6 with brokers at 6: at most 2x.
    assert boxcpu.ratio_cap(6.0, 6.0, 18.0, 6.0) == pytest.approx(2.0)


def test_a_live_sample_counts_a_running_process():
    s = boxcpu.sample((os.getpid(),))
    assert s.brokers_cpu_s > 0 and s.total_s >= s.idle_s >= 0


def _row(contender: str, run: int, cpu: float, brokers: float, idle: float) -> dict:
    return {"contender": contender, "size": 1024, "run": run, "ok": True, "records": 1000, "cpu_s_per_gb": cpu,
            "brokers_cpu_s_per_gb": brokers, "box_idle_share": idle, "box_steal_share": 0.01,
            "records_per_s": 1.0}


def test_the_report_shows_the_cap_per_contender():
    rows = [_row("replicator-eos", 1, 7.0, 5.0, 0.02), _row("mm2-eos", 1, 19.0, 5.0, 0.03)]
    lines = report.box_table(rows, 1024)
    ours = next(line for line in lines if line.startswith("| replicator exactly-once"))
    assert ours == "| replicator exactly-once | 5.0 | 2 | 1.0 | 2.00 |"
    assert report.box_table([{**r, "brokers_cpu_s_per_gb": 0.0} for r in rows], 1024) == []
