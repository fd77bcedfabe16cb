"""`bench.run --merge`: a part re-measured alone, the others kept with the invocation that measured them."""

from bench import report
from bench.parts import measured, merged

MACHINE = {"cpu": "AMD EPYC", "cores": 2, "memory_gib": 23.5, "kernel": "6.18", "python": "3.11.7",
           "java": "openjdk 17", "kafka": "4.1.2", "librdkafka": "2.16.0"}


def _doc(command: str, **rows) -> dict:
    base = {"command": command, "machine": MACHINE, "started": f"{command} start", "finished": f"{command} end",
            "runs": 3, "quick": False, "load": [[0.0, 2.0, 0.0, 0.0]], "partitions": 8, "many_size": 512,
            "catchup": [], "steady": [], "restart": [], "steady_errors": [], "many": []}
    return {**base, **rows}


FULL = _doc("full", catchup=[{"c": 1}], steady=[{"s": 1}], restart=[{"r": 1}])  # written before "parts" existed


def test_a_part_measured_now_replaces_only_its_own_rows():
    many_only = _doc("many", many=[{"m": 1}], many_size=256)
    doc = merged(many_only, measured(True, True, False, True), FULL)
    assert doc["many"] == [{"m": 1}] and doc["many_size"] == 256
    assert doc["catchup"] == [{"c": 1}] and doc["steady"] == [{"s": 1}] and doc["restart"] == [{"r": 1}]
    assert doc["parts"] == ["many partitions"]
    assert [(e["command"], e["parts"]) for e in doc["earlier"]] == [
        ("full", ["catch-up", "steady state", "restart"])]


def test_merging_twice_keeps_each_part_with_the_invocation_that_measured_it():
    first = merged(_doc("many", many=[{"m": 1}]), ["many partitions"], FULL)
    second = merged(_doc("steady", steady=[{"s": 2}], restart=[{"r": 2}]), ["steady state", "restart"], first)
    assert second["catchup"] == [{"c": 1}] and second["steady"] == [{"s": 2}] and second["many"] == [{"m": 1}]
    assert sorted((e["command"], tuple(e["parts"])) for e in second["earlier"]) == [
        ("full", ("catch-up",)), ("many", ("many partitions",))]


def test_a_run_that_measures_everything_keeps_nothing():
    doc = merged(_doc("again", catchup=[{"c": 2}]), measured(False, False, False, False), FULL)
    assert doc["earlier"] == [] and doc["catchup"] == [{"c": 2}] and doc["steady"] == []


def test_without_merge_the_document_is_this_invocations_alone():
    doc = merged(_doc("alone", many=[{"m": 1}]), ["many partitions"], None)
    assert doc["earlier"] == [] and doc["catchup"] == []


def test_the_report_names_each_parts_command(tmp_path):
    # No rows, so no tables or charts to draw: the header is what is checked.
    full = {**_doc("full"), "parts": ["catch-up", "steady state and restart"]}  # as written before the split
    doc = merged(_doc("bench.run --no-catchup --no-steady --merge"), ["many partitions"], full)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("old tables\n<!-- analysis -->\nkept analysis\n")
    report.write(doc, md, tmp_path / "t.png", tmp_path / "l.png")
    text = md.read_text()
    head = text[:text.index("###") if "###" in text else len(text)]
    assert "- **catch-up, steady state, restart**:\n  - command: `full`" in head
    assert "- **many partitions**:\n  - command: `bench.run --no-catchup --no-steady --merge`" in head
    assert head.index("catch-up, steady") < head.index("many partitions")
    assert text.endswith("<!-- analysis -->\nkept analysis\n")


def test_the_header_names_the_brokers_heap_each_invocation_ran_with(tmp_path):
    full = {**_doc("full"), "parts": ["catch-up"]}  # written before the heap was recorded: 512 MiB
    doc = merged({**_doc("many"), "broker_heap": "-Xms512m -Xmx2g"}, ["many partitions"], full)
    md = tmp_path / "BENCHMARKS.md"
    report.write(doc, md, tmp_path / "t.png", tmp_path / "l.png")
    lines = md.read_text().splitlines()
    assert "512 MiB heap" in lines[lines.index("- **catch-up**:") + 2]
    assert "2 GiB heap" in lines[lines.index("- **many partitions**:") + 2]


def test_a_steady_series_measured_again_replaces_only_its_own_rows():
    keyless = {**_doc("keyless", steady=[{"shape": "keyless", "size": 1024, "p": 1}, {"shape": "keyless", "size": 100}],
                      first_minute=[{"shape": "keyless", "size": 1024}], restart=[{"r": 1}]),
               "parts": ["steady state and restart"]}
    keyed = _doc("keyed", steady=[{"shape": "keyed", "size": 1024}, {"shape": "keyless", "size": 1024, "p": 2}],
                 first_minute=[{"shape": "keyed", "size": 1024}], restart=[{"r": 2}])
    doc = merged(keyed, ["steady state", "restart"], keyless)
    assert doc["steady"] == [{"shape": "keyed", "size": 1024}, {"shape": "keyless", "size": 1024, "p": 2},
                             {"shape": "keyless", "size": 100}]
    assert doc["first_minute"] == [{"shape": "keyed", "size": 1024}]  # keyless 1 KiB was measured again
    assert doc["restart"] == [{"r": 2}]
    assert [(e["command"], e["parts"], e["series"]) for e in doc["earlier"]] == [
        ("keyless", ["steady state"], ["keyless 100 B"])]


