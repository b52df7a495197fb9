"""Who marks an artifact released, now that no trigger does: every path that
deletes references marks the artifacts it left without a live reference itself — unref,
keep_checkpoints and rewind at once, a purge in its release step (what was released before
the purge keeps its grace), retention lazily through the sweep's mark phase — and a
reference's liveness is read from its own row. A hypothesis test checks the invariant
``marked <=> no live reference`` after any sequence of ref / unref / checkpoint / keep /
rewind calls against a simple in-memory model."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.core.executor import run_sync
from shardstore.schema.migrate import all_migrations, migrate_op
from tests.artifacts.support import check_invariant

ZERO = timedelta(0)
DAY = timedelta(days=1)


def _mark(dsn: str, tenant: str, aid: uuid.UUID) -> datetime | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT unreferenced_since FROM shardstore.artifacts"
            " WHERE tenant_id = %s AND artifact_id = %s",
            (tenant, aid),
        ).fetchone()
    assert row is not None, f"artifact {aid} is gone"
    return row[0]  # type: ignore[no-any-return]


def _clock(dsn: str) -> datetime:
    with psycopg.connect(dsn) as conn:
        (now,) = conn.execute("SELECT clock_timestamp()").fetchone()  # type: ignore[misc]
    return now  # type: ignore[no-any-return]


def _sql(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def _ids(store: shardstore.Store, tenant: str) -> set[uuid.UUID]:
    return {a.ref.artifact_id for a in store.list_artifacts(tenant)}


def _put(store: shardstore.Store, tenant: str, tag: str) -> shardstore.ArtifactRef:
    return store.put_artifact(tenant, f"{tag} {uuid.uuid4().hex}", content_type="text/plain")


def test_no_trigger_and_liveness_from_the_ref_row_alone(dsn: str) -> None:
    [(triggers,)] = _sql(
        dsn,
        "SELECT count(*) FROM pg_trigger"
        " WHERE tgrelid = 'shardstore.artifact_refs'::regclass AND NOT tgisinternal",
    )
    assert triggers == 0
    [(body,)] = _sql(
        dsn,
        "SELECT pg_get_functiondef('shardstore.artifact_ref_live_v2(text, boolean, timestamptz)'"
        "::regprocedure)",
    )
    assert "checkpoints" not in body.split("AS $function$", 1)[1]


def test_unref_marks_only_when_the_last_live_ref_goes(store: shardstore.Store, dsn: str) -> None:
    art = _put(store, "t", "a")
    store.ref_artifact("t", art.artifact_id, "trajectory", "x1")
    store.ref_artifact("t", art.artifact_id, "business_output", "b1")
    past = datetime.now(UTC) - timedelta(seconds=1)
    store.ref_artifact("t", art.artifact_id, "business_output", "old", expires_at=past)
    assert _mark(dsn, "t", art.artifact_id) is None
    assert store.unref_artifact("t", art.artifact_id, "trajectory", "x1")
    assert _mark(dsn, "t", art.artifact_id) is None  # b1 still holds it
    before = _clock(dsn)
    assert store.unref_artifact("t", art.artifact_id, "business_output", "b1")
    marked = _mark(dsn, "t", art.artifact_id)
    assert marked is not None and marked >= before  # the expired ref does not count
    # the grace runs from the unref
    assert store.sweep_artifacts(grace=timedelta(hours=1)).deleted == 0
    assert store.sweep_artifacts(grace=ZERO).deleted == 1
    check_invariant(store, dsn)


def test_keep_checkpoints_deletes_their_refs_and_marks(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("t")
    store.append_turn(sid, {"role": "user", "content": "hi"})
    only_old, shared, required = (_put(store, "t", tag) for tag in ("old", "shared", "req"))
    old = store.checkpoint(sid, {"a": 1}, artifacts=[only_old, shared])
    store.ref_artifact(
        "t", required.artifact_id, "checkpoint", str(old.checkpoint_id), required_for_resume=True
    )
    store.checkpoint(sid, {"b": 2}, artifacts=[shared])
    before = _clock(dsn)
    report = store.maintain(keep_checkpoints=1, embed=False)  # the default grace: a day
    assert report.checkpoints_removed == 1 and report.artifacts_deleted == 0
    assert (
        _sql(
            dsn,
            "SELECT 1 FROM shardstore.artifact_refs WHERE owner_id = %s",
            (str(old.checkpoint_id),),
        )
        == []
    )
    for gone in (only_old, required):  # a required ref goes with its checkpoint
        marked = _mark(dsn, "t", gone.artifact_id)
        assert marked is not None and marked >= before
    assert _mark(dsn, "t", shared.artifact_id) is None
    assert store.sweep_artifacts(grace=ZERO).deleted == 2
    assert _ids(store, "t") == {shared.artifact_id}
    assert [a.artifact_id for a in store.restore(sid).artifacts] == [shared.artifact_id]
    check_invariant(store, dsn)


def test_rewind_marks_what_it_released(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("t")
    kept, cut, shared, at_cp = (_put(store, "t", tag) for tag in ("kept", "cut", "both", "cp"))
    for i in range(4):
        store.append_turn(sid, {"role": "user", "content": f"turn {i}"})
    store.ref_artifact("t", kept.artifact_id, "turn", f"{sid}:0")
    store.ref_artifact("t", shared.artifact_id, "turn", f"{sid}:1")
    store.ref_artifact("t", shared.artifact_id, "turn", f"{sid}:3")
    store.ref_artifact("t", cut.artifact_id, "turn", f"{sid}:2")
    cp = store.checkpoint(sid, {"s": 1}, artifacts=[at_cp])
    assert cp.turn_seq >= 2
    before = _clock(dsn)
    assert store.rewind(sid, 2) == 2
    for gone in (cut, at_cp):
        marked = _mark(dsn, "t", gone.artifact_id)
        assert marked is not None and marked >= before
    assert _mark(dsn, "t", kept.artifact_id) is None
    assert _mark(dsn, "t", shared.artifact_id) is None  # turn 1 still holds it
    assert (
        _sql(
            dsn,
            "SELECT 1 FROM shardstore.artifact_refs WHERE owner_id = %s",
            (str(cp.checkpoint_id),),
        )
        == []
    )
    assert store.sweep_artifacts(grace=timedelta(hours=1)).deleted == 0
    assert store.sweep_artifacts(grace=ZERO).deleted == 2
    assert _ids(store, "t") == {kept.artifact_id, shared.artifact_id}
    check_invariant(store, dsn)


def test_purge_releases_at_once_but_earlier_releases_keep_their_grace(
    store: shardstore.Store, dsn: str
) -> None:
    victim = store.create_session("t", subject_id="victim")
    for i in range(2):
        store.append_turn(victim, {"role": "user", "content": f"turn {i}"})
    mine, stale, earlier, expired = (_put(store, "t", tag) for tag in ("m", "s", "e", "x"))
    store.ref_artifact("t", mine.artifact_id, "turn", f"{victim}:0")
    store.ref_artifact("t", stale.artifact_id, "turn", f"{victim}:1")
    # a mark left on a referenced artifact (a sweep's mark racing its reference) is no
    # reason for the purge to keep it
    _sql(
        dsn,
        "UPDATE shardstore.artifacts SET unreferenced_since = '2000-01-01'"
        " WHERE tenant_id = 't' AND artifact_id = %s",
        (stale.artifact_id,),
    )
    store.ref_artifact("t", earlier.artifact_id, "trajectory", "run-1")
    store.unref_artifact("t", earlier.artifact_id, "trajectory", "run-1")
    past = datetime.now(UTC) - timedelta(seconds=1)
    store.ref_artifact("t", expired.artifact_id, "trajectory", "run-2", expires_at=past)
    # another tenant's artifact whose ref went without a mark: not this purge's to look at
    theirs = _put(store, "u", "theirs")
    store.ref_artifact("u", theirs.artifact_id, "trajectory", "run-3")
    _sql(dsn, "DELETE FROM shardstore.artifact_refs WHERE tenant_id = 'u'")

    report = store.purge_subject("t", "victim")
    assert report.tables["shardstore.artifacts"].rows == 2
    assert report.tables["shardstore.artifacts"].bytes == mine.size_bytes + stale.size_bytes
    assert _ids(store, "t") == {earlier.artifact_id, expired.artifact_id}
    assert _mark(dsn, "u", theirs.artifact_id) is None
    # both released before the purge: deleted after their grace, not by it
    assert store.sweep_artifacts(grace=timedelta(hours=1)).deleted == 0
    assert store.sweep_artifacts(grace=ZERO).deleted == 3
    check_invariant(store, dsn)


def test_purge_session_and_range_release_in_the_session_tenant(
    store: shardstore.Store, dsn: str
) -> None:
    """A session purge marks the artifacts the session referenced (not the whole tenant's):
    another tenant's unmarked artifact and an earlier release are left as they were."""
    sid = store.create_session("t")
    for i in range(3):
        store.append_turn(sid, {"role": "user", "content": f"turn {i}"})
    first, last = _put(store, "t", "first"), _put(store, "t", "last")
    store.ref_artifact("t", first.artifact_id, "turn", f"{sid}:0")
    store.ref_artifact("t", last.artifact_id, "turn", f"{sid}:2")
    theirs = _put(store, "u", "theirs")
    store.ref_artifact("u", theirs.artifact_id, "trajectory", "run")
    _sql(dsn, "DELETE FROM shardstore.artifact_refs WHERE tenant_id = 'u'")
    earlier = _put(store, "t", "earlier")  # released before the purges: keeps its grace
    store.ref_artifact("t", earlier.artifact_id, "trajectory", "run")
    store.unref_artifact("t", earlier.artifact_id, "trajectory", "run")
    assert store.purge_range(sid, before_turn_seq=1).tables["shardstore.artifacts"].rows == 1
    assert _ids(store, "t") == {last.artifact_id, earlier.artifact_id}
    _sql(  # a stale mark on a referenced artifact does not keep it from the purge
        dsn,
        "UPDATE shardstore.artifacts SET unreferenced_since = '2000-01-01'"
        " WHERE tenant_id = 't' AND artifact_id = %s",
        (last.artifact_id,),
    )
    assert store.purge_session(sid).tables["shardstore.artifacts"].rows == 1
    assert _ids(store, "t") == {earlier.artifact_id}
    assert store.purge_session(sid).tables["shardstore.artifacts"].rows == 0  # idempotent
    assert _mark(dsn, "u", theirs.artifact_id) is None  # tenant u untouched by either
    with pytest.raises(shardstore.SessionNotFound):
        store.purge_session(uuid.uuid4())
    check_invariant(store, dsn)


@pytest.mark.slow
def test_retention_is_marked_by_the_sweep(make_store: Any, dsn: str) -> None:
    """maintain's retention removes refs with their sessions and marks nothing itself: the
    sweep of the same run marks the artifact, whose grace starts there."""
    store = make_store(partition_interval=timedelta(seconds=1), premake=2)
    old = store.create_session("t")
    store.append_turn(old, {"role": "user", "content": "old"})
    art = _put(store, "t", "old")
    store.ref_artifact("t", art.artifact_id, "turn", f"{old}:0")
    time.sleep(2.2)
    before = _clock(dsn)
    report = store.maintain(retention=timedelta(seconds=1), embed=False)
    assert report.sessions_expired == 1 and report.artifacts_deleted == 0
    marked = _mark(dsn, "t", art.artifact_id)
    assert marked is not None and marked >= before
    assert store.sweep_artifacts(grace=ZERO).deleted == 1
    check_invariant(store, dsn)


@pytest.mark.slow
def test_migration_deletes_refs_of_checkpoints_already_gone(
    server_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before it, keep_checkpoints left the refs of the checkpoints it deleted (dead by the
    checkpoint's absence): the migration deletes them and marks their artifacts."""
    from shardstore.schema import migrate

    full = all_migrations()
    [mine] = [i for i, m in enumerate(full) if "artifact_refs_untriggered" in m.name]
    name = f"shardstore_art_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    target = make_conninfo(server_dsn, dbname=name)
    try:
        with psycopg.connect(target, autocommit=True) as conn:
            monkeypatch.setattr(migrate, "all_migrations", lambda: full[:mine])
            run_sync(conn, migrate_op())
            monkeypatch.undo()
            orphan, kept = uuid.uuid4(), uuid.uuid4()
            for aid in (orphan, kept):
                conn.execute(
                    "INSERT INTO shardstore.artifacts (tenant_id, artifact_id, sha256,"
                    " size_bytes, content_type, backend, object_key, state, created_at,"
                    " ever_referenced) VALUES ('t', %s, repeat('a', 64), 1, 'x/y', 'file',"
                    " 'k', 'ready', now(), true)",
                    (aid,),
                )
            conn.execute(
                "INSERT INTO shardstore.artifact_refs (tenant_id, artifact_id, owner_type,"
                " owner_id, session_id, turn_seq, created_at) VALUES"
                " ('t', %s, 'checkpoint', %s, %s, 0, now()),"
                " ('t', %s, 'trajectory', 'run', NULL, NULL, now())",
                (orphan, str(uuid.uuid4()), uuid.uuid4(), kept),
            )
            before = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            assert full[mine].version in run_sync(conn, migrate_op())
            refs = conn.execute("SELECT artifact_id FROM shardstore.artifact_refs").fetchall()
            assert refs == [(kept,)]
            marks = dict(
                conn.execute(
                    "SELECT artifact_id, unreferenced_since FROM shardstore.artifacts"
                ).fetchall()
            )
            assert marks[kept] is None and marks[orphan] >= before
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ------------------------------------------------------------ the invariant, by hypothesis

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("ref"),
            st.integers(0, 2),
            st.sampled_from(["turn", "trajectory"]),
            st.integers(0, 3),
        ),
        st.tuples(
            st.just("unref"),
            st.integers(0, 2),
            st.sampled_from(["turn", "trajectory"]),
            st.integers(0, 3),
        ),
        st.tuples(st.just("checkpoint"), st.frozensets(st.integers(0, 2), max_size=3)),
        st.tuples(st.just("keep"), st.integers(0, 2)),
        st.tuples(st.just("rewind"), st.integers(0, 4)),
    ),
    max_size=12,
)


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_marked_exactly_when_no_live_ref_is_left(
    store: shardstore.Store, dsn: str, ops: Any
) -> None:
    """Model: the live owners of each artifact (turn refs below the session's head,
    trajectory refs, the refs of checkpoints not removed). After every step an artifact is
    marked (unreferenced_since set) exactly when the model has no owner for it."""
    tenant = f"h{uuid.uuid4().hex[:8]}"
    sid = store.create_session(tenant)
    turns = 0
    arts = [_put(store, tenant, f"art{i}") for i in range(3)]
    owners: dict[int, set[tuple[str, str]]] = {i: set() for i in range(3)}
    checkpoints: list[tuple[str, int, frozenset[int]]] = []  # (id, turn_seq, artifacts)

    def append_to(n: int) -> None:
        nonlocal turns
        while turns <= n:
            store.append_turn(sid, {"role": "user", "content": f"turn {turns}"})
            turns += 1

    for op in ops:
        kind = op[0]
        if kind in ("ref", "unref"):
            _, i, owner_type, n = op
            if owner_type == "turn":
                if kind == "ref":
                    append_to(n)
                owner = f"{sid}:{n}"
            else:
                owner = f"run-{n}"
            if kind == "ref" and (owner_type != "turn" or n < turns):
                store.ref_artifact(tenant, arts[i].artifact_id, owner_type, owner)
                owners[i].add((owner_type, owner))
            elif kind == "unref":
                existed = store.unref_artifact(tenant, arts[i].artifact_id, owner_type, owner)
                assert existed == ((owner_type, owner) in owners[i])
                owners[i].discard((owner_type, owner))
        elif kind == "checkpoint":
            which = op[1]
            cp = store.checkpoint(
                sid, {"n": len(checkpoints)}, artifacts=[arts[i] for i in sorted(which)]
            )
            checkpoints.append((str(cp.checkpoint_id), cp.turn_seq, which))
            for i in which:
                owners[i].add(("checkpoint", str(cp.checkpoint_id)))
        elif kind == "keep":
            store.maintain(keep_checkpoints=op[1], embed=False)
            drop = checkpoints[: max(len(checkpoints) - op[1], 0)] if op[1] else checkpoints
            checkpoints = [c for c in checkpoints if c not in drop]
            for cid, _, which in drop:
                for i in which:
                    owners[i].discard(("checkpoint", cid))
        else:
            to = min(op[1], turns)
            store.rewind(sid, to)
            turns = to
            for i in owners:
                owners[i] = {
                    (t, o)
                    for t, o in owners[i]
                    if not (t == "turn" and int(o.rsplit(":", 1)[1]) >= to)
                }
            gone = [c for c in checkpoints if c[1] >= to]
            checkpoints = [c for c in checkpoints if c[1] < to]
            for cid, _, which in gone:
                for i in which:
                    owners[i].discard(("checkpoint", cid))
        for i, art in enumerate(arts):
            marked = _mark(dsn, tenant, art.artifact_id) is not None
            assert marked == (not owners[i]), (op, i, owners[i])
