"""Artifact bytes with encryption on, on every backend (postgres chunks, a directory, a real
S3-compatible server): sealed under the owning scope's key, bound to tenant and artifact id,
addressed by a keyed hash; replays between artifacts and tenants, plaintext where sealed
bytes belong, sealed bytes read without a key, hostile arguments, asyncio, offloading and
span payloads."""

from __future__ import annotations

import asyncio
import hashlib
import io
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.artifacts.config import config_of
from shardstore.artifacts.model import object_key
from shardstore.encryption import LocalKeyProvider
from shardstore.encryption.artifacts import CHUNK, HEADER_BYTES, MAGIC, ArtifactOpener
from shardstore.errors import (
    AccessDenied,
    ArtifactNotFound,
    DecryptionFailed,
    EncryptionRequired,
    InvalidInput,
    KeyShredded,
    PlaintextRefused,
    SessionNotFound,
)
from shardstore.schema import rls
from tests.artifacts.support import s3_url
from tests.encryption.conftest import raw
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

MARKER = b"wombat-marker-7373"
BACKENDS = ("postgres", "file", "s3")
# the other tests store MARKER in plaintext too (through the plain stores); never this one
SHRED_MARKER = b"numbat-marker-8484"


def _url(kind: str, root: Path) -> str:
    if kind == "postgres":
        return "postgres"
    if kind == "file":
        return (root / f"objects-{uuid.uuid4().hex[:6]}").as_uri()
    return s3_url()


@pytest.fixture(scope="module")
def stores(
    module_dsn: str, keys: LocalKeyProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[shardstore.Store, shardstore.Store]]]:
    """Per backend: (an encrypted store, a plain store) over one database and one backend."""
    root = tmp_path_factory.mktemp("artifact-backends")
    made: dict[str, tuple[shardstore.Store, shardstore.Store]] = {}
    try:
        for kind in BACKENDS:
            url = _url(kind, root)
            made[kind] = (
                shardstore.connect(module_dsn, encryption=keys, artifacts=url, offload_over=512),
                shardstore.connect(module_dsn, artifacts=url),
            )
        yield made
    finally:
        for enc, plain in made.values():
            enc.close()
            plain.close()


def stored_bytes(store: shardstore.Store, dsn: str, tenant: str, aid: uuid.UUID) -> bytes:
    """What the backend holds for an artifact, as stored."""
    ((sha, backend, upload),) = raw(
        dsn,
        "SELECT sha256, backend, upload_id FROM shardstore.artifacts"
        " WHERE tenant_id = %s AND artifact_id = %s",
        (tenant, aid),
    )
    if backend == "postgres":
        rows = raw(
            dsn,
            "SELECT data FROM shardstore.artifact_chunks WHERE upload_id = %s ORDER BY chunk_no",
            (upload,),
        )
        return b"".join(bytes(r[0]) for r in rows)
    be = config_of(store).backend
    assert be is not None
    with be.open(object_key(tenant, sha)) as handle:
        return bytes(handle.read())


def write_object(
    store: shardstore.Store, dsn: str, tenant: str, aid: uuid.UUID, data: bytes
) -> None:
    """Overwrite what the backend holds for an artifact (an attacker with the backend)."""
    ((sha, backend, upload),) = raw(
        dsn,
        "SELECT sha256, backend, upload_id FROM shardstore.artifacts"
        " WHERE tenant_id = %s AND artifact_id = %s",
        (tenant, aid),
    )
    if backend == "postgres":
        raw(dsn, "DELETE FROM shardstore.artifact_chunks WHERE upload_id = %s", (upload,))
        raw(
            dsn,
            "INSERT INTO shardstore.artifact_chunks (upload_id, chunk_no, tenant_id, data)"
            " VALUES (%s, 0, %s, %s)",
            (upload, tenant, data),
        )
        return
    be = config_of(store).backend
    assert be is not None
    staging = be.stage()
    staging.write(data)
    staging.seal()
    be.place(staging, object_key(tenant, sha))
    be.discard(staging)


