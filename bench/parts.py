"""The parts of a results document (bench/results.json), and `--merge`: one part re-measured, the
others kept from the document an earlier invocation wrote.

A full `make bench` takes well over an hour; the many-partitions shape at 5,000 partitions alone takes
most of one. Merging lets each part be measured on its own and still be reported together, with the
command, time and load of the invocation that measured it.
"""

from __future__ import annotations

# A part's name -> the keys of the results document that hold its rows (lists) and its settings.
PARTS: dict[str, tuple[str, ...]] = {
    "catch-up": ("catchup", "partitions"),
    "steady state": ("steady", "steady_errors", "first_minute"),
    "restart": ("restart",),
    "many partitions": ("many", "many_size"),
    "WAN": ("wan", "link_ceiling", "wan_settings"),
    "WAN steady state": ("wan_steady",),
}
STEADY, RESTART = "steady state", "restart"
# Documents written while the restart was measured only with the steady series name one part for both.
_LEGACY = {"steady state and restart": (STEADY, RESTART)}
SERIES_ROWS = ("steady", "first_minute")  # a shape and size re-measured replaces only its own rows
# What describes one invocation (the report's header lines).
INVOCATION = ("command", "machine", "started", "finished", "runs", "quick", "load", "target_transaction_version",
              "broker_heap")


def measured(no_catchup: bool, no_steady: bool, no_many: bool, no_wan: bool, restart_only: bool = False,
             wan_steady: bool = False, wan_steady_only: bool = False, no_restart: bool = False) -> list[str]:
    """The parts an invocation measures. `restart_only`: the restart without the steady series it is
    measured after (a contender's start and one rate step under load are all it needs); `no_restart`:
    the steady series without it; `wan_steady`: the steady-state cells through the WAN link as well,
    `wan_steady_only`: those cells without the rest of the WAN part."""
    skipped = {"catch-up": no_catchup, STEADY: no_steady or restart_only, RESTART: no_steady or no_restart,
               "many partitions": no_many, "WAN": no_wan or wan_steady_only,
               "WAN steady state": no_wan or not (wan_steady or wan_steady_only)}
    return [p for p in PARTS if not skipped[p]]


def named(parts: list[str]) -> list[str]:
    """Part names as they are now (an older document's merged steady-and-restart part is two)."""
    return [n for p in parts for n in _LEGACY.get(p, (p,))]


def merged(new: dict, measured_now: list[str], old: dict | None) -> dict:
    """`new` with the rows of every part it did not measure taken from `old`. Each kept part stays
    attributed to the invocation that measured it, under "earlier" (one entry per invocation)."""
    doc = {**new, "parts": list(measured_now)}
    if not old:
        doc["earlier"] = []
        return doc
    earlier = []
    series = _kept_series(doc, measured_now, old)
    # An older document's own "earlier" entries first: a part is kept from wherever it was measured.
    own = {k: old[k] for k in INVOCATION if k in old}
    invocations = [*old.get("earlier", []), {**own, "parts": _parts_of(old)}]
    # An invocation named with no series holds the steady series no other one is named with.
    claimed = {x for inv in invocations for x in inv.get("series", [])}
    unclaimed = sorted({series_of(r) for key in SERIES_ROWS for r in old.get(key, [])} - claimed)
    for inv in invocations:
        inv = {**inv, "parts": named(inv["parts"])}
        held = inv.get("series", unclaimed) if STEADY in inv["parts"] else []
        kept = [p for p in inv["parts"] if p not in measured_now]
        mine = [x for x in series if x in held]
        if mine:  # the steady series not measured again stay, with the invocation that measured them
            earlier.append({**inv, "parts": [*kept, STEADY], "series": mine})
        elif kept:  # a steady part kept whole keeps the series it holds
            earlier.append({k: v for k, v in inv.items() if k != "series"} | {"parts": kept}
                           | ({"series": held} if STEADY in kept and held else {}))
        for p in kept:  # every part's rows sit at the top of a document, wherever they were measured
            for key in PARTS[p]:
                if key in old:
                    doc[key] = old[key]
    doc["earlier"] = earlier
    return doc


def series_of(row: dict) -> str:
    """A steady-state row's series: its load shape and record size."""
    return f"{row.get('shape', 'keyless')} {row.get('size', 1024)} B"  # rows from before shapes and sizes


def _kept_series(doc: dict, measured_now: list[str], old: dict) -> list[str]:
    """With the steady part measured now: moves the old document's steady rows of the series this
    invocation did not measure into `doc`, and names those series."""
    if STEADY not in measured_now:
        return []
    now = {series_of(r) for key in SERIES_ROWS for r in doc.get(key, [])}
    if not now:  # nothing of it measured: the part is replaced, as any other
        return []
    kept = []
    for key in SERIES_ROWS:
        rows = [r for r in old.get(key, []) if series_of(r) not in now]
        doc[key] = [*doc.get(key, []), *rows]
        kept += [series_of(r) for r in rows]
    return sorted(set(kept))


def _parts_of(doc: dict) -> list[str]:
    """The parts a document's own invocation measured (documents from before "parts" existed: the
    parts that hold rows, less those kept from earlier invocations)."""
    if "parts" in doc:
        own = named(doc["parts"])
    else:
        own = [p for p, keys in PARTS.items() if any(isinstance(doc.get(k), list) and doc[k] for k in keys)]
    # An earlier invocation that holds some steady series shares the part with this one.
    elsewhere = {p for inv in doc.get("earlier", []) for p in named(inv["parts"])
                 if not (p == STEADY and inv.get("series"))}
    return [p for p in own if p not in elsewhere]