def test_a_restart_measured_alone_keeps_the_steady_rows_and_their_series():
    assert measured(True, False, True, True, restart_only=True) == ["restart"]
    keyed = {**_doc("keyed", catchup=[{"c": 1}], steady=[{"shape": "keyed", "size": 1024}],
                    first_minute=[{"shape": "keyed", "size": 1024}], restart=[{"r": 1}]),
             "parts": ["catch-up", "steady state", "restart"],
             "earlier": [{**_doc("keyless"), "parts": ["steady state"], "series": ["keyless 100 B"]}]}
    doc = merged(_doc("restart", restart=[{"r": 2}]), ["restart"], keyed)
    assert doc["restart"] == [{"r": 2}]
    assert doc["catchup"] == [{"c": 1}] and doc["steady"] == [{"shape": "keyed", "size": 1024}]
    assert doc["first_minute"] == [{"shape": "keyed", "size": 1024}]
    assert [(e["command"], e["parts"], e.get("series")) for e in doc["earlier"]] == [
        ("keyless", ["steady state"], ["keyless 100 B"]), ("keyed", ["catch-up", "steady state"], ["keyed 1024 B"])]


def test_a_series_measured_again_keeps_the_other_parts_rows_of_its_invocation():
    full = {**_doc("full", catchup=[{"c": 1}], steady=[{"shape": "keyless", "size": 100}], restart=[{"r": 1}]),
            "parts": ["catch-up", "steady state", "restart"]}
    doc = merged(_doc("keyed", steady=[{"shape": "keyed", "size": 1024}], restart=[{"r": 2}]),
                 ["steady state", "restart"], full)
    assert doc["catchup"] == [{"c": 1}] and doc["restart"] == [{"r": 2}]
    assert doc["steady"] == [{"shape": "keyed", "size": 1024}, {"shape": "keyless", "size": 100}]


def test_the_wan_steady_cells_are_a_part_of_their_own():
    assert "WAN steady state" in measured(True, True, True, False, wan_steady=True)
    assert measured(True, True, True, False, wan_steady_only=True) == ["WAN steady state"]
    assert measured(True, True, True, True, wan_steady=True) == []
    wan = {**_doc("wan", wan=[{"w": 1}], link_ceiling=[{"l": 1}], wan_steady=[{"s": 1}]),
           "parts": ["WAN", "WAN steady state"]}
    doc = merged(_doc("steady only", wan_steady=[{"s": 2}]), ["WAN steady state"], wan)
    assert doc["wan"] == [{"w": 1}] and doc["link_ceiling"] == [{"l": 1}] and doc["wan_steady"] == [{"s": 2}]


def test_the_wan_steady_table_has_a_row_per_placement_and_contender():
    rows = [{"contender": k, "run": run, "ok": True, "placement": "near-source", "rtt_ms": 50.0, "rate": 10_000,
             "p50_s": 0.05 * run, "p99_s": 0.1 * run, "bounded": True} for k in ("mm2-eos", "replicator-eos")
            for run in (1, 2, 3)]
    table = report.wan_steady_table({"wan_steady": rows})
    assert "10,000 records/s" in table[0]
    ours = next(line for line in table if "replicator exactly-once" in line)
    assert ours == "| near-source | 50 | replicator exactly-once | 0.100 | 0.200 | 0.100, 0.200, 0.300 | 3/3 |"


def test_a_steady_series_measured_without_the_restart_keeps_the_restart_rows():
    assert measured(True, False, True, True, no_restart=True) == ["steady state"]
    old = {**_doc("old", steady=[{"shape": "keyed", "size": 1024}], restart=[{"r": 1}]),
           "parts": ["steady state", "restart"]}
    doc = merged(_doc("keyed 100 B", steady=[{"shape": "keyed", "size": 100}]), ["steady state"], old)
    assert doc["restart"] == [{"r": 1}]
    assert doc["steady"] == [{"shape": "keyed", "size": 100}, {"shape": "keyed", "size": 1024}]


def test_an_invocation_named_with_no_series_holds_only_the_unclaimed_ones():
    keyless = {**_doc("keyless"), "parts": ["steady state"], "series": ["keyless 1024 B"]}
    keyed = {**_doc("keyed", steady=[{"shape": "keyed", "size": 1024}, {"shape": "keyless", "size": 1024}]),
             "parts": ["steady state"], "earlier": [keyless]}
    restart = merged(_doc("restart", restart=[{"r": 1}]), ["restart"], keyed)  # keeps keyed's steady part whole
    doc = merged(_doc("keyed 100 B", steady=[{"shape": "keyed", "size": 100}]), ["steady state"], restart)
    assert sorted((e["command"], tuple(e.get("series", ()))) for e in doc["earlier"]) == [
        ("keyed", ("keyed 1024 B",)), ("keyless", ("keyless 1024 B",)), ("restart", ())]
