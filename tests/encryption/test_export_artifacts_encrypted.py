"""Artifact bytes in the export and import of an encrypted store.

One module database holds the source (tenant ``axp``: a session whose checkpoint state
embeds two sealed artifacts, one in postgres chunks spanning two frames and three parts,
one in a file backend, and a turn referencing one of them); a second database with ANOTHER
key store is the target of the decrypted export. The exports are made once; every test
imports under ids or tenants of its own."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.artifacts.model import ArtifactRef
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import (
    DecryptionFailed,
    EncryptionRequired,
    ImportRejected,
    KeyShredded,
)
from shardstore.importers.remap import IdMap
from tests.encryption.conftest import raw

MARKER = b"quokka-artifact-5151"
TENANT = "axp"
# two frames (1 MiB each), three parts (512 KiB each) of plaintext, and one more of sealed
BIG = MARKER + bytes(range(256)) * 4800
SMALL = MARKER + b" small"


@pytest.fixture(scope="module")
def object_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("objects") / "store"


@pytest.fixture(scope="module")
def file_store(
    module_dsn: str, keys: LocalKeyProvider, object_root: Path
) -> Iterator[shardstore.Store]:
    """The source database with a file backend for artifacts (it reads postgres ones too)."""
    url = object_root.as_uri()
    store = shardstore.connect(module_dsn, encryption=keys, artifacts=url)
    yield store
    store.close()


@pytest.fixture(scope="module")
def source(enc_store: shardstore.Store, file_store: shardstore.Store) -> dict[str, Any]:
    sid = enc_store.create_session(TENANT, "ivy")
    enc_store.append_turns(sid, [{"role": "user", "content": f"turn {i}"} for i in range(3)])
    big = enc_store.put_artifact(TENANT, BIG, content_type="application/octet-stream")
    small = file_store.put_artifact(
        TENANT, SMALL, content_type="text/plain", owner=("turn", f"{sid}:1")
    )
    enc_store.checkpoint(sid, {"doc": big.to_json(), "deep": [{"img": small.to_json()}]})
    enc_store.append_turn(sid, {"role": "tool", "content": "see", "ref": big.to_json()})
    return {"sid": sid, "big": big, "small": small}


def _export(store: shardstore.Store, sid: uuid.UUID, **kw: Any) -> str:
    out = io.StringIO()
    store.export_sessions([sid], out=out, **kw)
    return out.getvalue()


@pytest.fixture(scope="module")
def exports(file_store: shardstore.Store, source: dict[str, Any]) -> dict[str, str]:
    return {
        "sealed": _export(file_store, source["sid"]),
        "plain": _export(file_store, source["sid"], decrypt=True),
    }


@pytest.fixture(scope="module")
def target_dsn(server_dsn: str, _databases: Any) -> Iterator[str]:
    name = _databases.take()
    yield make_conninfo(server_dsn, dbname=name)
    _databases.drop_later([name])


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> LocalKeyProvider:
    where = tmp_path_factory.mktemp("other-keys")
    return LocalKeyProvider(where / "store", key_file=where / "kek")


@pytest.fixture(scope="module")
def target(target_dsn: str, other_keys: LocalKeyProvider) -> Iterator[shardstore.Store]:
    store = shardstore.connect(target_dsn, encryption=other_keys)
    yield store
    store.close()


def _lines(text: str, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in map(json.loads, text.splitlines()) if doc["kind"] == kind]


def _part_bytes(text: str) -> bytes:
    return b"".join(base64.b64decode(doc["data"]) for doc in _lines(text, "artifact_part"))


def _restored_refs(store: shardstore.Store, sid: uuid.UUID) -> tuple[ArtifactRef, ArtifactRef]:
    """The references the session's restored checkpoint state embeds."""
    checkpoint = store.restore(sid).checkpoint
    assert checkpoint is not None
    state = checkpoint.state
    return ArtifactRef.from_json(state["doc"]), ArtifactRef.from_json(state["deep"][0]["img"])


def _marker_rows(dsn: str) -> int:
    """Rows of the artifact chunks of ``TENANT`` that hold the marker in plaintext."""
    ((count,),) = raw(
        dsn,
        "SELECT count(*) FROM shardstore.artifact_chunks"
        " WHERE tenant_id = %s AND position(%s::bytea in data) > 0",
        (TENANT, MARKER),
    )
    return int(count)


