"""The schema sync's decisions (which id a copy gets, when it must refuse) and the wire-format framing,
on an in-memory stand-in that assigns ids as registries do: a new schema gets the highest id plus one,
a schema it already holds keeps its id in every subject. The real registries: test_schema_registry.py."""

from __future__ import annotations

import json

import pytest

from replicator.ops.schema_registry import (
    IdUse,
    Registry,
    RegistryError,
    SubjectVersion,
    registry_behind,
    schema_id,
    sync,
)


class MemoryRegistry:
    def __init__(self, url: str, first_id: int = 1) -> None:
        self.url = url
        self.by_id: dict[int, str] = {}
        self.subjects_: dict[str, list[int]] = {}
        self.next_id = first_id

    def subjects(self) -> list[str]:
        return list(self.subjects_)

    def versions(self, subject: str) -> list[int]:
        return list(range(1, len(self.subjects_.get(subject, [])) + 1))

    def version(self, subject: str, version: int) -> dict:
        sid = self.subjects_[subject][version - 1]
        return {"subject": subject, "version": version, "id": sid, "schema": self.by_id[sid]}

    def schema(self, sid: int) -> dict | None:
        return {"schema": self.by_id[sid]} if sid in self.by_id else None

    def register(self, subject: str, sv: SubjectVersion) -> int:
        sid = next((i for i, s in self.by_id.items() if json.loads(s) == json.loads(sv.schema)), None)
        if sid is None:
            sid, self.next_id = self.next_id, self.next_id + 1
            self.by_id[sid] = sv.schema
        if sid not in self.subjects_.setdefault(subject, []):
            self.subjects_[subject].append(sid)
        return sid

    def add(self, subject: str, name: str) -> int:
        return self.register(subject, SubjectVersion(subject, 0, 0, _schema(name)))


def _schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": []})


def _ids(r: MemoryRegistry) -> list[tuple[str, int, int]]:
    return sorted((s, v, r.subjects_[s][v - 1]) for s in r.subjects_ for v in r.versions(s))


def test_copies_in_id_order_and_the_target_assigns_the_same_ids():
    src, dst = MemoryRegistry("src"), MemoryRegistry("dst")
    src.add("b-value", "B")
    src.add("a-value", "A")
    src.add("c-value", "B")  # the same schema in a second subject: one id
    report = sync(src, dst)
    assert report.ok and [(s.subject, s.id) for s in report.copied] == [("b-value", 1), ("c-value", 1), ("a-value", 2)]
    assert _ids(dst) == _ids(src)
    again = sync(src, dst)
    assert again.ok and again.copied == [] and again.already == 3


def test_a_target_with_ids_of_its_own_is_a_conflict_and_nothing_is_registered():
    src, dst = MemoryRegistry("src"), MemoryRegistry("dst")
    src.add("a-value", "A")
    dst.add("local-value", "Local")  # registered on the DR registry directly: it took id 1
    report = sync(src, dst)
    assert not report.ok and report.copied == []
    assert report.conflicts == ["schema id 1 (a-value v1) names a different schema on the target registry"]


def test_a_target_past_the_source_id_is_refused():
    src, dst = MemoryRegistry("src"), MemoryRegistry("dst", first_id=3)
    src.add("a-value", "A")
    dst.add("x-value", "X")  # id 3: the target is past id 1 and never held it
    report = sync(src, dst)
    assert report.copied == [] and list(dst.by_id) == [3]
    assert report.conflicts == ["schema id 1 (a-value v1) cannot be given the same id on the target registry: its "
                                "next id is 4 (it holds ids the source does not)"]


def test_an_id_the_target_cannot_assign_next_is_refused():
    src, dst = MemoryRegistry("src", first_id=5), MemoryRegistry("dst")
    src.add("a-value", "A")  # id 5: the source's first ids were deleted
    report = sync(src, dst)
    assert report.copied == [] and dst.by_id == {}
    assert report.conflicts == ["schema id 5 (a-value v1) cannot be given the same id on the target registry: its "
                                "next id is 1 (the source skipped ids: deleted schemas?)"]


