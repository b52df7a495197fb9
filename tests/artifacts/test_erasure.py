"""Artifacts across tenants and artifacts after a purge, on every backend (postgres, a
local directory, a real S3 server):

* a tenant role with raw SQL writes rows naming another tenant's object (its location is
  guessable from a known document's sha256): reading them never returns the other tenant's
  bytes, and no sweep deletes, or keeps alive, the other tenant's object;
* a purge of a session, a subject or a tenant erases, before it returns, every artifact its
  sessions (or the tenant) ever referenced that no live reference of another session still
  needs, however the references went away before the purge (rewind, unref, checkpoint
  pruning), and counts them in its report."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.artifacts.model import artifact_id_for, object_key
from shardstore.schema import rls
from tests.artifacts.support import (
    BACKENDS,
    backend_url,
    check_invariant,
    holds_bytes,
    stored_objects,
)

ZERO = timedelta(0)
ARTIFACTS = "shardstore.artifacts"


@pytest.fixture(params=BACKENDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---------------------------------------------------------------- point 1: across tenants


def test_a_tenant_cannot_name_read_keep_or_delete_another_tenants_object(
    make_store: Any, kind: str, tmp_path: Path, dsn: str, tenant_role: str
) -> None:
    store = make_store(artifacts=backend_url(kind, tmp_path))
    secret = b"tenant B's contract " + uuid.uuid4().bytes * 64
    ref_b = store.put_artifact("tB", secret, content_type="application/pdf")
    store.ref_artifact("tB", ref_b.artifact_id, "business_output", "contract-1")
    sha = ref_b.sha256
    with psycopg.connect(dsn, autocommit=True) as admin:
        rls.grant_tenant_role(admin, tenant_role, tenant="tA")  # bound: raw SQL stays in tA
        (upload_b,) = admin.execute(  # type: ignore[misc]
            "SELECT upload_id FROM shardstore.artifacts WHERE tenant_id = 'tB'"
        ).fetchone()
    victim_key = object_key("tB", sha)  # tB/sha256/ab/cd/<sha>: guessable from the sha256
    canonical = artifact_id_for("tA", sha)  # the id tA's library would give that content
    forged = uuid.uuid4()
    deleting = uuid.uuid4()
    attacker = psycopg.connect(dsn, autocommit=True)
    attacker.execute(f'SET ROLE "{tenant_role}"')  # bound to tA: no setting can change that
    attacker.execute("SELECT set_config('shardstore.tenant_id', 'tA', false)")
    try:
        insert = (
            "INSERT INTO shardstore.artifacts (tenant_id, artifact_id, sha256, size_bytes,"
            " content_type, backend, object_key, state, upload_id, created_at,"
            " unreferenced_since) VALUES ('tA', %s, %s, %s, 'application/pdf', %s, %s, %s,"
            " %s, now() - interval '3 days', now() - interval '2 days')"
        )
        # (postgres rows are never 'deleting': their bytes go with the row)
        last = "ready" if kind == "postgres" else "deleting"
        for aid, state in ((canonical, "ready"), (forged, "ready"), (deleting, last)):
            attacker.execute(insert, (aid, sha, len(secret), kind, victim_key, state, upload_b))
        # the attacker's rows can name B's object, but reading them never returns B's bytes
        for aid in (canonical, forged):
            with pytest.raises((shardstore.ArtifactNotFound, shardstore.ArtifactCorrupt)):
                store.get_artifact("tA", aid)
        for info in store.list_artifacts("tA"):
            assert victim_key not in info.ref.uri
        # a row of tA referenced by tA does not keep B's object alive, and the owner's
        # routine sweeps (twice: marks, then deletes) never delete B's object while B
        # references it
        store.ref_artifact("tA", canonical, "business_output", "keep-it")
        for _ in range(2):
            store.sweep_artifacts(grace=ZERO)
        assert store.get_artifact("tB", ref_b.artifact_id) == secret
        assert holds_bytes(store, dsn, "tB", sha)
        if kind != "postgres":
            assert victim_key in stored_objects(store, dsn)
        # once B lets go, B's object goes, whatever tA's rows say
        assert store.unref_artifact("tB", ref_b.artifact_id, "business_output", "contract-1")
        store.sweep_artifacts(grace=ZERO)
        with pytest.raises(shardstore.ArtifactNotFound):
            store.get_artifact("tB", ref_b.artifact_id)
        assert not holds_bytes(store, dsn, "tB", sha)
        with pytest.raises((shardstore.ArtifactNotFound, shardstore.ArtifactCorrupt)):
            store.get_artifact("tA", canonical)
    finally:
        attacker.close()


# ---------------------------------------------------------------- point 2: purges erase


def _released_four_ways(
    store: shardstore.Store, tenant: str, sid: uuid.UUID, tag: str
) -> list[Any]:
    """Four artifacts of ``sid``: three whose last reference goes away before any purge (a
    turn's, by a rewind; a turn's, by unref; a checkpoint's, pruned by the caller's
    ``maintain(keep_checkpoints=1)``) and one a checkpoint still references; and a span
    payload of the session. Returns the four refs."""
    put = lambda what: store.put_artifact(  # noqa: E731
        tenant, f"{tag} {what} " + uuid.uuid4().hex * 200, content_type="text/plain"
    )
    rewound, unrefd, pruned, held = put("rewound"), put("unrefd"), put("pruned"), put("held")
    store.append_turn(sid, {"role": "user", "content": "keep"})
    store.append_turn(sid, {"role": "user", "content": "rewound"})
    store.ref_artifact(tenant, rewound.artifact_id, "turn", f"{sid}:1")
    store.rewind(sid, 1)
    store.attach_payload(
        None, f"{tag} trace", name="p", content_type="text/plain", tenant_id=tenant, session_id=sid
    )
    store.checkpoint(sid, {"doc": pruned.to_json()})
    store.checkpoint(sid, {"doc": held.to_json()})
    store.ref_artifact(tenant, unrefd.artifact_id, "turn", f"{sid}:0")
    store.unref_artifact(tenant, unrefd.artifact_id, "turn", f"{sid}:0")
    return [rewound, unrefd, pruned, held]


@pytest.mark.slow
def test_purges_erase_what_lost_its_references_before_the_purge(
    make_store: Any, kind: str, tmp_path: Path, dsn: str
) -> None:
    store = make_store(artifacts=backend_url(kind, tmp_path))
    victim = store.create_session("t", subject_id="victim")
    other = store.create_session("t", subject_id="other")
    refs = _released_four_ways(store, "t", victim, "victim")
    store.maintain(keep_checkpoints=1)  # the first checkpoint (and its ref) goes
    # an artifact the victim let go of that another subject's session still needs stays
    shared = store.put_artifact("t", b"shared " + uuid.uuid4().bytes, content_type="x/y")
    store.ref_artifact("t", shared.artifact_id, "turn", f"{victim}:0")
    store.checkpoint(other, {"s": shared.to_json()})
    store.unref_artifact("t", shared.artifact_id, "turn", f"{victim}:0")
    listed = {a.ref.artifact_id: a.live_refs for a in store.list_artifacts("t")}
    assert [listed[r.artifact_id] for r in refs] == [0, 0, 0, 1]  # as the issue found them

    report = store.purge_subject("t", "victim")
    erased = report.tables[ARTIFACTS]
    assert erased.rows == 5  # the four and the span payload
    assert erased.bytes >= sum(r.size_bytes for r in refs)
    for ref in refs:
        with pytest.raises(shardstore.ArtifactNotFound):
            store.get_artifact("t", ref.artifact_id)
        assert not holds_bytes(store, dsn, "t", ref.sha256)
    assert store.get_artifact("t", shared.artifact_id).startswith(b"shared ")
    assert [a.ref.artifact_id for a in store.list_artifacts("t")] == [shared.artifact_id]
    check_invariant(store, dsn)


def test_session_and_tenant_purges_erase_released_artifacts(
    make_store: Any, kind: str, tmp_path: Path, dsn: str
) -> None:
    store = make_store(artifacts=backend_url(kind, tmp_path))
    one = store.create_session("t1")
    refs = _released_four_ways(store, "t1", one, "one")
    store.maintain(keep_checkpoints=1)
    report = store.purge_session(one)
    assert report.tables[ARTIFACTS].rows == 5
    for ref in refs:
        assert not holds_bytes(store, dsn, "t1", ref.sha256)
    assert store.list_artifacts("t1") == []

    two = store.create_session("t2")
    refs = _released_four_ways(store, "t2", two, "two")
    store.maintain(keep_checkpoints=1)
    loose = store.put_artifact("t2", b"never referenced", content_type="x/y")
    kept = store.put_artifact("t2", b"a business output", content_type="x/y")
    store.ref_artifact("t2", kept.artifact_id, "business_output", "invoice-1")
    bystander = store.put_artifact("t3", b"a business output", content_type="x/y")
    report = store.purge_tenant("t2")
    assert report.tables[ARTIFACTS].rows == 7
    for ref in [*refs, loose, kept]:
        assert not holds_bytes(store, dsn, "t2", ref.sha256)
    assert store.list_artifacts("t2") == []
    assert store.get_artifact("t3", bystander.artifact_id) == b"a business output"
    check_invariant(store, dsn)


def test_async_purge_erases_released_artifacts(dsn: str, kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn, artifacts=backend_url(kind, tmp_path))
        try:
            sid = await store.create_session("t", subject_id="s")
            await store.append_turn(sid, {"role": "user", "content": "a"})
            await store.append_turn(sid, {"role": "user", "content": "b"})
            ref = await store.put_artifact("t", b"async " + uuid.uuid4().bytes, content_type="x/y")
            await store.ref_artifact("t", ref.artifact_id, "turn", f"{sid}:1")
            await store.rewind(sid, 1)
            report = await store.purge_subject("t", "s")
            assert report.tables[ARTIFACTS].rows == 1
            with pytest.raises(shardstore.ArtifactNotFound):
                await store.get_artifact("t", ref.artifact_id)
            assert await store.list_artifacts("t") == []
        finally:
            await store.close()

    asyncio.run(main())
