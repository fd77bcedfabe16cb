"""The report's tables for the load shapes, the first minute, the WAN link and its ceiling."""

from bench import report


def _step(contender: str, run: int, rate: int, p99: float, shape: str | None = None) -> dict:
    row = {"contender": contender, "run": run, "size": 1024, "fraction": 0.25, "rate": rate,
           "produced_per_s": rate, "p50_s": 0.01, "p95_s": 0.02, "p99_s": p99, "bounded": True}
    return {**row, "shape": shape} if shape else row


def _doc(**rows) -> dict:
    return {"machine": {"cores": 2}, "runs": 1, "catchup": [], "steady": [], "restart": [], "many": [], **rows}


def test_steady_state_is_tabled_per_load_shape_and_older_rows_count_as_keyless():
    doc = _doc(steady=[_step("replicator-eos", 1, 1000, 0.05, "keyed"), _step("replicator-eos", 1, 1000, 0.9)])
    text = "\n".join(report.steady_tables(doc))
    keyed, keyless = text.index("### Steady state (keyed load"), text.index("### Steady state (keyless load")
    assert keyed < keyless  # the default shape first
    assert "| 0.050 |" in text[keyed:keyless] and "| 0.900 |" in text[keyless:]


def _first(contender: str, run: int, worst: float, start: float) -> dict:
    return {"contender": contender, "run": run, "size": 1024, "shape": "keyed", "rate": 2000, "seconds": 60.0,
            "p50_s": 0.02, "p99_s": 0.3, "worst_window_p99_s": worst, "worst_window_from_s": start}


def test_the_first_minute_shows_the_worst_window_of_every_run():
    doc = _doc(steady=[_step("replicator-eos", 1, 1000, 0.05, "keyed")],
               first_minute=[_first("replicator-eos", 1, 6.9, 10), _first("replicator-eos", 2, 3.7, 20),
                             _first("mm2-eos", 1, 0.5, 0)])
    text = "\n".join(report.first_minute_table(doc))
    ours = next(line for line in text.splitlines() if "| replicator exactly-once |" in line)
    assert "| 5.300 | 6.90 @ 10, 3.70 @ 20 | 2 |" in ours  # median of 6.9 and 3.7, then each run
    assert "| MirrorMaker 2 exactly-once | 2,000 |" in text


def _wan(contender: str, run: int, rate: float, placement: str = "near-target", rtt: float = 100, **kw) -> dict:
    return {"contender": contender, "run": run, "ok": True, "placement": placement, "rtt_ms": rtt,
            "records_per_s": rate, "mb_per_s": rate / 1000, "cpu_s_per_gb": 3.0, "link_cpu_s_per_gb": 0.4,
            "link_bytes_per_payload_byte": 1.0,
            "first_visible_s": 5.0, "compression": "none", **kw}


def test_the_wan_table_pairs_each_run_with_mm2_in_the_same_cell():
    rows = [_wan("replicator-eos", 1, 200_000), _wan("mm2-eos", 1, 100_000),
            _wan("replicator-eos", 2, 90_000), _wan("mm2-eos", 2, 100_000),
            _wan("replicator-eos", 1, 50_000, rtt=0), _wan("mm2-eos", 1, 500_000, rtt=0)]
    doc = _doc(wan=rows, wan_settings={"records": 100_000, "size": 1024})
    lines = report.wan_tables(doc)
    ours_100 = next(line for line in lines if line.startswith("| near-target | 100 |") and "replicator" in line)
    assert "| 1.45 |" in ours_100  # median of 2.0 and 0.9; the 0 ms cell is not mixed in
    ours_0 = next(line for line in lines if line.startswith("| near-target | 0 |") and "replicator" in line)
    assert "| 0.10 |" in ours_0


def test_a_capped_cell_comes_after_the_uncapped_ones_with_its_cap_and_compression():
    rows = [_wan("replicator-eos", 1, 1000, rtt=50, cap_mb_per_s=25.0, compression="lz4"),
            _wan("replicator-eos", 1, 2000, rtt=100)]
    lines = [line for line in report.wan_tables(_doc(wan=rows)) if line.startswith("| near-target")]
    assert lines[0].startswith("| near-target | 100 | - | none |")
    assert lines[1].startswith("| near-target | 50 | 25.0 | lz4 |")


def test_the_link_ceiling_is_its_rate_through_the_link_over_the_direct_one():
    ceiling = [{"tool": "produce", "via": "direct", "run": 1, "ok": True, "records_per_s": 400_000, "mb_per_s": 400},
               {"tool": "produce", "via": "link", "run": 1, "ok": True, "records_per_s": 380_000, "mb_per_s": 380,
                "link_bytes_per_payload_byte": 1.01}]
    lines = report.wan_tables(_doc(link_ceiling=ceiling))
    assert any("| link 0 ms | 380,000 | 380.0 | 0.95 | 1.01 | 1/1 |" in line for line in lines)
    assert any("| direct | 400,000 | 400.0 |  | n/a | 1/1 |" in line for line in lines)


def test_the_throughput_chart_by_round_trip_is_drawn_for_uncapped_cells_only(tmp_path):
    capped_only = _doc(wan=[_wan("replicator-eos", 1, 1000, cap_mb_per_s=25.0)])
    assert not report.wan_chart(capped_only, tmp_path / "none.png")
    both = _doc(wan=[_wan("replicator-eos", 1, 1000, rtt=0), _wan("replicator-eos", 1, 800),
                     _wan("mm2-eos", 1, 700, rtt=0), _wan("mm2-eos", 1, 600, placement="near-source")])
    assert report.wan_chart(both, tmp_path / "wan.png")
    assert (tmp_path / "wan.png").stat().st_size > 0