def test_a_target_ahead_with_other_schemas_is_refused():
    src, dst = MemoryRegistry("src"), MemoryRegistry("dst")
    src.add("a-value", "A")
    src.add("b-value", "B")
    dst.add("a-value", "A")
    dst.add("z-value", "Z")  # id 2 on the target is not the source's id 2
    dst.add("w-value", "W")
    report = sync(src, dst)
    assert report.already == 1 and report.copied == []
    assert report.conflicts == ["schema id 2 (b-value v1) names a different schema on the target registry"]


def test_schema_id_reads_the_confluent_wire_format():
    assert schema_id(b"\0\0\0\1\x02rest") == 258
    assert schema_id(b"\0\0\0\0\7") == 7
    assert schema_id(b"\1\0\0\0\7") is None  # not magic byte 0
    assert schema_id(b"\0\0\0\7") is None  # too short for an id
    assert schema_id(None) is None


def test_registry_behind_names_each_missing_id_once_per_partition():
    reg = MemoryRegistry("http://dr")
    reg.add("a-value", "A")  # id 1
    uses = [IdUse("t", 0, 1, 10, 0), IdUse("t", 0, 2, 3, 10), IdUse("t", 1, 2, 4, 7)]
    lines = registry_behind(uses, reg)
    assert lines == [
        "t[0]: 3 records (first at offset 10) refer to schema id 2, which the target's schema registry http://dr "
        "does not have: the registry is behind the records (sync it before consumers read them)",
        "t[1]: 4 records (first at offset 7) refer to schema id 2, which the target's schema registry http://dr "
        "does not have: the registry is behind the records (sync it before consumers read them)"]


def test_registry_url_credentials_become_basic_auth_and_are_never_shown():
    r = Registry("https://svc:s3cret@registry.example:8443/base/")
    assert r.url == "https://registry.example:8443/base" and "s3cret" not in repr(vars(r)["url"])
    with pytest.raises(RegistryError) as e:
        Registry("registry:8081")
    assert "http(s)://[user:password@]host" in str(e.value)
    with pytest.raises(RegistryError) as e:
        Registry("ftp://u:s3cret@h/x")
    assert "s3cret" not in str(e.value)


@pytest.mark.parametrize("url", [
    "http://alice:S3cr3t/pw@registry:8081", "http://alice:12345/S3cr3tpw@registry:8081",
    "http://alice:S3cr3t#pw@registry:8081", "http://alice:S3cr3t?pw@registry:8081",
    "http://alice:S3cr3tpw@registry:99999", "http://alice:S3cr3tpw@registry:port",
])
def test_a_malformed_registry_url_with_credentials_is_refused_without_showing_them(url):
    """A '/', '#' or '?' in an unencoded password ends the user info early: the rest looked like a
    host and path, and was shown (or a traceback quoted it)."""
    with pytest.raises(RegistryError) as e:
        Registry(url)
    assert "S3cr3t" not in str(e.value) and "://***@registry" in str(e.value), str(e.value)


def test_a_registry_url_option_takes_an_env_or_file_reference(monkeypatch, tmp_path):
    import click

    from replicator.ops.schema_registry import registry_option

    param = click.Option(["--to", "target"])
    monkeypatch.setenv("DR_REGISTRY", "https://svc:s3cret@dr:8081")
    assert registry_option(None, param, "${env:DR_REGISTRY}").url == "https://dr:8081"
    (tmp_path / "url").write_text("http://u:pw@dr2:8081\n")
    assert registry_option(None, param, f"${{file:{tmp_path / 'url'}}}").url == "http://dr2:8081"
    with pytest.raises(click.BadParameter, match="--to: environment variable UNSET_REGISTRY is not set"):
        registry_option(None, param, "${env:UNSET_REGISTRY}")