@pytest.mark.parametrize("kind", BACKENDS)
def test_sealed_round_trip_streams_dedups_per_scope_and_holds_no_plaintext(
    stores: dict[str, tuple[shardstore.Store, shardstore.Store]], module_dsn: str, kind: str
) -> None:
    enc, _plain = stores[kind]
    tenant = f"rt-{kind}"
    eve = enc.create_session(tenant_id=tenant, subject_id="eve")
    bob = enc.create_session(tenant_id=tenant, subject_id="bob")
    enc.append_turn(eve, {"role": "user", "content": "hi"})
    enc.append_turn(bob, {"role": "user", "content": "hi"})
    two_frames = MARKER * ((CHUNK // len(MARKER)) + 3)  # just over one chunk
    for data in (b"", MARKER, two_frames):
        ref = enc.put_artifact(tenant, data, content_type="application/octet-stream")
        assert enc.get_artifact(tenant, ref.artifact_id) == data
        assert ref.size_bytes == len(data)
        assert ref.sha256 != hashlib.sha256(data).hexdigest()  # a keyed hash, not the sha256
        stored = stored_bytes(enc, module_dsn, tenant, ref.artifact_id)
        assert stored.startswith(MAGIC) and MARKER not in stored
    stream = enc.open_artifact(tenant, ref.artifact_id)
    assert stream.read(10) == two_frames[:10]
    assert stream.read() == two_frames[10:]
    # one scope, one copy; another subject's (and the tenant's) copies are unlinkable
    a = enc.put_artifact(tenant, MARKER, content_type="t", owner=("turn", f"{eve}:0"))
    b = enc.put_artifact(tenant, MARKER, content_type="t", owner=("turn", f"{eve}:0"))
    c = enc.put_artifact(tenant, MARKER, content_type="t", owner=("turn", f"{bob}:0"))
    d = enc.put_artifact(tenant, io.BytesIO(MARKER), content_type="t")
    assert a.artifact_id == b.artifact_id
    assert len({a.artifact_id, c.artifact_id, d.artifact_id}) == 3
    assert enc.get_artifact(tenant, c.artifact_id) == MARKER


@pytest.mark.parametrize("kind", BACKENDS)
def test_replayed_bytes_and_plaintext_are_refused(
    stores: dict[str, tuple[shardstore.Store, shardstore.Store]], module_dsn: str, kind: str
) -> None:
    enc, plain = stores[kind]
    t1, t2 = f"rp1-{kind}", f"rp2-{kind}"
    a = enc.put_artifact(t1, MARKER + b" a", content_type="t")
    b = enc.put_artifact(t1, MARKER + b" b", content_type="t")
    c = enc.put_artifact(t2, MARKER + b" c", content_type="t")
    # another artifact's bytes, of this tenant or another: refused before any byte
    write_object(
        enc, module_dsn, t1, b.artifact_id, stored_bytes(enc, module_dsn, t1, a.artifact_id)
    )
    with pytest.raises(DecryptionFailed):
        enc.get_artifact(t1, b.artifact_id)
    write_object(
        enc, module_dsn, t2, c.artifact_id, stored_bytes(enc, module_dsn, t1, a.artifact_id)
    )
    with pytest.raises(DecryptionFailed):
        enc.get_artifact(t2, c.artifact_id)
    # b's header over a's frames: the frames belong to another upload's content key
    a_bytes = stored_bytes(enc, module_dsn, t1, a.artifact_id)
    d = enc.put_artifact(t1, MARKER + b" d", content_type="t")
    d_bytes = stored_bytes(enc, module_dsn, t1, d.artifact_id)
    if kind != "postgres":  # postgres: write_object keeps one chunk; covered by the others
        write_object(
            enc, module_dsn, t1, d.artifact_id, d_bytes[:HEADER_BYTES] + a_bytes[HEADER_BYTES:]
        )
        with pytest.raises(DecryptionFailed):
            enc.get_artifact(t1, d.artifact_id)
        write_object(enc, module_dsn, t1, d.artifact_id, d_bytes[:HEADER_BYTES])  # truncated
        with pytest.raises(DecryptionFailed):
            enc.get_artifact(t1, d.artifact_id)
    # a plaintext artifact where sealed ones belong, and sealed bytes read without a key
    p = plain.put_artifact(t1, MARKER + b" plain", content_type="t")
    with pytest.raises(PlaintextRefused):
        enc.get_artifact(t1, p.artifact_id)
    e = plain.put_artifact(t1, b"", content_type="t")
    with pytest.raises(PlaintextRefused):
        enc.get_artifact(t1, e.artifact_id)
    with pytest.raises(EncryptionRequired):
        plain.get_artifact(t1, a.artifact_id)
    with pytest.raises(EncryptionRequired):  # a stream fails at its first read
        plain.open_artifact(t1, a.artifact_id).read(1)
    with pytest.raises(InvalidInput):
        plain.put_artifact(t1, MAGIC + b"looks sealed", content_type="t")
    # a malformed header: typed, never a traceback of the parser
    write_object(enc, module_dsn, t1, a.artifact_id, MAGIC + b"{not json" + b" " * 600)
    with pytest.raises(DecryptionFailed):
        enc.get_artifact(t1, a.artifact_id)


def test_hostile_arguments_are_typed_errors_and_store_nothing(
    stores: dict[str, tuple[shardstore.Store, shardstore.Store]], module_dsn: str
) -> None:
    enc, _plain = stores["postgres"]
    other = enc.create_session(tenant_id="hostile-other", subject_id="zed")
    enc.append_turn(other, {"role": "user", "content": "x"})

    def count() -> int:
        return int(raw(module_dsn, "SELECT count(*) FROM shardstore.artifact_chunks")[0][0])

    before = count()
    with pytest.raises(SessionNotFound):  # another tenant's session: its key is never used
        enc.put_artifact("hostile", MARKER, content_type="t", owner=("turn", f"{other}:0"))
    with pytest.raises(ArtifactNotFound):
        enc.put_artifact(
            "hostile", MARKER, content_type="t", owner=("checkpoint", str(uuid.uuid4()))
        )
    bad: list[dict[str, Any]] = [
        {"data": 12},
        {"data": MARKER, "owner": ("turn", "x" * 10_000)},
        {"data": MARKER, "owner": ("turn", f"{other}:{10**30}")},
        {"data": MARKER, "owner": [["nested"] * 3]},
        {"data": MARKER, "content_type": "x" * 100_000},
        {"data": "\ud800 lone surrogate"},
    ]
    for kwargs in bad:
        kwargs.setdefault("content_type", "t")
        with pytest.raises(InvalidInput):
            enc.put_artifact("hostile", **kwargs)
    for aid in ("not-a-uuid", 7, None):
        with pytest.raises(InvalidInput):
            enc.get_artifact("hostile", aid)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        enc.attach_payload(object(), MARKER, name="p" * 1000, content_type="t", tenant_id="h")
    assert count() == before


def test_async_parity(module_dsn: str, keys: LocalKeyProvider, tmp_path: Path, stores: Any) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(
            module_dsn, encryption=keys, artifacts=(tmp_path / "aobj").as_uri()
        )
        try:
            sid = await store.create_session(tenant_id="async", subject_id="eve")
            ref = await store.put_artifact("async", MARKER, content_type="t")
            assert await store.get_artifact("async", ref.artifact_id) == MARKER
            stream = await store.open_artifact("async", ref.artifact_id)
            assert await stream.read(1 << 20) == MARKER
            await store.append_turn(sid, {"role": "user", "content": "big " * 200})
            (turn,) = await store.tail(sid, expand=True)
            assert turn.message["content"] == "big " * 200
            sync_plain = stores["postgres"][1]
            with pytest.raises(PlaintextRefused):
                await store.get_artifact(
                    "async",
                    sync_plain.put_artifact("async", b"clear", content_type="t").artifact_id,
                )
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("kind", ("postgres", "file"))
def test_offloaded_strings_and_span_payloads_are_sealed_under_the_subject_and_shred(
    stores: dict[str, tuple[shardstore.Store, shardstore.Store]],
    module_dsn: str,
    keys: LocalKeyProvider,
    tmp_path: Path,
    kind: str,
) -> None:
    enc, _plain = stores[kind]
    tenant = f"off-{kind}"
    sid = enc.create_session(tenant_id=tenant, subject_id="eve")
    text = SHRED_MARKER.decode() + " " + "long words " * 80
    enc.append_turn(sid, {"role": "user", "content": text})
    (turn,) = enc.tail(sid, expand=True)
    assert turn.message["content"] == text
    (stored_turn,) = enc.tail(sid)
    card = stored_turn.message["content"]
    aid = uuid.UUID(card["$shardstore.artifact"]["artifact_id"])
    payload = enc.attach_payload(
        object(),
        SHRED_MARKER + b" payload",
        name="prompt",
        content_type="t",
        tenant_id=tenant,
        session_id=sid,
    )
    assert enc.get_artifact(tenant, payload.artifact_id) == SHRED_MARKER + b" payload"
    old = {a: stored_bytes(enc, module_dsn, tenant, a) for a in (aid, payload.artifact_id)}
    assert all(SHRED_MARKER not in b and b.startswith(MAGIC) for b in old.values())
    if kind == "file":  # a copy of the backend's directory, taken before the shred
        be = config_of(enc).backend
        copy = tmp_path / "copy"
        shutil.copytree(be.root, copy)  # type: ignore[union-attr]
        assert not any(SHRED_MARKER in p.read_bytes() for p in copy.rglob("*") if p.is_file())
    enc.purge_subject(tenant, "eve", shred=True)
    for a, stored in old.items():
        opener = ArtifactOpener(keys, tenant, a, "", 0)
        with pytest.raises(KeyShredded):
            opener.header(stored[:HEADER_BYTES])


def test_a_tenant_store_reads_only_its_own_sealed_artifacts(
    stores: dict[str, tuple[shardstore.Store, shardstore.Store]],
    module_dsn: str,
    keys: LocalKeyProvider,
) -> None:
    enc, _plain = stores["postgres"]
    theirs = enc.put_artifact("rls-globex", MARKER + b" globex", content_type="t")
    globex_sid = enc.create_session(tenant_id="rls-globex", subject_id="g")
    enc.append_turn(globex_sid, {"role": "user", "content": "x"})
    role = make_tenant_role(module_dsn)
    try:
        with as_tenant(module_dsn, role, "rls-acme") as conn:
            store = rls.connect_tenant(conn, encryption=keys)
            try:
                mine = store.put_artifact("rls-acme", MARKER + b" acme", content_type="t")
                assert store.get_artifact("rls-acme", mine.artifact_id) == MARKER + b" acme"
                for tenant in ("rls-acme", "rls-globex"):
                    with pytest.raises(ArtifactNotFound):
                        store.get_artifact(tenant, theirs.artifact_id)
                with pytest.raises(SessionNotFound):  # its key is never touched
                    store.put_artifact(
                        "rls-acme", MARKER, content_type="t", owner=("turn", f"{globex_sid}:0")
                    )
                with pytest.raises(AccessDenied):  # another tenant's rows: refused by RLS
                    store.put_artifact("rls-globex", MARKER, content_type="t")
                # globex's sealed bytes copied into acme's artifact: nothing opens
                write_object(
                    enc,
                    module_dsn,
                    "rls-acme",
                    mine.artifact_id,
                    stored_bytes(enc, module_dsn, "rls-globex", theirs.artifact_id),
                )
                with pytest.raises(DecryptionFailed):
                    store.get_artifact("rls-acme", mine.artifact_id)
            finally:
                store.close()
    finally:
        drop_tenant_role(module_dsn, role)
