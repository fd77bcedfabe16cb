"""Schemas fail over with the records: a registry-API sync that keeps schema ids, and the check that
the target's registry holds every schema id its records refer to.

A record written through a schema registry carries the schema's id in its first five bytes (Confluent
wire format: magic byte 0, then the id as a 4-byte big-endian integer). The replicator copies those bytes
as they are, so after a failover every consumer looks the ids up in the DR side's registry: an id it
lacks fails every deserialization, an id that names another schema there decodes into garbage. The sync
therefore copies each subject version to the target registry in the order of the source's ids and only
where the target will assign that very id; anything else is a conflict, reported, never registered.

Any registry speaking the Confluent REST API works (Confluent Schema Registry, Karapace, Redpanda,
Apicurio under /apis/ccompat/v7). Only the standard library is used: five GET/POST calls.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
HEADER_BYTES = 5  # magic byte + 4-byte id


def schema_id(payload: bytes | None) -> int | None:
    """The schema id a Confluent-framed key or value refers to, None when it is not framed."""
    if payload is None or len(payload) < HEADER_BYTES or payload[0] != 0:
        return None
    return int.from_bytes(payload[1:HEADER_BYTES], "big")


class RegistryError(RuntimeError):
    """A registry could not be read or written; the message names it without its credentials."""


class Registry:
    """The Confluent REST API of one registry. `url` is its base (e.g. http://host:8081, or
    http://host:8080/apis/ccompat/v7 for Apicurio); user:password in it become HTTP basic auth and
    are never shown."""

    def __init__(self, url: str, timeout: float = 15.0) -> None:
        parts = urllib.parse.urlsplit(url.rstrip("/"))
        if "@" in parts.path + parts.query + parts.fragment:
            # The user info ended early, at a '/', '?' or '#' of the password: what looks like the
            # host and path is part of it.
            raise RegistryError(f"schema registry URL {_redact(url)!r}: a '/', '?', '#' or '@' in its user name or "
                                "password must be percent-encoded (%2F, %3F, %23, %40)")
        try:
            port = parts.port
        except ValueError:
            port = None
            parts = parts._replace(netloc="")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RegistryError(f"schema registry URL must be http(s)://[user:password@]host[:port][/path] with a "
                                f"port of 1-65535, got {_redact(url)!r}")
        netloc = parts.hostname + (f":{port}" if port else "")
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        self._auth = None
        if parts.username is not None:
            creds = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._auth = "Basic " + base64.b64encode(creds.encode()).decode()
        self._timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> Any | None:
        """The decoded JSON answer; None on 404 (no such subject, version or id)."""
        req = urllib.request.Request(self.url + path, method=method, headers={"Accept": _CONTENT_TYPE})
        if body is not None:
            req.data = json.dumps(body).encode()
            req.add_header("Content-Type", _CONTENT_TYPE)
        if self._auth:
            req.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            detail = e.read()[:300].decode(errors="replace")
            raise RegistryError(f"schema registry {self.url}: {method} {path} answered {e.code}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise RegistryError(f"schema registry {self.url} cannot be reached: {getattr(e, 'reason', e)}") from None

    def subjects(self) -> list[str]:
        return self._call("GET", "/subjects") or []

    def versions(self, subject: str) -> list[int]:
        return self._call("GET", f"/subjects/{_q(subject)}/versions") or []

    def version(self, subject: str, version: int) -> dict | None:
        return self._call("GET", f"/subjects/{_q(subject)}/versions/{version}")

    def schema(self, schema_id: int) -> dict | None:
        """The schema registered under `schema_id`, None when the registry has no such id."""
        return self._call("GET", f"/schemas/ids/{schema_id}")

    def register(self, subject: str, sv: SubjectVersion) -> int:
        body: dict[str, Any] = {"schema": sv.schema}
        if sv.schema_type != "AVRO":
            body["schemaType"] = sv.schema_type
        if sv.references:
            body["references"] = sv.references
        answer = self._call("POST", f"/subjects/{_q(subject)}/versions", body)
        if not answer or "id" not in answer:
            raise RegistryError(f"schema registry {self.url}: registering under {subject!r} answered {answer!r}")
        return int(answer["id"])


@dataclass(frozen=True)
class SubjectVersion:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: tuple = ()

    def same_schema(self, other: dict) -> bool:
        return (_canonical(self.schema) == _canonical(other.get("schema", ""))
                and self.schema_type == other.get("schemaType", "AVRO"))


def registered(registry: Registry) -> list[SubjectVersion]:
    """Every subject version of `registry`, in the order of its schema ids (then subject, version)."""
    out = []
    for subject in registry.subjects():
        for v in registry.versions(subject):
            d = registry.version(subject, v)
            if d is None:  # deleted between the two calls
                continue
            out.append(SubjectVersion(subject, int(d["version"]), int(d["id"]), d["schema"],
                                      d.get("schemaType", "AVRO"), tuple(d.get("references") or ())))
    return sorted(out, key=lambda s: (s.id, s.subject, s.version))


@dataclass
class SyncReport:
    source: str
    target: str
    copied: list[SubjectVersion] = field(default_factory=list)
    already: int = 0  # subject versions the target held with the same id
    conflicts: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def to_dict(self) -> dict:
        return {"ok": self.ok, "source": self.source, "target": self.target, "already_present": self.already,
                "copied": [{"subject": s.subject, "version": s.version, "id": s.id} for s in self.copied],
                "conflicts": self.conflicts}


def sync(source: Registry, target: Registry) -> SyncReport:
    """Copies to `target` every subject version of `source` it lacks, each under the source's schema id.

    A registry assigns the next id itself (its highest plus one), so a schema new to the target is
    registered only when that next id is the source's; a schema the target already has under the same
    id is only added to the subject. Where the target cannot end up with the source's id (it assigned
    that id, or ids past it, to something else: a split brain, or schemas registered on it directly),
    the subject version is reported as a conflict and nothing more is registered: a later id would be
    off too. Run it from the primary's registry to the DR one; after a failover, the other way round."""
    report = SyncReport(source.url, target.url)
    existing = registered(target)
    held = {(s.subject, s.id) for s in existing}
    top = max((s.id for s in existing), default=0)
    for sv in registered(source):
        if (sv.subject, sv.id) in held:
            report.already += 1
            continue
        there = target.schema(sv.id)
        if there is not None and not sv.same_schema(there):
            report.conflicts.append(f"schema id {sv.id} ({sv.subject} v{sv.version}) names a different schema on "
                                    f"the target registry")
            break
        if there is None and sv.id != top + 1:
            report.conflicts.append(
                f"schema id {sv.id} ({sv.subject} v{sv.version}) cannot be given the same id on the target "
                f"registry: its next id is {top + 1}" + (" (it holds ids the source does not)" if sv.id <= top
                                                         else " (the source skipped ids: deleted schemas?)"))
            break
        got = target.register(sv.subject, sv)
        if got != sv.id:  # another writer raced this sync, or the target deleted schemas past `top`
            report.conflicts.append(f"schema id {sv.id} ({sv.subject} v{sv.version}) was registered on the "
                                    f"target under id {got}: another writer registers there, or it deleted "
                                    f"schemas with higher ids")
            break
        report.copied.append(sv)
        held.add((sv.subject, sv.id))
        top = max(top, got)
    return report


