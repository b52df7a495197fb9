"""The artifact store on a real PostgreSQL and real backends (postgres, a local directory):
stored once, streamed, verified, referenced, swept, released by purges; hostile input;
asyncio."""

from __future__ import annotations

import asyncio
import io
import os
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.artifacts.source import CHUNK
from shardstore.schema import rls
from tests.artifacts.support import (
    BACKENDS,
    backend_url,
    check_invariant,
    count_rows,
    stored_objects,
)
from tests.purge_support import table_rows

ZERO = timedelta(0)


@pytest.fixture(params=BACKENDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def astore(make_store: Any, kind: str, tmp_path: Path) -> shardstore.Store:
    return make_store(artifacts=backend_url(kind, tmp_path))  # type: ignore[no-any-return]


def test_same_content_three_puts_three_checkpoints_stored_once(
    astore: shardstore.Store, dsn: str
) -> None:
    data = os.urandom(CHUNK + 12345)
    refs = [
        astore.put_artifact("acme", data, content_type="application/octet-stream"),
        astore.put_artifact("acme", io.BytesIO(data), content_type="application/octet-stream"),
        astore.put_artifact("acme", bytearray(data), content_type="application/octet-stream"),
    ]
    assert len({r.artifact_id for r in refs}) == 1
    assert refs[0].sha256 == __import__("hashlib").sha256(data).hexdigest()
    assert refs[0].size_bytes == len(data)
    sid = astore.create_session("acme")
    cps = [astore.checkpoint(sid, {"step": i}, artifacts=[refs[i]]) for i in range(3)]
    assert len(stored_objects(astore, dsn)) == 1
    sha = refs[0].sha256
    key = f"acme/sha256/{sha[:2]}/{sha[2:4]}/{sha}"  # the issue's {tenant}/sha256/ab/cd/{hash}
    assert refs[0].uri.endswith("/" + key)
    if astore.artifact_config.backend is not None:
        assert stored_objects(astore, dsn) == [key]
    with psycopg.connect(dsn) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM shardstore.artifacts").fetchone()  # type: ignore[misc]
        (nrefs,) = conn.execute("SELECT count(*) FROM shardstore.artifact_refs").fetchone()  # type: ignore[misc]
    assert (rows, nrefs) == (1, 3)
    for cp in cps:
        restored = astore.restore(sid, cp.checkpoint_id)
        assert [a.artifact_id for a in restored.artifacts] == [refs[0].artifact_id]
    assert astore.get_artifact("acme", refs[0].artifact_id) == data
    check_invariant(astore, dsn)
    # the same bytes in another tenant are another artifact (ids and keys per tenant)
    other = astore.put_artifact("globex", data, content_type="application/octet-stream")
    assert other.artifact_id != refs[0].artifact_id and other.sha256 == refs[0].sha256
    assert len(stored_objects(astore, dsn)) == 2


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5])
def test_round_trip_sizes_and_streaming(astore: shardstore.Store, size: int) -> None:
    data = os.urandom(size)
    ref = astore.put_artifact("t", io.BufferedReader(io.BytesIO(data)), content_type="x/y")
    assert ref.size_bytes == size
    assert astore.get_artifact("t", ref.artifact_id) == data
    with astore.open_artifact("t", str(ref.artifact_id)) as stream:
        parts = []
        while piece := stream.read(777_777):
            parts.append(piece)
    assert b"".join(parts) == data


def test_str_is_utf8_and_file_objects_stream(astore: shardstore.Store) -> None:
    ref = astore.put_artifact("t", "héllo ✓", content_type="text/plain; charset=utf-8")
    assert astore.get_artifact("t", ref.artifact_id) == "héllo ✓".encode()

    class Trickle(io.RawIOBase):
        """Returns at most 1000 bytes per read (a socket-like stream)."""

        def __init__(self, total: int) -> None:
            self.left = total

        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            n = min(len(b), 1000, self.left)
            b[:n] = b"z" * n
            self.left -= n
            return n

    ref = astore.put_artifact("t", Trickle(2 * CHUNK + 3), content_type="x/y")
    assert astore.get_artifact("t", ref.artifact_id) == b"z" * (2 * CHUNK + 3)


