"""Imports flow one way: no circle between the package's modules, nor between its rooms (the
subpackages; each top-level module is a room of its own). Imports inside functions count too: a
deferred import hides a circle from Python, not from the reader."""

from __future__ import annotations

import ast
from pathlib import Path

import replicator

ROOT = Path(replicator.__file__).parent
# sandbox.cluster imports sandbox.multi inside a function (a multi-broker sandbox is a kind of
# cluster): one room, not this test's to untangle.
KNOWN_CIRCLES = [{"replicator.sandbox.cluster", "replicator.sandbox.multi"}]


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _edges(mods: dict[str, Path]) -> set[tuple[str, str]]:
    edges = set()
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target not in (mod, "replicator"):
                    edges.add((mod, target))
    return edges


def _circles(nodes, edges) -> list[set[str]]:
    """Strongly connected groups of more than one node (Tarjan)."""
    adj: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        adj[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        for w in adj[n]:
            if w not in index:
                visit(w)
                low[n] = min(low[n], low[w])
            elif w in stack:
                low[n] = min(low[n], index[w])
        if low[n] == index[n]:
            group = set()
            while (w := stack.pop()) != n:
                group.add(w)
            group.add(n)
            if len(group) > 1:
                out.append(group)

    for n in nodes:
        if n not in index:
            visit(n)
    return out


def _room(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if (ROOT / parts[1]).is_dir() else mod


def test_no_import_circle_between_modules():
    mods = _modules()
    circles = [c for c in _circles(mods, _edges(mods)) if c not in KNOWN_CIRCLES]
    assert not circles, f"import circles: {circles}"


def test_no_import_circle_between_rooms():
    mods = _modules()
    arrows = {(_room(a), _room(b)) for a, b in _edges(mods) if _room(a) != _room(b)}
    rooms = {_room(m) for m in mods if m != "replicator"}
    assert not _circles(rooms, arrows), f"rooms importing each other: {_circles(rooms, arrows)}"
