"""One owner per name and per client: the names the replicator puts on a cluster are spelled in
`replicator.names` only, and confluent-kafka clients are built in `replicator.clients` only, so a
grant, a check and the client that needs it cannot drift apart (docs/contributing.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import replicator

ROOT = Path(replicator.__file__).parent
# The sandbox stands for the user's clusters and the demo for the user's own clients.
CLIENT_BUILDERS = ("clients/", "sandbox/", "commands/demo.py", "commands/sample_data.py")


def _trees():
    for path in sorted(ROOT.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            out.add(id(first.value))
    return out


def test_internal_names_are_spelled_in_names_only():
    found = []
    for rel, tree in _trees():
        if rel == "names.py":
            continue
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and "__replicator." in node.value and "<name>" not in node.value):
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not found, "spell these with replicator.names:\n" + "\n".join(found)


def test_confluent_clients_are_built_in_clients_only():
    found = []
    for rel, tree in _trees():
        if rel.startswith(CLIENT_BUILDERS):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("Producer", "Consumer", "AdminClient")):
                found.append(f"{rel}:{node.lineno} {node.func.id}(...)")
    assert not found, "build these with replicator.clients.kafka_clients:\n" + "\n".join(found)


def test_kafka_error_codes_are_not_redeclared():
    """Error codes come from confluent_kafka.KafkaError (or clients.client_errors), not integers."""
    found = []
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, int) and not isinstance(node.value.value, bool)):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.lstrip("_").endswith(
                            ("ALREADY_EXISTS", "NOT_FOUND", "_AUTHORIZATION_FAILED", "_UNKNOWN_TOPIC")):
                        found.append(f"{rel}:{node.lineno} {target.id} = {node.value.value}")
    assert not found, "use KafkaError's constants:\n" + "\n".join(found)