def test_sweep_grace_refs_expiry_and_checkpoints(astore: shardstore.Store, dsn: str) -> None:
    put = lambda b: astore.put_artifact("t", b, content_type="x/y")  # noqa: E731
    kept, _loose, expired, required, dropped = (put(bytes([i]) * 1000) for i in range(5))
    sid = astore.create_session("t")
    astore.append_turn(sid, {"role": "user", "content": "hi"})
    astore.ref_artifact("t", kept.artifact_id, "turn", f"{sid}:0")
    past = datetime.now(UTC) - timedelta(seconds=1)
    astore.ref_artifact("t", expired.artifact_id, "business_output", "report-1", expires_at=past)
    cp_old = astore.checkpoint(sid, {"a": 1}, artifacts=[dropped])
    astore.checkpoint(sid, {"b": 2, "file": required.to_json()})
    astore.ref_artifact(
        "t", required.artifact_id, "checkpoint", str(cp_old.checkpoint_id), expires_at=past
    )
    # a long grace keeps everything; the never-referenced upload too
    assert astore.sweep_artifacts().deleted == 0
    assert astore.sweep_artifacts(grace=ZERO, dry_run=True).deleted == 2  # loose, expired
    assert len(stored_objects(astore, dsn)) == 5
    report = astore.sweep_artifacts(grace=ZERO)
    assert report.deleted == 2 and report.bytes_deleted == 2000
    gone = {a.ref.artifact_id for a in astore.list_artifacts("t")}
    assert gone == {kept.artifact_id, required.artifact_id, dropped.artifact_id}
    assert len(stored_objects(astore, dsn)) == 3
    # keep_checkpoints removes cp_old: `dropped` loses its only reference, `required` keeps
    # the newer checkpoint's (its expired ref on cp_old no longer counts either way)
    report = astore.maintain(keep_checkpoints=1, embed=False, artifact_grace=ZERO)
    assert report.artifacts_deleted == 1
    assert {a.ref.artifact_id for a in astore.list_artifacts("t")} == {
        kept.artifact_id,
        required.artifact_id,
    }
    restored = astore.restore(sid)
    assert [a.artifact_id for a in restored.artifacts] == [required.artifact_id]
    assert astore.get_artifact("t", required.artifact_id) == bytes([3]) * 1000
    # unref: swept after the grace only
    assert astore.unref_artifact("t", kept.artifact_id, "turn", f"{sid}:0") is True
    assert astore.unref_artifact("t", kept.artifact_id, "turn", f"{sid}:0") is False
    assert astore.sweep_artifacts(grace=timedelta(hours=1)).deleted == 0
    assert astore.sweep_artifacts(grace=ZERO).deleted == 1
    with pytest.raises(shardstore.ArtifactNotFound):
        astore.get_artifact("t", kept.artifact_id)
    with pytest.raises(shardstore.ArtifactNotFound):
        astore.ref_artifact("t", kept.artifact_id, "trajectory", "x")
    check_invariant(astore, dsn)


def test_put_after_sweep_stores_again(astore: shardstore.Store, dsn: str) -> None:
    ref = astore.put_artifact("t", b"again", content_type="x/y")
    astore.sweep_artifacts(grace=ZERO)
    assert stored_objects(astore, dsn) == []
    again = astore.put_artifact("t", b"again", content_type="x/y", owner=("trajectory", "t1"))
    assert again.artifact_id == ref.artifact_id
    assert astore.get_artifact("t", ref.artifact_id) == b"again"
    assert astore.sweep_artifacts(grace=ZERO).deleted == 0
    check_invariant(astore, dsn)