def _artifact_count(dsn: str, tenant: str) -> int:
    ((count,),) = raw(
        dsn, "SELECT count(*) FROM shardstore.artifacts WHERE tenant_id = %s", (tenant,)
    )
    return int(count)


def test_the_export_carries_sealed_bytes_unless_asked_to_decrypt(
    exports: dict[str, str], source: dict[str, Any]
) -> None:
    sealed, plain = exports["sealed"], exports["plain"]
    by_id = {doc["artifact_id"]: doc for doc in _lines(sealed, "artifact")}
    assert set(by_id) == {str(source["big"].artifact_id), str(source["small"].artifact_id)}
    assert all(doc["sealed"] is True and doc["bytes"] is True for doc in by_id.values())
    assert MARKER not in _part_bytes(sealed) and MARKER.decode() not in sealed
    big = by_id[str(source["big"].artifact_id)]
    assert big["size_bytes"] == len(BIG) and big["stored_bytes"] > len(BIG)
    # decrypted: the plaintext, announced by its plain sha256 (the id stays the file's)
    decrypted = {doc["artifact_id"]: doc for doc in _lines(plain, "artifact")}
    assert set(decrypted) == set(by_id)
    assert decrypted[str(source["big"].artifact_id)]["sha256"] == hashlib.sha256(BIG).hexdigest()
    assert decrypted[str(source["big"].artifact_id)]["parts"] == 3
    assert _part_bytes(plain) in (BIG + SMALL, SMALL + BIG)


def test_decrypted_export_is_sealed_under_another_key_store(
    target: shardstore.Store, target_dsn: str, exports: dict[str, str], source: dict[str, Any]
) -> None:
    report = target.import_jsonl(io.StringIO(exports["plain"]))
    assert (report.sessions, report.artifacts, report.artifact_refs) == (1, 2, 3)
    big, small = _restored_refs(target, source["sid"])
    # sealed here under the session's key: a keyed address of this key store, new ids
    assert big.artifact_id != source["big"].artifact_id
    # a reference inside a turn's message names it here too
    *_, last = target.history(source["sid"])
    assert ArtifactRef.from_json(last.message["ref"]) == big
    assert target.get_artifact(TENANT, big.artifact_id) == BIG
    assert target.get_artifact(TENANT, small.artifact_id) == SMALL
    live = {info.ref.artifact_id: info.live_refs for info in target.list_artifacts(TENANT)}
    assert live == {big.artifact_id: 1, small.artifact_id: 2}  # checkpoint; checkpoint + turn
    assert _marker_rows(target_dsn) == 0
    with shardstore.connect(target_dsn) as plain, pytest.raises(EncryptionRequired):
        plain.get_artifact(TENANT, big.artifact_id)


def test_sealed_export_imports_remapped_under_the_same_key_store(
    file_store: shardstore.Store,
    object_root: Path,
    module_dsn: str,
    exports: dict[str, str],
    source: dict[str, Any],
) -> None:
    enc_store = file_store  # new artifacts go into its file backend
    import_id = str(uuid.uuid4())
    report = enc_store.import_jsonl(
        io.StringIO(exports["sealed"]), remap_ids=True, import_id=import_id
    )
    # the copy is sealed under its session's key, here the subject's: the big artifact
    # (put under the tenant's key) becomes another artifact, the small one (put for a turn
    # of the subject) is the same content under the same key, stored once
    assert (report.sessions, report.artifacts, report.artifact_refs) == (1, 1, 3)
    new_sid = IdMap(import_id).session(source["sid"])
    big, small = _restored_refs(enc_store, new_sid)
    assert big.artifact_id != source["big"].artifact_id
    assert small.artifact_id == source["small"].artifact_id
    assert enc_store.get_artifact(TENANT, big.artifact_id) == BIG
    assert enc_store.get_artifact(TENANT, small.artifact_id) == SMALL
    # raw tables and files hold no marker
    assert _marker_rows(module_dsn) == 0
    objects = [p for p in object_root.rglob("*") if p.is_file()]
    assert objects and not any(MARKER in p.read_bytes() for p in objects)
    # a re-run (a resumed import): the session is there, nothing is stored twice, and the
    # references still name the artifacts here
    count = _artifact_count(module_dsn, TENANT)
    again = enc_store.import_jsonl(
        io.StringIO(exports["sealed"]), remap_ids=True, import_id=import_id
    )
    assert (again.sessions, again.unchanged, again.artifacts) == (0, 1, 0)
    assert _artifact_count(module_dsn, TENANT) == count
    assert _restored_refs(enc_store, new_sid) == (big, small)