@dataclass
class IdUse:
    """Records of one partition referring to one schema id."""

    topic: str
    partition: int
    schema_id: int
    records: int = 0
    first_offset: int = -1


def referenced_ids(consumer, partitions: Iterable[tuple[str, int]], timeout: float = 120.0) -> list[IdUse]:
    """Schema ids in the keys and values of the committed records of `partitions`, read from the start.

    `consumer`: a confluent-kafka Consumer with enable.partition.eof, read_committed, no commits."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    todo = {tp for tp in partitions}
    if not todo:
        return []
    uses: dict[tuple[str, int, int], IdUse] = {}
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in todo])
    deadline = time.monotonic() + timeout
    while todo:
        if time.monotonic() > deadline:
            left = ", ".join(f"{t}[{p}]" for t, p in sorted(todo))
            raise RegistryError(f"reading the target's records for schema ids did not finish in {timeout:.0f}s: {left}")
        for m in consumer.consume(num_messages=5000, timeout=0.5):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    todo.discard((m.topic(), m.partition()))
                    continue
                raise RegistryError(f"reading {m.topic()}[{m.partition()}] on the target: {err}")
            for payload in (m.key(), m.value()):
                if (sid := schema_id(payload)) is not None:
                    use = uses.setdefault((m.topic(), m.partition(), sid), IdUse(m.topic(), m.partition(), sid))
                    use.records += 1
                    if use.first_offset < 0:
                        use.first_offset = m.offset()
    return sorted(uses.values(), key=lambda u: (u.topic, u.partition, u.schema_id))


def registry_behind(uses: Iterable[IdUse], registry: Registry) -> list[str]:
    """One line per partition and schema id its records refer to that `registry` does not hold."""
    known: dict[int, bool] = {}
    out = []
    for u in uses:
        if u.schema_id not in known:
            known[u.schema_id] = registry.schema(u.schema_id) is not None
        if not known[u.schema_id]:
            out.append(f"{u.topic}[{u.partition}]: {u.records} records (first at offset {u.first_offset}) refer to "
                       f"schema id {u.schema_id}, which the target's schema registry {registry.url} does not have: "
                       f"the registry is behind the records (sync it before consumers read them)")
    return out


def registry_option(_ctx, param, value: str | None) -> Registry | None:
    """click callback: a registry URL option as a Registry; a malformed URL is a usage error (exit 2)."""
    import click

    from replicator.secret_refs import SecretReferenceError, resolve_value

    try:
        # ${env:NAME} or ${file:/path}: a URL with credentials kept out of the command line (ps, the pod spec).
        return Registry(resolve_value(param.opts[0], value)) if value else None
    except (RegistryError, SecretReferenceError) as e:
        raise click.BadParameter(str(e), param=param) from None


def _q(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _canonical(schema: str) -> str:
    """Avro and JSON Schema compare as JSON (registries may re-indent); Protobuf as stripped text."""
    try:
        return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return schema.strip()


def _redact(url: str) -> str:
    """The URL with everything between its scheme and its last '@' hidden: wherever a malformed URL
    makes a parser end the user info, the password is before that '@'."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