def test_checkpoint_with_missing_artifact_writes_nothing(
    astore: shardstore.Store, dsn: str
) -> None:
    sid = astore.create_session("t")
    ref = astore.put_artifact("t", b"x" * 10, content_type="x/y")
    astore.sweep_artifacts(grace=ZERO)
    with pytest.raises(shardstore.ArtifactNotFound):
        astore.checkpoint(sid, {"f": ref.to_json()})
    assert astore.checkpoints(sid) == []
    other = astore.put_artifact("other-tenant", b"y", content_type="x/y")
    with pytest.raises(shardstore.ArtifactNotFound):  # another tenant's artifact
        astore.checkpoint(sid, {}, artifacts=[other])
    assert astore.checkpoints(sid) == []


@pytest.mark.slow
def test_sweep_racing_new_references_never_deletes_a_referenced_object(
    astore: shardstore.Store, dsn: str
) -> None:
    """Writers put (often the same content again) and reference; a sweeper sweeps with no
    grace at all, back to back. Every acknowledged reference's artifact is readable, at every
    check and at the end."""
    stop = threading.Event()
    acked: list[tuple[uuid.UUID, bytes]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        try:
            for i in range(60):
                data = f"content {i % 7}".encode() * (50 + i % 3)
                ref = astore.put_artifact("t", data, content_type="x/y")
                try:
                    astore.ref_artifact("t", ref.artifact_id, "business_output", f"w{w}-{i}")
                except shardstore.ArtifactNotFound:
                    continue  # swept between put and ref: refused, never dangling
                with lock:
                    acked.append((ref.artifact_id, data))
        except BaseException as exc:
            errors.append(exc)

    def sweeper() -> None:
        try:
            while not stop.is_set():
                astore.sweep_artifacts(grace=ZERO)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,), name=f"w{w}") for w in range(3)]
    sweep = threading.Thread(target=sweeper, name="sweeper")
    sweep.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    sweep.join(60)
    assert not errors, errors
    assert acked
    astore.sweep_artifacts(grace=ZERO)
    for aid, data in acked:
        assert astore.get_artifact("t", aid) == data
    check_invariant(astore, dsn)


def test_purge_subject_removes_refs_and_bytes_at_once(
    make_store: Any, kind: str, tmp_path: Path, dsn: str
) -> None:
    store = make_store(artifacts=backend_url(kind, tmp_path))
    marker = uuid.uuid4().hex
    victim = store.create_session("t", subject_id="victim")
    bystander = store.create_session("t", subject_id="other")
    mine = store.put_artifact("t", f"secret {marker} " * 5000, content_type="text/plain")
    shared = store.put_artifact("t", b"shared bytes", content_type="x/y")
    keep = store.put_artifact("t", f"other {uuid.uuid4().hex}", content_type="text/plain")
    store.append_turn(victim, {"role": "user", "content": f"{marker} hi"})
    store.ref_artifact("t", mine.artifact_id, "turn", f"{victim}:0")
    store.checkpoint(victim, {"doc": mine.to_json(), "s": shared.to_json()})
    store.checkpoint(bystander, {"s": shared.to_json(), "k": keep.to_json()})
    # a span's payload for the victim's session goes with it; the bystander's stays
    traced = store.attach_payload(
        None,
        f"trace {marker}",
        name="p",
        content_type="text/plain",
        tenant_id="t",
        session_id=victim,
    )
    kept = store.attach_payload(
        None,
        "a bystander's trace",
        name="p",
        content_type="text/plain",
        tenant_id="t",
        session_id=bystander,
    )
    report = store.purge_subject("t", "victim")
    assert report.tables["shardstore.artifacts"].rows == 2
    assert report.tables["shardstore.artifacts"].bytes == mine.size_bytes + traced.size_bytes
    assert report.tables["shardstore.artifact_refs"].rows == 4
    assert store.get_artifact("t", kept.artifact_id) == b"a bystander's trace"
    rows = table_rows(dsn)
    hexed = marker.encode().hex()
    assert not [t for t, rs in rows.items() for r in rs if marker in r or hexed in r]
    for key in stored_objects(store, dsn):
        if kind != "postgres":
            with store.artifact_config.backend.open(key) as f:
                assert marker.encode() not in f.read()
    assert store.get_artifact("t", shared.artifact_id) == b"shared bytes"
    assert store.get_artifact("t", keep.artifact_id)
    dry = store.purge_session(bystander, dry_run=True)
    assert dry.tables["shardstore.artifacts"].rows == 0  # a dry run releases nothing
    check_invariant(store, dsn)