def test_decrypted_export_imports_into_a_plaintext_store(
    plain_store: shardstore.Store, exports: dict[str, str], source: dict[str, Any]
) -> None:
    # into a tenant of its own: the other tests find no plaintext in TENANT's rows
    text = exports["plain"].replace(f'"tenant_id":"{TENANT}"', '"tenant_id":"axp-plain"')
    report = plain_store.import_jsonl(io.StringIO(text), remap_ids=True)
    assert (report.sessions, report.artifacts) == (1, 2)
    new_sid = IdMap(json.loads(text.splitlines()[0])["export_id"]).session(source["sid"])
    big, small = _restored_refs(plain_store, new_sid)
    assert big.sha256 == hashlib.sha256(BIG).hexdigest()  # a plaintext store's address
    assert plain_store.get_artifact("axp-plain", big.artifact_id) == BIG
    assert plain_store.get_artifact("axp-plain", small.artifact_id) == SMALL


def test_sealed_artifacts_into_a_plaintext_store_are_refused_before_writing(
    plain_store: shardstore.Store, module_dsn: str, exports: dict[str, str]
) -> None:
    lines = exports["sealed"].splitlines()
    # the export line says sealed; without that field, the artifact line says it
    header = {**json.loads(lines[0]), "sealed": False}
    unsaid = "\n".join([json.dumps(header), *lines[1:]])
    for text in (exports["sealed"], unsaid):
        before = _artifact_count(module_dsn, TENANT)
        for on_error in ("raise", "skip"):
            with pytest.raises(EncryptionRequired):
                plain_store.import_jsonl(io.StringIO(text), remap_ids=True, on_error=on_error)
        assert _artifact_count(module_dsn, TENANT) == before


def _forged(text: str, index: int, change: Any) -> str:
    """``text`` with the ``index``-th artifact line changed by ``change(doc, lines, at)``."""
    lines = text.splitlines()
    at = [i for i, raw_line in enumerate(lines) if '"kind":"artifact"' in raw_line][index]
    doc = json.loads(lines[at])
    change(doc, lines, at)
    lines[at] = json.dumps(doc)
    return "\n".join(lines)


def _renamed(doc: dict[str, Any], lines: list[str], at: str | int) -> None:
    """Give the artifact and its parts another id."""
    assert isinstance(at, int)
    doc["artifact_id"] = new = str(uuid.uuid4())
    for n in range(doc["parts"]):
        part = json.loads(lines[at + 1 + n])
        lines[at + 1 + n] = json.dumps({**part, "artifact_id": new})


def _retampered(doc: dict[str, Any], lines: list[str], at: str | int) -> None:
    """Flip a byte of the sealed bytes and announce the tampered bytes' own digest (so only
    the authentication can tell)."""
    assert isinstance(at, int)
    part = json.loads(lines[at + 1])
    data = bytearray(base64.b64decode(part["data"]))
    data[-1] ^= 1
    part["data"] = base64.b64encode(bytes(data)).decode()
    lines[at + 1] = json.dumps(part)
    digest = hashlib.sha256()
    for n in range(doc["parts"]):
        digest.update(base64.b64decode(json.loads(lines[at + 1 + n])["data"]))
    doc["stored_sha256"] = digest.hexdigest()


def _truncated(text: str) -> str:
    """``text`` ending after the first part of its artifact of several parts."""
    lines = text.splitlines()
    at = next(i for i, doc in enumerate(map(json.loads, lines)) if doc.get("parts", 0) > 1)
    return "\n".join(lines[: at + 2])