def test_purge_range_and_rewind_release_turn_refs(astore: shardstore.Store, dsn: str) -> None:
    sid = astore.create_session("t")
    refs = []
    for i in range(4):
        astore.append_turn(sid, {"role": "user", "content": f"turn {i}"})
        refs.append(astore.put_artifact("t", f"payload {i}", content_type="text/plain"))
        astore.ref_artifact("t", refs[i].artifact_id, "turn", f"{sid}:{i}")
    report = astore.purge_range(sid, before_turn_seq=2)
    assert report.tables["shardstore.artifacts"].rows == 2
    astore.rewind(sid, 3)
    assert astore.sweep_artifacts(grace=ZERO).deleted == 1
    assert [a.ref.artifact_id for a in astore.list_artifacts("t")] == [refs[2].artifact_id]
    check_invariant(astore, dsn)


BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("put_artifact", ("", b"x"), {"content_type": "x/y"}),
    ("put_artifact", ("t\x00", b"x"), {"content_type": "x/y"}),
    ("put_artifact", (None, b"x"), {"content_type": "x/y"}),
    ("put_artifact", ("t", b"x"), {"content_type": ""}),
    ("put_artifact", ("t", b"x"), {"content_type": "a" * 300}),
    ("put_artifact", ("t", 123), {"content_type": "x/y"}),
    ("put_artifact", ("t", [b"x"]), {"content_type": "x/y"}),
    ("put_artifact", ("t", "\ud800"), {"content_type": "x/y"}),
    ("put_artifact", ("t", io.StringIO("text")), {"content_type": "x/y"}),
    ("put_artifact", ("t", b"x"), {"content_type": "x/y", "required_for_resume": "yes"}),
    ("put_artifact", ("t", b"x"), {"content_type": "x/y", "owner": "turn"}),
    ("put_artifact", ("t", b"x"), {"content_type": "x/y", "owner": ("user", "1")}),
    ("put_artifact", ("t", b"x"), {"content_type": "x/y", "owner": ("turn", "nope")}),
    ("get_artifact", ("t", "not-a-uuid"), {}),
    ("get_artifact", ("t", 5), {}),
    ("ref_artifact", ("t", uuid.uuid4(), "session", "x"), {}),
    ("ref_artifact", ("t", uuid.uuid4(), "turn", f"{uuid.uuid4()}:-1"), {}),
    ("ref_artifact", ("t", uuid.uuid4(), "checkpoint", "zzz"), {}),
    ("ref_artifact", ("t", uuid.uuid4(), "trajectory", ""), {}),
    ("ref_artifact", ("t", uuid.uuid4(), "trajectory", "x" * 600), {}),
    ("ref_artifact", ("t", uuid.uuid4(), "trajectory", "x"), {"expires_at": datetime.now()}),
    ("ref_artifact", ("t", uuid.uuid4(), "trajectory", "x"), {"required_for_resume": 1}),
    ("unref_artifact", ("t", uuid.uuid4(), "nope", "x"), {}),
    ("list_artifacts", ("t",), {"state": "gone"}),
    ("list_artifacts", ("t",), {"limit": 0}),
    ("sweep_artifacts", (), {"grace": -1}),
    ("sweep_artifacts", (), {"grace": timedelta(seconds=-1)}),
    ("sweep_artifacts", (), {"dry_run": "no"}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "args", "kwargs"), BAD_CALLS)