def test_hostile_artifact_lines_are_typed_errors_and_write_nothing(
    enc_store: shardstore.Store,
    target: shardstore.Store,
    module_dsn: str,
    target_dsn: str,
    exports: dict[str, str],
) -> None:
    sealed = exports["sealed"]
    cases: list[tuple[str, type[Exception]]] = [
        # truncated: the file ends inside an artifact's parts
        (_truncated(sealed), ImportRejected),
        # sealed bytes moved to another tenant (the header is bound to its own)
        (_forged(sealed, 0, lambda d, _l, _a: d.update(tenant_id="other")), DecryptionFailed),
        # another artifact's id, its parts renamed too (the header is bound to its id)
        (_forged(sealed, 0, _renamed), DecryptionFailed),
        # altered bytes whose digest is announced: only the authentication tells
        (_forged(sealed, 0, _retampered), DecryptionFailed),
        # altered bytes with the digest of the original
        (_forged(sealed, 0, lambda d, _l, _a: d.update(stored_sha256="0" * 64)), ImportRejected),
        # wrong types and out-of-range values
        (_forged(sealed, 0, lambda d, _l, _a: d.update(sealed="yes")), ImportRejected),
        (_forged(sealed, 0, lambda d, _l, _a: d.update(stored_bytes=-1)), ImportRejected),
        (_forged(sealed, 0, lambda d, _l, _a: d.update(stored_bytes=2**70)), ImportRejected),
        (_forged(sealed, 0, lambda d, _l, _a: d.update(decrypted=True)), ImportRejected),
        (_forged(sealed, 0, lambda d, _l, _a: d.update(sha256=["x"])), ImportRejected),
    ]
    before = _artifact_count(module_dsn, TENANT), _artifact_count(module_dsn, "other")
    sessions = raw(module_dsn, "SELECT count(*) FROM shardstore.sessions")
    for text, error in cases:
        with pytest.raises(error):
            enc_store.import_jsonl(io.StringIO(text), remap_ids=True, import_id="hostile")
    assert (_artifact_count(module_dsn, TENANT), _artifact_count(module_dsn, "other")) == before
    assert raw(module_dsn, "SELECT count(*) FROM shardstore.sessions") == sessions
    # the wrong key store: its data keys are not in it
    count = _artifact_count(target_dsn, TENANT)
    with pytest.raises(KeyShredded, match="key store does not hold"):
        target.import_jsonl(io.StringIO(sealed), remap_ids=True, import_id="wrong-keys")
    assert _artifact_count(target_dsn, TENANT) == count
    # on_error="skip": the refused artifact is listed and the session after it imported
    # (into the wrong key store's database, whose references then name nothing here)
    skipped = enc_store.import_jsonl(
        io.StringIO(cases[3][0]), remap_ids=True, import_id="skip", on_error="skip"
    )
    assert skipped.sessions == 1
    assert any("authenticate" in s.reason for s in skipped.skipped)


def test_async_sealed_export_and_remapped_import(
    module_dsn: str, keys: LocalKeyProvider, source: dict[str, Any]
) -> None:
    async def scenario() -> None:
        store = await shardstore.connect_async(module_dsn, encryption=keys)
        try:
            sid = await store.create_session("axp-async", "ada")
            ref = await store.put_artifact("axp-async", SMALL, content_type="text/plain")
            await store.checkpoint(sid, {"doc": ref.to_json()})
            out = io.StringIO()
            await store.export_sessions([sid], out=out)
            assert MARKER.decode() not in out.getvalue()
            report = await store.import_jsonl(io.StringIO(out.getvalue()), remap_ids=True)
            assert (report.sessions, report.artifacts) == (1, 1)
            new = IdMap(json.loads(out.getvalue().splitlines()[0])["export_id"]).session(sid)
            checkpoint = (await store.restore(new)).checkpoint
            assert checkpoint is not None
            moved = ArtifactRef.from_json(checkpoint.state["doc"])
            assert moved.artifact_id != ref.artifact_id
            assert await store.get_artifact("axp-async", moved.artifact_id) == SMALL
        finally:
            await store.close()

    asyncio.run(scenario())


def test_export_to_a_file_path(
    file_store: shardstore.Store, source: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "sealed.jsonl"
    done = file_store.export_sessions([source["sid"]], out=path)
    assert done.artifacts == 2 and done.artifact_bytes == len(BIG) + len(SMALL)
    assert MARKER not in path.read_bytes()