def test_hostile_input_is_refused_and_writes_nothing(
    store: shardstore.Store, dsn: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    before = count_rows(dsn)
    with pytest.raises(shardstore.InvalidInput):
        getattr(store, name)(*args, **kwargs)
    assert count_rows(dsn) == before


def test_unknown_ids_and_owners(store: shardstore.Store, dsn: str) -> None:
    ref = store.put_artifact("t", b"abc", content_type="x/y")
    sid = store.create_session("t")
    before = count_rows(dsn)
    for owner in (
        ("turn", f"{sid}:0"),
        ("turn", f"{uuid.uuid4()}:0"),
        ("checkpoint", str(uuid.uuid4())),
    ):
        with pytest.raises(shardstore.ArtifactNotFound):
            store.ref_artifact("t", ref.artifact_id, *owner)
    with pytest.raises(shardstore.ArtifactNotFound):
        store.get_artifact("other", ref.artifact_id)  # another tenant
    with pytest.raises(shardstore.ArtifactNotFound):
        store.ref_artifact("t", uuid.uuid4(), "trajectory", "x")
    assert count_rows(dsn) == before
    with pytest.raises(shardstore.InvalidInput):
        store.checkpoint(sid, {}, artifacts=["not a ref"])  # type: ignore[list-item]
    with pytest.raises(shardstore.InvalidInput):
        store.checkpoint(sid, {"x": {"$shardstore.artifact": {"artifact_id": "zz"}}})
    assert store.checkpoints(sid) == []
    with pytest.raises(shardstore.ConfigurationError):
        shardstore.connect(dsn, artifacts="ftp://nowhere")
    with pytest.raises(shardstore.ConfigurationError):
        shardstore.connect(dsn, offload_over=10)


@pytest.mark.slow
def test_tenant_paths_cannot_escape(make_store: Any, tmp_path: Path, dsn: str) -> None:
    store = make_store(artifacts=(tmp_path / "objs").as_uri())
    for tenant in ("..", "../..", "a/b", ".hidden", "x" * 256, "é/../"):
        ref = store.put_artifact(tenant, b"data " + tenant.encode(), content_type="x/y")
        assert store.get_artifact(tenant, ref.artifact_id) == b"data " + tenant.encode()
    root = tmp_path / "objs"
    for key in stored_objects(store, dsn):
        path = (root / key).resolve()
        assert path.is_relative_to(root.resolve())
        assert len(key.split("/")) == 5, key


def test_rls_scopes_artifacts_by_tenant(store: shardstore.Store, dsn: str) -> None:
    ref = store.put_artifact("acme", b"acme bytes", content_type="x/y")
    store.put_artifact("globex", b"globex bytes", content_type="x/y")
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute("DROP ROLE IF EXISTS art_tenant")
        owner.execute("CREATE ROLE art_tenant LOGIN PASSWORD 'pw'")
        rls.grant_tenant_role(owner, "art_tenant")
        rls.enable_rls(owner)
    conninfo = psycopg.conninfo.make_conninfo(dsn, user="art_tenant", password="pw")
    try:
        with rls.tenant_connection(conninfo, "globex") as conn:
            tenant_store = rls.connect_tenant(conn)
            assert [a.tenant_id for a in tenant_store.list_artifacts("acme")] == []
            with pytest.raises(shardstore.ArtifactNotFound):
                tenant_store.get_artifact("acme", ref.artifact_id)
            # raw SQL on a tenant connection sees nothing until it binds the tenant itself,
            # for its own transaction (the connection carries no session setting)
            assert conn.execute("SELECT count(*) FROM shardstore.artifacts").fetchone() == (0,)
            with conn.transaction():
                conn.execute("SELECT set_config('shardstore.tenant_id', %s, true)", ("globex",))
                tenants = conn.execute("SELECT DISTINCT tenant_id FROM shardstore.artifacts")
                assert tenants.fetchall() == [("globex",)]
                chunks = conn.execute("SELECT count(*) FROM shardstore.artifact_chunks").fetchone()
                assert chunks == (1,)
            mine = tenant_store.put_artifact("globex", b"new", content_type="x/y")
            assert tenant_store.get_artifact("globex", mine.artifact_id) == b"new"
            with pytest.raises(shardstore.AccessDenied):
                tenant_store.put_artifact("acme", b"intrude", content_type="x/y")
            # a sweep of every tenant through the tenant store marks and deletes its own
            # loose artifacts only (0041: the functions name the bound tenant themselves)
            assert tenant_store.sweep_artifacts(grace=ZERO).deleted == 2
            assert tenant_store.list_artifacts("globex") == []
            tenant_store.close()
        assert store.get_artifact("acme", ref.artifact_id) == b"acme bytes"
        assert [a.tenant_id for a in store.list_artifacts("acme")] == ["acme"]
    finally:
        with psycopg.connect(dsn, autocommit=True) as owner:
            rls.disable_rls(owner)


def test_async_parity(dsn: str, kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn, artifacts=backend_url(kind, tmp_path))
        try:
            data = os.urandom(CHUNK + 7)
            ref = await store.put_artifact("t", io.BytesIO(data), content_type="x/y")
            again = await store.put_artifact("t", data, content_type="x/y")
            assert again.artifact_id == ref.artifact_id
            assert await store.get_artifact("t", ref.artifact_id) == data
            async with await store.open_artifact("t", ref.artifact_id) as stream:
                head = await stream.read(10)
                rest = await stream.read()
            assert head + rest == data
            sid = await store.create_session("t")
            cp = await store.checkpoint(sid, {"f": ref.to_json()})
            restored = await store.restore(sid)
            assert restored.artifacts[0].artifact_id == ref.artifact_id
            await store.ref_artifact("t", ref.artifact_id, "trajectory", "tr")
            assert await store.unref_artifact("t", ref.artifact_id, "trajectory", "tr")
            listed = await store.list_artifacts("t")
            assert listed[0].live_refs == 1 and cp.checkpoint_id
            swept = await store.sweep_artifacts(grace=ZERO)
            assert swept.deleted == 0
            await store.purge_session(sid)
            assert (await store.sweep_artifacts(grace=ZERO)).deleted == 0  # released by purge
            with pytest.raises(shardstore.ArtifactNotFound):
                await store.get_artifact("t", ref.artifact_id)
        finally:
            await store.close()

    asyncio.run(main())


def test_append_with_a_checkpoint_references_its_state_artifacts(
    astore: shardstore.Store, dsn: str
) -> None:
    """``append_turn(..., checkpoint=state)`` and ``append_turns`` reference the artifacts
    the state names, as ``checkpoint()`` does: the object outlives a sweep with no grace
    and the turn's removal, a retry adds no reference, a missing artifact writes nothing."""
    sid = astore.create_session("t")
    ref = astore.put_artifact("t", b"resume me", content_type="x/y", required_for_resume=True)
    other = astore.put_artifact("t", b"and me", content_type="x/y")
    result = astore.append_turn(
        sid, {"role": "user", "content": "hi"}, "k1", checkpoint={"f": ref.to_json()}
    )
    again = astore.append_turn(
        sid, {"role": "user", "content": "hi"}, "k1", checkpoint={"f": ref.to_json()}
    )
    assert again.duplicate and again.checkpoint_id == result.checkpoint_id
    batch = astore.append_turns(
        sid,
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        checkpoint={"files": [other.to_json(), ref.to_json()]},
    )
    with psycopg.connect(dsn) as conn:
        refs = conn.execute(
            "SELECT artifact_id, owner_id, required_for_resume FROM shardstore.artifact_refs"
            " WHERE owner_type = 'checkpoint' ORDER BY owner_id, artifact_id"
        ).fetchall()
    assert sorted(refs) == sorted(
        [
            (ref.artifact_id, str(result.checkpoint_id), True),
            (ref.artifact_id, str(batch[-1].checkpoint_id), True),
            (other.artifact_id, str(batch[-1].checkpoint_id), False),
        ]
    )
    assert astore.sweep_artifacts(grace=ZERO).deleted == 0
    first = astore.restore(sid, result.checkpoint_id)
    assert [a.artifact_id for a in first.artifacts] == [ref.artifact_id]
    assert astore.get_artifact("t", ref.artifact_id) == b"resume me"
    # a state naming an artifact the tenant does not have: no turn, no checkpoint
    gone = astore.put_artifact("t", b"swept", content_type="x/y")
    astore.sweep_artifacts(grace=ZERO)
    before = (len(astore.tail(sid)), len(astore.checkpoints(sid)))
    with pytest.raises(shardstore.ArtifactNotFound):
        astore.append_turn(sid, {"role": "user", "content": "x"}, checkpoint={"g": gone.to_json()})
    with pytest.raises(shardstore.ArtifactNotFound):
        astore.append_turns(
            sid, [{"role": "user", "content": "y"}], checkpoint={"g": gone.to_json()}
        )
    with pytest.raises(shardstore.InvalidInput):
        astore.append_turn(
            sid, {"role": "user", "content": "z"}, checkpoint={"g": {"$shardstore.artifact": 1}}
        )
    assert (len(astore.tail(sid)), len(astore.checkpoints(sid))) == before
    check_invariant(astore, dsn)


def test_offloaded_append_with_a_checkpoint_of_cards(make_store: Any, dsn: str) -> None:
    """An offloaded append whose checkpoint state holds an earlier turn's card: the new
    turn's artifact is referenced by its turn, the card's by the checkpoint; purging the
    turns keeps the artifact the checkpoint names."""
    store = make_store(offload_over=256)
    sid = store.create_session("t")
    store.append_turn(sid, {"role": "assistant", "content": None, "tool_calls": [{"id": "c0"}]})
    store.append_turn(sid, {"role": "tool", "tool_call_id": "c0", "content": "first " * 100})
    card = store.tail(sid)[-1].message["content"]
    r = store.append_turn(
        sid,
        {"role": "tool", "tool_call_id": "c1", "content": "second " * 100},
        checkpoint={"last": card},
    )
    restored = store.restore(sid, r.checkpoint_id)
    assert [a.artifact_id for a in restored.artifacts] == [
        uuid.UUID(card["$shardstore.artifact"]["artifact_id"])
    ]
    report = store.purge_range(sid, before_turn_seq=2)  # the card's turn; not the checkpoint
    assert report.tables["shardstore.artifacts"].rows == 0
    live = {str(a.ref.artifact_id): a.live_refs for a in store.list_artifacts("t")}
    assert live[card["$shardstore.artifact"]["artifact_id"]] == 1  # the checkpoint's
    assert store.get_artifact("t", restored.artifacts[0].artifact_id) == ("first " * 100).encode()
    (left,) = store.history(sid, expand=True)  # turn 2 (tail() hides an orphan tool result)
    assert left.message["content"] == "second " * 100
    check_invariant(store, dsn)


class _Generated(io.RawIOBase):
    """``total`` bytes made on the fly (never held whole), hashed as they are handed out."""

    def __init__(self, total: int) -> None:
        self.left = total
        self.sha = __import__("hashlib").sha256()
        self.block = os.urandom(1 << 16)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), len(self.block), self.left)
        b[:n] = self.block[:n]
        self.sha.update(self.block[:n])
        self.left -= n
        return n


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgres", "file"])
def test_a_100_mb_object_streams_in_and_out(make_store: Any, tmp_path: Path, backend: str) -> None:
    """100 MB put from a file object and read back through open_artifact: the bytes match
    and Python never holds more than a few chunks (tracemalloc peak under 24 MB)."""
    import hashlib
    import tracemalloc

    store = make_store(artifacts=backend_url(backend, tmp_path))
    total = 100 << 20
    src = _Generated(total)
    tracemalloc.start()
    try:
        ref = store.put_artifact("big", src, content_type="application/octet-stream")
        _, put_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        digest, size = hashlib.sha256(), 0
        with store.open_artifact("big", ref.artifact_id) as stream:
            while piece := stream.read(CHUNK):
                digest.update(piece)
                size += len(piece)
        _, get_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ref.size_bytes == size == total
    assert ref.sha256 == src.sha.hexdigest() == digest.hexdigest()
    assert put_peak < 24 << 20 and get_peak < 24 << 20, (put_peak, get_peak)
