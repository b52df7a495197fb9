"""The session API on a Citus cluster (docs/scale-out.md): core, purge, search and RLS.

Skipped unless ``SHARDSTORE_CITUS_DSN`` names a database on a Citus coordinator with the
``citus`` (and ``vector``) extensions and at least one worker, whose user may create
roles. The schema is migrated there and distributed with ``store.distribute()``; the
tests then use fresh sessions (and tenants) of their own, so the database may be reused.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.errors import ConfigurationError, SessionNotFound, SessionPurged
from shardstore.schema import rls
from tests.embedders import HashEmbedder

CITUS_DSN = os.environ.get("SHARDSTORE_CITUS_DSN")
pytestmark = pytest.mark.skipif(not CITUS_DSN, reason="SHARDSTORE_CITUS_DSN is not set")

SMALL = {"chunk_tokens": 300}
WORDS = ["harbour", "violin", "laptop", "garden", "train", "bread"]


def _msg(i: int, word: str = "") -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": f"{word or WORDS[i % 6]} turn {i} " + "w " * 30}


def _tenant() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


def _one(dsn: str, sql: str, params: Any = None) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
        assert row is not None
        return row[0]


@pytest.fixture(scope="module")
def citus() -> Iterator[str]:
    assert CITUS_DSN
    store = shardstore.connect(CITUS_DSN)
    try:
        report = store.distribute()
        assert report.citus_version is not None
        assert report.workers >= 1
        again = store.distribute()
        assert not again.changed, again  # idempotent
    finally:
        store.close()
    yield CITUS_DSN


@pytest.fixture
def store(citus: str) -> Iterator[shardstore.Store]:
    s = shardstore.connect(citus, embedding_model=HashEmbedder(), **SMALL)
    yield s
    s.close()


def test_every_session_table_is_distributed_and_colocated(citus: str) -> None:
    with psycopg.connect(citus, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name::text, session_nullable FROM shardstore.table_registry"
            " WHERE kind = 'session' AND table_name NOT IN"
            " (SELECT r_table FROM shardstore.citus_kept_local_v1())"
        ).fetchall()
        kept = conn.execute("SELECT r_table::text FROM shardstore.citus_kept_local_v1()").fetchall()
        assert kept == []  # since 0034 the artifact tables are distributed too
        for (table,) in kept:  # left on the coordinator: Citus holds no shard of it
            assert (
                conn.execute(
                    "SELECT 1 FROM pg_dist_partition WHERE logicalrelid = %s::regclass", (table,)
                ).fetchone()
                is None
            )
        sessions_group = conn.execute(
            "SELECT colocationid FROM pg_dist_partition"
            " WHERE logicalrelid = 'shardstore.sessions'::regclass"
        ).fetchone()
        assert sessions_group is not None
        for table, by_tenant in tables:
            row = conn.execute(
                "SELECT partmethod, column_to_column_name(logicalrelid, partkey), colocationid"
                " FROM pg_dist_partition WHERE logicalrelid = %s::regclass",
                (table,),
            ).fetchone()
            assert row is not None, f"{table} is not distributed"
            assert row[0] == "h"
            if by_tenant:
                assert row[1] == "tenant_id"
            else:
                assert (row[1], row[2]) == ("session_id", sessions_group[0]), table
        for table in ("shardstore.config", "shardstore.rls_role_tenants"):
            (method,) = conn.execute(
                "SELECT partmethod FROM pg_dist_partition WHERE logicalrelid = %s::regclass",
                (table,),
            ).fetchone() or (None,)
            assert method == "n", table


def test_core_api_and_one_worker_per_session(store: shardstore.Store, citus: str) -> None:
    tenant = _tenant()
    sid = store.create_session(tenant, "subject", "agent")
    for i in range(40):
        result = store.append_turn(sid, _msg(i), idempotency_key=f"k{i}")
        assert result.turn_seq == i
    again = store.append_turn(sid, _msg(3), idempotency_key="k3")
    assert again.duplicate and again.turn_seq == 3
    batch = store.append_turns(sid, [_msg(40), _msg(41)])
    assert [r.turn_seq for r in batch] == [40, 41]
    store.drain_folds()
    store.flush(sid)
    tail = store.tail(sid, n=5)
    assert [t.turn_seq for t in tail] == [37, 38, 39, 40, 41]
    history = list(store.history(sid))
    assert [t.turn_seq for t in history] == list(range(42))
    assert history[7].message == _msg(7)
    chunks = store.chunks(sid)
    assert len(chunks) > 1 and sum(c.turn_count for c in chunks) == 42
    assert all(c.partition and c.partition.startswith("agent_history_p") for c in chunks)
    stats = store.stats()
    assert stats.chunks >= len(chunks)
    holding = {c.partition for c in chunks}
    sizes = {p.name: p for p in stats.partitions}
    assert all(sizes[name].rows > 0 and sizes[name].bytes > 0 for name in holding)
    # rewind, checkpoints, runs and facts ride on the same session
    assert store.rewind(sid, 40) == 2
    cp = store.checkpoint(sid, {"step": 1})
    assert store.restore(sid).checkpoint == cp
    run = store.open_run(sid, framework="test", thread_key="t1")
    assert store.get_run(run.run_id).status == "running"
    store.remember(tenant, "subject", "color", "blue", source=(sid, 5))
    assert [f.value for f in store.recall(tenant, "subject")] == ["blue"]
    # a turn with its checkpoint (append_checkpoint_v2), keyed: its repeat is the first
    with_cp = store.append_turn(sid, _msg(40), idempotency_key="cp40", checkpoint={"at": 40})
    assert with_cp.turn_seq == 40 and with_cp.checkpoint_id is not None
    repeat = store.append_turn(sid, _msg(40), idempotency_key="cp40", checkpoint={"at": 40})
    assert repeat.duplicate and repeat.checkpoint_id == with_cp.checkpoint_id
    assert store.restore(sid).checkpoint.checkpoint_id == with_cp.checkpoint_id  # type: ignore[union-attr]
    # colocation: the session's rows of every table live on one worker
    with psycopg.connect(citus, autocommit=True) as conn:
        nodes = {
            conn.execute(
                "SELECT nodename || ':' || nodeport FROM citus_shards"
                " WHERE shardid = get_shard_id_for_distribution_column(%s, %s)",
                (table, sid),
            ).fetchone()
            for table in (
                "shardstore.sessions",
                "shardstore.turn_buffer",
                "shardstore.agent_history",
                "shardstore.chunk_map",
                "shardstore.checkpoints",
            )
        }
    assert len(nodes) == 1, nodes


def test_purge_session_range_and_subject(store: shardstore.Store, citus: str) -> None:
    tenant = _tenant()
    a = store.create_session(tenant, "alice", "agent")
    b = store.create_session(tenant, "bob", "agent")
    for sid in (a, b):
        store.append_turns(sid, [_msg(i) for i in range(30)])
        store.flush(sid)
    store.remember(tenant, "alice", "pet", "cat", source=(a, 2))
    store.drain_folds()
    dry = store.purge_range(b, before_turn_seq=12, dry_run=True)
    real = store.purge_range(b, before_turn_seq=12)
    assert dry.tables == real.tables and real.cut_turn_seq == 12
    assert [t.turn_seq for t in store.history(b)] == list(range(12, 30))
    report = store.purge_subject(tenant, "alice")
    assert report.tombstoned == 1
    assert report.tables["shardstore.facts"].rows == 1
    with pytest.raises(SessionPurged):
        store.tail(a)
    for table in (
        "turn_buffer",
        "agent_history",
        "chunk_map",
        "turn_keys",
        "embed_queue",
        "chunk_vectors",
    ):
        left = _one(citus, f"SELECT count(*) FROM shardstore.{table} WHERE session_id = %s", (a,))
        assert left == 0, table
    whole = store.purge_session(b)
    assert whole.tombstoned == 1 and whole.tables["shardstore.agent_history"].rows > 0


def _seqs(turns: Any) -> list[int]:
    return [t.turn_seq for t in turns]


def test_reads_across_a_purged_gap(store: shardstore.Store) -> None:
    """A session that lost its older chunks to purge_range, its window reaching past the
    gap: tail by turns and by tokens, tail_explained, context, restore (repeated: a plan
    Citus would make without values shows from the sixth call of a statement on a
    connection), checkpoints, a rewind and a fork of it read what is left. tail_v1 plans
    generically, and its jump over the gap (one statement over chunk_map and turn_buffer)
    failed on Citus: "could not create distributed plan"."""
    sid = store.create_session(_tenant(), "s", "agent")
    store.append_turns(sid, [_msg(i) for i in range(45)])
    old = store.checkpoint(sid, {"at": 44})
    store.flush(sid)
    store.drain_folds()
    store.append_turns(sid, [_msg(i) for i in range(45, 48)])  # buffered above the gap
    new = store.checkpoint(sid, {"at": 47})
    assert store.purge_range(sid, before_turn_seq=30).cut_turn_seq == 30
    left = list(range(30, 48))
    assert _seqs(store.tail(sid, n=20)) == left
    assert _seqs(store.tail(sid, n=5)) == left[-5:]
    assert _seqs(store.tail(sid, max_tokens=1_000_000)) == left
    assert _seqs(store.tail_explained(sid, n=20).turns) == left
    assert _seqs(store.history(sid)) == left
    assert store.chunks(sid)[0].chunk_seq == 6
    ctx = store.context(sid, 100_000)
    assert len(ctx.messages) == len(left)
    for _ in range(8):
        assert _seqs(store.restore(sid, n=20).turns) == left
    assert _seqs(store.restore(sid, old.checkpoint_id, n=20).turns) == left[:15]
    assert _seqs(store.restore(sid, max_tokens=1_000_000).turns) == left
    assert [c.checkpoint_id for c in store.checkpoints(sid)] == [
        new.checkpoint_id,
        old.checkpoint_id,
    ]
    child = store.fork(sid, at_turn_seq=40)
    store.append_turn(child, _msg(41, "fork"))
    assert _seqs(store.tail(child, n=20)) == list(range(30, 42))
    assert len(store.context(child, 100_000).messages) == 12
    assert store.rewind(sid, 44) == 4
    assert _seqs(store.tail(sid, n=20)) == list(range(30, 44))


def test_tail_after_a_time_purge(store: shardstore.Store) -> None:
    """purge_before (what retention does to old turns): a session emptied by it tails
    nothing, and one written to again tails its new turns only, past the gap."""
    from datetime import UTC, datetime

    tenant = _tenant()
    kept, emptied = (store.create_session(tenant, f"s{i}", "agent") for i in range(2))
    for sid in (kept, emptied):
        store.append_turns(sid, [_msg(i) for i in range(30)])
        store.flush(sid)
    store.drain_folds()
    cut = datetime.now(UTC)
    assert store.purge_before(cut, tenant_id=tenant).sessions_affected == 2
    store.append_turns(kept, [_msg(i) for i in range(30, 40)])
    assert _seqs(store.tail(kept, n=20)) == list(range(30, 40))
    assert _seqs(store.restore(kept, n=20).turns) == list(range(30, 40))
    assert len(store.context(kept, 100_000).messages) == 10
    assert store.tail(emptied, n=20) == []


def test_fork_tails(store: shardstore.Store) -> None:
    """A fork's tail reads its own turns and its parent's (fork_tail, called by tail_v1
    under its generic plans): on Citus every fork's tail failed, the parent's turns
    buffered or folded, by turns or by tokens, and context() of a fork with it."""
    parent = store.create_session(_tenant(), "s", "agent")
    store.append_turns(parent, [_msg(i) for i in range(12)])
    buffered = store.fork(parent)
    assert _seqs(store.tail(buffered, n=20)) == list(range(12))
    store.flush(parent)
    store.drain_folds()
    folded = store.fork(parent, at_turn_seq=9)
    assert store.append_turn(folded, _msg(10, "fork")).turn_seq == 10
    assert _seqs(store.tail(folded, n=20)) == list(range(11))
    assert _seqs(store.tail(folded, n=3)) == [8, 9, 10]
    assert _seqs(store.tail(folded, max_tokens=1_000_000)) == list(range(11))
    assert _seqs(store.tail(store.fork(folded), n=20)) == list(range(11))  # a fork's fork
    assert len(store.context(folded, 100_000).messages) == 11
    assert _seqs(store.restore(folded, n=5).turns) == list(range(6, 11))


def test_checkpoint_pages(store: shardstore.Store) -> None:
    """checkpoints() in one statement (session, page anchor, page): on Citus it was refused
    ("complex joins ...") unless each table was filtered by the session itself."""
    from shardstore.errors import CheckpointNotFound

    sid = store.create_session(_tenant(), "s", "agent")
    store.append_turn(sid, _msg(0))
    cps = [store.checkpoint(sid, {"step": i}) for i in range(5)]
    newest_first = [c.checkpoint_id for c in reversed(cps)]
    for _ in range(7):  # past the calls a plan cache makes with the values
        assert [c.checkpoint_id for c in store.checkpoints(sid)] == newest_first
    assert [c.checkpoint_id for c in store.checkpoints(sid, limit=2)] == newest_first[:2]
    page = store.checkpoints(sid, limit=2, before=newest_first[1])
    assert [c.checkpoint_id for c in page] == newest_first[2:4]
    assert store.checkpoints(sid, before=cps[0].checkpoint_id) == []
    assert [c.checkpoint_id for c in store.checkpoints(sid, before=cps[2].created_at)] == [
        c.checkpoint_id for c in reversed(cps[:2])
    ]
    with pytest.raises(CheckpointNotFound):
        store.checkpoints(sid, before=uuid.uuid4())
    empty = store.create_session(_tenant(), "s", "agent")
    assert store.checkpoints(empty) == []
    with pytest.raises(SessionNotFound):
        store.checkpoints(uuid.uuid4())
    store.purge_session(empty)
    with pytest.raises(SessionPurged):
        store.checkpoints(empty)


def test_search_by_session_and_tenant(store: shardstore.Store) -> None:
    tenant = _tenant()
    sid = store.create_session(tenant, "s", "agent")
    other = store.create_session(_tenant(), "s", "agent")
    for s in (sid, other):
        store.append_turns(s, [_msg(i) for i in range(24)])
        store.flush(s)
    store.drain_folds()
    assert store.embed() > 0
    hits = store.search("violin violin", session_id=sid, k=3)
    assert hits and all(h.session_id == sid for h in hits)
    assert any("violin" in t.message["content"] for t in hits[0].turns)
    wide = store.search("violin violin", tenant_id=tenant, k=3)
    assert wide and {h.session_id for h in wide} == {sid}


def test_text_indexing_off_and_on_again(store: shardstore.Store, citus: str) -> None:
    """configure_text_search(None) on Citus: the windows on every shard go, none are
    written while it is off, and a language indexes every folded turn again."""
    sid = store.create_session(_tenant(), "s", "agent")
    store.append_turns(sid, [{"role": "user", "content": f"gear G-{i} noise"} for i in range(50)])
    store.flush(sid)

    def found() -> set[str]:
        hits = store.search("G-7", session_id=sid, mode="text", k=10)
        return {t.message["content"] for h in hits for t in h.turns}

    assert "gear G-7 noise" in found()
    try:
        assert store.configure_text_search(None) == 0
        store.append_turns(sid, [{"role": "user", "content": "more G-7"}] * 5)
        store.flush(sid)
        with psycopg.connect(citus) as conn:
            assert conn.execute("SELECT count(*) FROM shardstore.turn_text").fetchone() == (0,)
        with pytest.raises(shardstore.ConfigurationError):
            store.search("G-7", session_id=sid, mode="text")
    finally:
        written = store.configure_text_search("english")
    assert written >= 55 and store.text_search_language() == "english"
    assert {"gear G-7 noise", "more G-7"} <= found()  # turns appended while off, indexed now


def test_fork_copies_are_indexed_and_erased_on_the_shards(
    store: shardstore.Store, citus: str
) -> None:
    """fork_copies is distributed by session_id (no triggers): a copy-on-write
    indexes the copied turns for text search on the fork's worker, and a GDPR purge of the
    parent (fork_erase, which finds copies by origin across shards) erases them there."""
    tenant = _tenant()
    parent = store.create_session(tenant, subject_id="bob")
    store.append_turns(parent, [_msg(i, "xylophone" if i == 3 else "") for i in range(20)])
    store.flush(parent)
    child = store.fork(parent, at_turn_seq=19)
    assert {
        h.turns[-1].turn_seq for h in store.search("xylophone", session_id=child, mode="text")
    } == {3}
    store.rewind(parent, 2)  # copy-on-write: the child now holds copies of turns 2..19
    records = "SELECT count(*) FROM shardstore.fork_copies WHERE session_id = %s"
    assert _one(citus, records, (child,)) > 0
    assert {
        h.turns[-1].turn_seq for h in store.search("xylophone", session_id=child, mode="text")
    } == {3}
    copied = "SELECT count(*) FROM shardstore.turn_text WHERE session_id = %s AND turn_seq = 3"
    assert _one(citus, copied, (child,)) == 1
    store.purge_session(parent)
    assert store.search("xylophone", session_id=child, mode="text") == []
    assert _one(citus, copied, (child,)) == 0
    assert _one(citus, records, (child,)) == 0


def test_turns_view_and_session_payloads_on_the_shards(store: shardstore.Store, citus: str) -> None:
    """shardstore.turns reads a session's folded and buffered turns from its worker, as
    history() gives them; a span payload attached to the session goes with its subject's
    purge (the artifact tables are distributed by tenant, the session by session_id)."""
    tenant = _tenant()
    sid = store.create_session(tenant, subject_id="u")
    store.append_turns(sid, [_msg(i) for i in range(30)])
    store.flush(sid)
    store.append_turn(sid, _msg(30, "buffered"))
    with psycopg.connect(citus) as conn:
        rows = conn.execute(
            "SELECT turn_seq, message FROM shardstore.turns WHERE session_id = %s"
            " ORDER BY turn_seq",
            (sid,),
        ).fetchall()
    assert rows == [(t.turn_seq, t.message) for t in store.history(sid)]
    assert len(rows) == 31
    ref = store.attach_payload(
        None, b"trace", name="p", content_type="x/y", tenant_id=tenant, session_id=sid
    )
    assert store.purge_subject(tenant, "u").tables["shardstore.artifacts"].rows == 1
    with pytest.raises(shardstore.ArtifactNotFound):
        store.get_artifact(tenant, ref.artifact_id)


@pytest.fixture
def citus_tenant(citus: str) -> Iterator[tuple[str, str, str]]:
    """A LOGIN role bound to a fresh tenant, RLS on; (dsn as that role, role, tenant)."""
    role = f"ss_t_{uuid.uuid4().hex[:8]}"
    tenant = _tenant()
    with psycopg.connect(citus, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        rls.grant_tenant_role(admin, role, tenant=tenant)
        rls.enable_rls(admin)
    try:
        yield make_conninfo(citus, user=role), role, tenant
    finally:
        with psycopg.connect(citus, autocommit=True) as admin:
            rls.disable_rls(admin)
            admin.execute("DELETE FROM shardstore.rls_role_tenants WHERE role_name = %s", (role,))
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def test_rls_bound_role_sees_only_its_tenant(
    store: shardstore.Store, citus_tenant: tuple[str, str, str]
) -> None:
    dsn, _role, tenant = citus_tenant
    mine = store.create_session(tenant, "s", "agent")
    theirs = store.create_session(_tenant(), "s", "agent")
    for sid in (mine, theirs):
        store.append_turns(sid, [_msg(i) for i in range(20)])
        store.flush(sid)
    store.drain_folds()
    with psycopg.connect(dsn, autocommit=True) as conn:
        seen = {r[0] for r in conn.execute("SELECT DISTINCT tenant_id FROM shardstore.sessions")}
        assert seen == {tenant}
        for table in ("turn_buffer", "agent_history", "chunk_map", "embed_queue"):
            rows = conn.execute(
                f"SELECT count(*) FROM shardstore.{table} WHERE session_id = %s", (theirs,)
            ).fetchone()
            assert rows == (0,), table
        tenant_store = rls.connect_tenant(conn, **SMALL)
        assert len(tenant_store.tail(mine, n=3)) == 3
        assert tenant_store.append_turn(mine, _msg(20)).turn_seq == 20
        with pytest.raises(SessionNotFound):
            tenant_store.tail(theirs)
        with pytest.raises(SessionNotFound):
            tenant_store.append_turn(theirs, _msg(99))
    assert [t.turn_seq for t in store.tail(theirs, n=1)] == [19]


def test_rls_set_local_reaches_the_shards(
    store: shardstore.Store, citus: str, citus_tenant: tuple[str, str, str]
) -> None:
    tenant = _tenant()
    sid = store.create_session(tenant, "s", "agent")
    store.append_turns(sid, [_msg(i) for i in range(12)])
    store.flush(sid)
    free = f"ss_u_{uuid.uuid4().hex[:8]}"  # an unbound tenant role: the setting decides
    with psycopg.connect(citus, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{free}" LOGIN')
        rls.grant_tenant_role(admin, free)
    try:
        with psycopg.connect(make_conninfo(citus, user=free)) as conn:
            with conn.transaction():
                conn.execute(f"SET LOCAL shardstore.tenant_id = '{tenant}'")
                n = conn.execute(
                    "SELECT count(*) FROM shardstore.agent_history WHERE session_id = %s", (sid,)
                ).fetchone()
                assert n is not None and n[0] > 0
            # outside it, no tenant: nothing visible
            n = conn.execute(
                "SELECT count(*) FROM shardstore.agent_history WHERE session_id = %s", (sid,)
            ).fetchone()
            assert n == (0,)
    finally:
        with psycopg.connect(citus, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{free}"')
            admin.execute(f'DROP ROLE "{free}"')


def test_maintenance_runs_on_the_coordinator(store: shardstore.Store) -> None:
    sid = store.create_session(_tenant(), "s", "agent")
    store.append_turns(sid, [_msg(i) for i in range(5)])
    report = store.maintain(flush_idle="0 seconds", embed=False)
    assert report.errors == [] and report.healthy
    assert store.chunks(sid)[0].partition is not None


def test_concurrent_retries_store_one_turn(store: shardstore.Store, citus: str) -> None:
    """The fast path's unique-violation race (a delegated append_to_open_chunk on a worker) is
    recovered as on one node: eight racing appends with one key store one turn."""
    sid = store.create_session(_tenant(), "s", "agent")
    store.append_turn(sid, _msg(0))
    stores = [shardstore.connect(citus, **SMALL) for _ in range(8)]
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(
                pool.map(lambda s: s.append_turn(sid, _msg(1), idempotency_key="same"), stores)
            )
    finally:
        for s in stores:
            s.close()
    assert {r.turn_seq for r in results} == {1}
    assert sum(not r.duplicate for r in results) == 1
    assert store.session(sid).turn_count == 2


def test_async_store_on_citus(citus: str) -> None:
    async def go() -> list[int]:
        astore = await shardstore.connect_async(citus, **SMALL)
        try:
            sid = await astore.create_session(_tenant(), "s", "agent")
            await astore.append_turns(sid, [_msg(i) for i in range(6)])
            return [t.turn_seq for t in await astore.tail(sid, n=3)]
        finally:
            await astore.close()

    assert asyncio.run(go()) == [3, 4, 5]


def test_distribute_refuses_an_undistributable_schema(store: shardstore.Store, citus: str) -> None:
    """A registered table with a trigger: distribute names it and changes nothing."""
    table = f"bad_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(citus, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE shardstore.{table} (session_id uuid NOT NULL, tenant_id text NOT NULL,"
            " n int, PRIMARY KEY (session_id))"
        )
        conn.execute(
            "SELECT shardstore.register_session_table_v2(%s, tenant_column => 'tenant_id')",
            (f"shardstore.{table}",),
        )
        conn.execute(
            f"CREATE TRIGGER t BEFORE INSERT ON shardstore.{table}"
            " FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()"
        )
    try:
        with pytest.raises(ConfigurationError, match=table):
            store.distribute()
        assert (
            _one(
                citus,
                "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = %s::regclass",
                (f"shardstore.{table}",),
            )
            == 0
        )
    finally:
        with psycopg.connect(citus, autocommit=True) as conn:
            conn.execute(
                "DELETE FROM shardstore.table_registry WHERE table_name = %s::regclass",
                (f"shardstore.{table}",),
            )
            conn.execute(f"DROP TABLE shardstore.{table}")


def test_search_settings_reach_the_shards(citus: str) -> None:
    """The tenant search's SET LOCAL settings are sent on to the workers' shard queries
    (set_config() would stay on the coordinator)."""
    sent: list[str] = []
    with psycopg.connect(citus) as conn:
        conn.add_notice_handler(lambda d: sent.append(d.message_primary or ""))
        conn.execute("SET citus.log_remote_commands = on")
        with conn.transaction():
            conn.execute("SELECT shardstore.vec_search_settings_v2(77, 1000)")
            conn.execute("SELECT count(*) FROM shardstore.chunk_vectors WHERE tenant_id = 'x'")
    assert any("SET LOCAL hnsw.ef_search = 77" in s for s in sent), sent[:3]
    assert any("SET LOCAL hnsw.iterative_scan = strict_order" in s for s in sent)


@pytest.fixture
def unbound_role(citus: str) -> Iterator[str]:
    """A LOGIN tenant role bound to no tenant (the connection's setting decides), RLS on."""
    role = f"ss_u_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(citus, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        rls.grant_tenant_role(admin, role)
        rls.enable_rls(admin)
    try:
        yield make_conninfo(citus, user=role)
    finally:
        with psycopg.connect(citus, autocommit=True) as admin:
            rls.disable_rls(admin)
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def test_tenant_connection_store_is_scoped_on_every_shard(
    store: shardstore.Store, citus: str, unbound_role: str
) -> None:
    """A store on a tenant connection (the tenant carried by the connection object, an
    unbound role) sees and changes its tenant's sessions on every shard, and nothing of
    another tenant's, for reads, writes, search and purges: it binds the tenant with SET
    LOCAL in every transaction, which Citus sends on to the shards. (A session-level
    setting stays on the coordinator: the store found not even its own sessions.)"""
    tenant, other_tenant = _tenant(), _tenant()
    mine: list[uuid.UUID] = []
    workers: set[Any] = set()
    with psycopg.connect(citus, autocommit=True) as conn:  # its sessions span the workers
        while len(mine) < 4 or (len(workers) < 2 and len(mine) < 64):
            sid = store.create_session(tenant, f"s{len(mine)}", "agent")
            mine.append(sid)
            workers.add(
                conn.execute(
                    "SELECT nodename, nodeport FROM citus_shards WHERE shardid ="
                    " get_shard_id_for_distribution_column('shardstore.sessions', %s)",
                    (sid,),
                ).fetchone()
            )
    assert len(workers) > 1, workers
    theirs = [store.create_session(other_tenant, f"s{i}", "agent") for i in range(4)]
    for sid in mine + theirs:
        store.append_turns(sid, [_msg(i) for i in range(16)])
        store.flush(sid)
    store.drain_folds()
    assert store.embed() > 0
    with rls.tenant_connection(unbound_role, tenant) as conn:
        scoped = rls.connect_tenant(conn, embedding_model=HashEmbedder(), **SMALL)
        for sid in mine:  # reads and writes of its own sessions, wherever they live
            assert [t.turn_seq for t in scoped.tail(sid, n=2)] == [14, 15]
            assert len(list(scoped.history(sid))) == 16
            assert scoped.append_turn(sid, _msg(16), idempotency_key="k16").turn_seq == 16
            assert [r.turn_seq for r in scoped.append_turns(sid, [_msg(17)])] == [17]
            assert scoped.session(sid).tenant_id == tenant
            assert sum(c.turn_count for c in scoped.chunks(sid)) == 18
        fresh = scoped.create_session(tenant, "new", "agent")
        assert scoped.append_turn(fresh, _msg(0)).turn_seq == 0
        hits = scoped.search("violin violin", tenant_id=tenant, k=5)
        assert hits and {h.session_id for h in hits} <= set(mine)
        assert scoped.search("violin violin", session_id=mine[0], k=2)
        # another tenant's sessions: not found, whatever the call
        assert scoped.search("violin violin", tenant_id=other_tenant, k=5) == []
        assert scoped.search("violin violin", session_id=theirs[0], k=5) == []
        for sid in theirs:
            with pytest.raises(SessionNotFound):
                scoped.tail(sid)
            with pytest.raises(SessionNotFound):
                scoped.append_turn(sid, _msg(99))
            with pytest.raises(SessionNotFound):
                scoped.purge_session(sid)
        assert scoped.purge_tenant(other_tenant).sessions_affected == 0
        with pytest.raises(shardstore.ShardstoreError):
            scoped.create_session(other_tenant, "x", "agent")
        # purges of its own (a range purge and a rewind rewrite chunks under row security)
        assert scoped.purge_range(mine[1], before_turn_seq=5).cut_turn_seq == 5
        assert scoped.rewind(mine[0], 16) == 2
        assert scoped.purge_session(mine[2]).tombstoned == 1
        assert scoped.purge_subject(tenant, "s3").tombstoned == 1
        # the binding is per transaction: nothing is left set on the connection
        assert rls.current_tenant(conn) is None
    for sid in (mine[2], mine[3]):
        with pytest.raises(SessionPurged):
            store.tail(sid)
    assert [t.turn_seq for t in store.history(mine[1])] == list(range(5, 18))
    assert store.session(mine[0]).turn_count == 16
    for sid in theirs:  # the other tenant untouched
        assert store.session(sid).turn_count == 16


def _scoped_store(kind: str, role_dsn: str, tenant: str) -> tuple[Any, Any]:
    """A tenant store of an unbound role, made the way ``kind`` names, and what to close."""
    if kind == "pool":  # a store that owns its pool, every connection SETs the tenant
        pooled = shardstore.connect(
            make_conninfo(role_dsn, options=f"-c shardstore.tenant_id={tenant}"),
            embedding_model=HashEmbedder(),
            **SMALL,
        )
        return pooled, pooled
    conn = psycopg.connect(role_dsn, autocommit=True)
    rls.set_session_tenant(conn, tenant)
    if kind == "connect_tenant":
        return rls.connect_tenant(conn, embedding_model=HashEmbedder(), **SMALL), conn
    return shardstore.connect(conn, embedding_model=HashEmbedder(), **SMALL), conn


def _jsonl(text: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["connect_tenant", "connect", "pool"])
def test_every_public_method_tenant_bound(
    store: shardstore.Store, citus: str, unbound_role: str, kind: str
) -> None:
    """Every public store method once on Citus through a store of an unbound tenant role
    (RLS on; the tenant bound per transaction), made by ``rls.connect_tenant(conn)``, by
    ``shardstore.connect(conn)`` on a tenant connection, and by ``shardstore.connect(dsn)``
    whose connections SET the tenant: each works on its own tenant's sessions, and
    another tenant's session is not found."""
    import io

    tenant, other_tenant = _tenant(), _tenant()
    theirs = store.create_session(other_tenant, "alice", "agent")
    store.append_turns(theirs, [_msg(i) for i in range(12)])
    s, closer = _scoped_store(kind, unbound_role, tenant)
    try:
        assert s.connector.prologue is not None  # the tenant travels per transaction
        sid = s.create_session(tenant, "alice", "agent")
        assert s.session(sid).tenant_id == tenant
        # without the binding the shards see no tenant (a session-level setting, of the
        # connection or of the DSN's options, stays on the coordinator)
        saved, s.connector.prologue = s.connector.prologue, None
        with pytest.raises(SessionNotFound):
            s.session(sid)
        s.connector.prologue = saved
        # append_turn: plain, with a key (and its repeat), with a checkpoint, with both
        assert s.append_turn(sid, _msg(0)).turn_seq == 0
        assert s.append_turn(sid, _msg(1), idempotency_key="k1").turn_seq == 1
        assert s.append_turn(sid, _msg(1), idempotency_key="k1").duplicate
        with_cp = s.append_turn(sid, _msg(2), checkpoint={"step": 2})
        assert with_cp.turn_seq == 2 and with_cp.checkpoint_id is not None
        keyed_cp = s.append_turn(sid, _msg(3), idempotency_key="k3", checkpoint={"step": 3})
        again = s.append_turn(sid, _msg(3), idempotency_key="k3", checkpoint={"step": 3})
        assert again.duplicate and again.checkpoint_id == keyed_cp.checkpoint_id
        # append_turns: plain, with keys, with a checkpoint
        assert [r.turn_seq for r in s.append_turns(sid, [_msg(4), _msg(5)])] == [4, 5]
        keyed = s.append_turns(sid, [_msg(6), _msg(7)], idempotency_keys=["k6", "k7"])
        assert [r.turn_seq for r in keyed] == [6, 7]
        batch_cp = s.append_turns(sid, [_msg(i) for i in range(8, 30)], checkpoint={"n": 30})
        assert batch_cp[-1].turn_seq == 29 and batch_cp[-1].checkpoint_id is not None
        s.drain_folds()
        assert s.flush(sid) >= 0
        # reads
        assert [t.turn_seq for t in s.tail(sid, n=3)] == [27, 28, 29]
        assert s.tail_explained(sid, n=3).turns[-1].turn_seq == 29
        assert [t.turn_seq for t in s.history(sid)] == list(range(30))
        chunks = s.chunks(sid)
        assert len(chunks) > 1 and sum(c.turn_count for c in chunks) == 30
        assert [x.session_id for x in s.sessions(tenant_id=tenant)] == [sid]
        assert s.stats().sessions == 1
        # checkpoints
        cp = s.checkpoint(sid, {"step": "x"}, idempotency_key="cpx")
        assert s.restore(sid).checkpoint == cp
        assert s.restore(sid, with_cp.checkpoint_id).checkpoint.turn_seq == 2  # type: ignore[union-attr]
        assert len(s.checkpoints(sid)) == 4
        # fork, then rewind the parent below the fork point: the fork keeps its history
        child = s.fork(sid, at_turn_seq=20)
        assert s.append_turn(child, _msg(21, "fork")).turn_seq == 21
        assert s.rewind(sid, 10) == 20
        assert [t.turn_seq for t in s.history(child)] == list(range(22))
        assert [t.turn_seq for t in s.tail(sid, n=2)] == [8, 9]
        assert s.append_turn(sid, _msg(10, "violin")).turn_seq == 10
        # runs
        run = s.open_run(sid, framework="test", thread_key="t1")
        assert s.record_step(run.run_id, steps=2, usd_cost=0.5).steps == 2
        assert s.mark_awaiting(run.run_id, {"ask": "ok?"}).status == "awaiting_human"
        assert s.resume_run(run.run_id).status == "running"
        assert [r.run_id for r in s.runs(tenant_id=tenant)] == [run.run_id]
        assert s.close_run(run.run_id, "done").status == "done"
        assert s.get_run(run.run_id).status == "done"
        # facts
        s.remember(tenant, "alice", "color", "blue", source=(sid, 5))
        s.remember(tenant, "alice", "color", "green", source=(sid, 6))
        assert [f.value for f in s.recall(tenant, "alice")] == ["green"]
        assert len(s.fact_history(tenant, "alice", "color")) == 2
        assert s.forget(tenant, "alice", "color") is not None
        s.remember(tenant, "alice", "pet", "cat", source=(sid, 7))
        # artifacts
        ref = s.put_artifact(tenant, b"payload " * 100, content_type="text/plain")
        assert s.get_artifact(tenant, ref.artifact_id) == b"payload " * 100
        assert b"".join(s.open_artifact(tenant, ref.artifact_id)) == b"payload " * 100
        s.ref_artifact(tenant, ref.artifact_id, "turn", f"{sid}:3")
        s.ref_artifact(tenant, ref.artifact_id, "checkpoint", str(with_cp.checkpoint_id))
        s.ref_artifact(tenant, ref.artifact_id, "business_output", "invoice-1")
        assert s.unref_artifact(tenant, ref.artifact_id, "business_output", "invoice-1")
        [info] = s.list_artifacts(tenant)
        assert info.live_refs == 2
        traced = s.attach_payload(
            None, b"trace", name="p", content_type="text/plain", tenant_id=tenant
        )
        assert s.get_artifact(tenant, traced.artifact_id) == b"trace"
        from datetime import timedelta

        assert s.sweep_artifacts(grace=timedelta(0)).deleted == 0  # both referenced
        assert s.get_artifact(tenant, ref.artifact_id) == b"payload " * 100
        assert s.expand(s.tail(sid, n=2)) == s.tail(sid, n=2)
        # embedding, search, summaries, context
        assert s.embed() > 0
        hits = s.search("violin violin", session_id=sid, k=3)
        assert hits and {h.session_id for h in hits} == {sid}
        assert {h.session_id for h in s.search("violin", tenant_id=tenant, k=5)} <= {sid, child}
        assert s.summarize(lambda turns: f"{len(turns)} turns", session_id=sid) > 0
        assert s.summaries(sid)
        ctx = s.context(sid, 2000, recall="violin", facts_subject="alice")
        assert ctx.messages and ctx.tokens <= 2000
        # export, and an import of it under a new id
        out = io.StringIO()
        assert s.export_sessions([child], out=out).sessions == 1
        lines = _jsonl(out.getvalue())
        new_id = str(uuid.uuid4())
        for line in lines:
            if "session_id" in line:
                line["session_id"] = new_id
        import json

        text = "\n".join(json.dumps(line) for line in lines) + "\n"
        assert s.import_jsonl(io.StringIO(text)).sessions == 1
        assert [t.turn_seq for t in s.history(new_id)] == list(range(22))
        # maintenance as the tenant, purges of its own
        # a tenant role's maintenance does the work; the run log is the operator's table
        done = s.maintain(flush_idle="0 seconds", embed=False)
        assert done.errors == ["logging the run: permission denied for table maintenance_runs"]
        assert s.purge_range(sid, before_turn_seq=4).cut_turn_seq == 4
        assert s.purge_session(new_id).tombstoned == 1
        assert s.purge_subject(tenant, "alice").tombstoned == 2  # the session and its fork
        with pytest.raises(SessionPurged):
            s.tail(sid)
        # another tenant's session: not found, nothing changed
        for call in (
            lambda: s.tail(theirs),
            lambda: s.append_turn(theirs, _msg(99)),
            lambda: s.checkpoint(theirs, {"x": 1}),
            lambda: s.fork(theirs),
            lambda: s.rewind(theirs, 1),
            lambda: s.purge_session(theirs),
        ):
            with pytest.raises(SessionNotFound):
                call()
        assert s.purge_tenant(other_tenant).sessions_affected == 0
        assert s.search("violin", tenant_id=other_tenant, k=5) == []
    finally:
        closer.close()
    assert store.session(theirs).turn_count == 12


ARTIFACT_TABLES = ("shardstore.artifacts", "shardstore.artifact_chunks", "shardstore.artifact_refs")


def test_artifact_tables_are_distributed_by_tenant_and_colocated(citus: str) -> None:
    """``artifacts``, ``artifact_chunks`` and ``artifact_refs`` (once coordinator tables;
    ``artifact_refs`` once had a trigger) are hash-distributed by ``tenant_id``
    in the colocation group of ``facts``, without triggers."""
    with psycopg.connect(citus, autocommit=True) as conn:
        rows = {
            table: conn.execute(
                "SELECT partmethod, column_to_column_name(logicalrelid, partkey), colocationid"
                " FROM pg_dist_partition WHERE logicalrelid = %s::regclass",
                (table,),
            ).fetchone()
            for table in (*ARTIFACT_TABLES, "shardstore.facts")
        }
        assert all(r is not None and r[:2] == ("h", "tenant_id") for r in rows.values()), rows
        assert len({r[2] for r in rows.values() if r is not None}) == 1, rows
        for table in ARTIFACT_TABLES:
            assert conn.execute(
                "SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                (table,),
            ).fetchone() == (0,)


def _mark(citus: str, tenant: str, aid: uuid.UUID) -> Any:
    return _one(
        citus,
        "SELECT unreferenced_since FROM shardstore.artifacts"
        " WHERE tenant_id = %s AND artifact_id = %s",
        (tenant, aid),
    )


def test_artifact_lifecycle_on_the_shards(store: shardstore.Store, citus: str) -> None:
    """Put (several chunks), read, reference by turn, checkpoint and trajectory; every path
    that removes refs marks on the shards (unref, keep_checkpoints, rewind), the sweep
    deletes exactly what lost its refs, a purge releases at once while an earlier release
    keeps its grace; one tenant's artifact rows, chunks and refs lie on one worker."""
    from datetime import timedelta

    tenant = _tenant()
    sid = store.create_session(tenant, "victim", "agent")
    store.append_turns(sid, [_msg(i) for i in range(6)])
    big = os.urandom(2_500_000)  # three 1 MiB chunks
    ref = store.put_artifact(tenant, big, content_type="application/octet-stream")
    assert store.put_artifact(tenant, big, content_type="x/y").artifact_id == ref.artifact_id
    assert store.get_artifact(tenant, ref.artifact_id) == big
    assert b"".join(store.open_artifact(tenant, ref.artifact_id)) == big
    parts = {
        name: store.put_artifact(tenant, name.encode() * 100, content_type="text/plain")
        for name in ("turn", "unref", "keep", "rewind", "purge", "earlier")
    }
    store.ref_artifact(tenant, ref.artifact_id, "turn", f"{sid}:0")
    store.ref_artifact(tenant, parts["purge"].artifact_id, "turn", f"{sid}:1")
    store.ref_artifact(tenant, parts["unref"].artifact_id, "trajectory", "run-1")
    store.ref_artifact(tenant, parts["earlier"].artifact_id, "trajectory", "run-2")
    old = store.checkpoint(sid, {"a": 1}, artifacts=[parts["keep"]])
    store.checkpoint(sid, {"b": 2}, artifacts=[parts["turn"]])
    store.append_turn(sid, _msg(6))  # after the checkpoints: a rewind to 6 keeps them
    store.ref_artifact(tenant, parts["rewind"].artifact_id, "turn", f"{sid}:6")
    assert {a.ref.artifact_id: a.live_refs for a in store.list_artifacts(tenant)}[
        ref.artifact_id
    ] == 1
    # each path marks what it released
    assert store.unref_artifact(tenant, parts["unref"].artifact_id, "trajectory", "run-1")
    # (global: other sessions of this database lose their older checkpoints too)
    assert store.maintain(keep_checkpoints=1, embed=False).checkpoints_removed >= 1
    assert (
        _one(
            citus,
            "SELECT count(*) FROM shardstore.artifact_refs WHERE owner_id = %s",
            (str(old.checkpoint_id),),
        )
        == 0
    )
    assert store.rewind(sid, 6) == 1
    for name in ("unref", "keep", "rewind"):
        assert _mark(citus, tenant, parts[name].artifact_id) is not None, name
    for name in ("turn", "purge", "earlier"):
        assert _mark(citus, tenant, parts[name].artifact_id) is None, name
    assert _mark(citus, tenant, ref.artifact_id) is None
    dry = store.sweep_artifacts(grace=timedelta(0), dry_run=True)
    assert {parts[n].artifact_id for n in ("unref", "keep", "rewind")} <= set(dry.deleted_ids)
    swept = store.sweep_artifacts(grace=timedelta(0))
    assert {parts[n].artifact_id for n in ("unref", "keep", "rewind")} <= set(swept.deleted_ids)
    left = {a.ref.artifact_id for a in store.list_artifacts(tenant)}
    assert left == {ref.artifact_id, *(parts[n].artifact_id for n in ("turn", "purge", "earlier"))}
    # one worker holds the tenant's artifact rows, chunks and refs
    with psycopg.connect(citus, autocommit=True) as conn:
        nodes = {
            conn.execute(
                "SELECT nodename || ':' || nodeport FROM citus_shards"
                " WHERE shardid = get_shard_id_for_distribution_column(%s, %s::text)",
                (table, tenant),
            ).fetchone()
            for table in (*ARTIFACT_TABLES, "shardstore.facts")
        }
        assert len(nodes) == 1, nodes
        (chunks,) = conn.execute(
            "SELECT count(*) FROM shardstore.artifact_chunks WHERE tenant_id = %s", (tenant,)
        ).fetchone() or (0,)
        assert chunks == 3 + 3  # the big one; turn, purge, earlier: one each
    assert [a.artifact_id for a in store.restore(sid).artifacts] == [parts["turn"].artifact_id]
    # an offloaded append: the card's ref and the bytes on the tenant's worker, expanded back
    offloading = shardstore.connect(citus, offload_over=1000, **SMALL)
    try:
        long = {"role": "user", "content": "pasted " * 400}
        offloading.append_turn(sid, long)
        [turn] = offloading.tail(sid, n=1)
        assert turn.message != long
        assert offloading.tail(sid, n=1, expand=True)[0].message == long
    finally:
        offloading.close()
    # released before the purge: keeps its grace; the purge's own: deleted at once
    store.unref_artifact(tenant, parts["earlier"].artifact_id, "trajectory", "run-2")
    report = store.purge_subject(tenant, "victim")
    assert report.tables["shardstore.artifacts"].rows == 4  # big, turn, purge, the offload
    assert {a.ref.artifact_id for a in store.list_artifacts(tenant)} == {
        parts["earlier"].artifact_id
    }
    assert store.sweep_artifacts(grace=timedelta(hours=1)).deleted == 0
    assert parts["earlier"].artifact_id in store.sweep_artifacts(grace=timedelta(0)).deleted_ids
    assert (
        _one(
            citus, "SELECT count(*) FROM shardstore.artifact_chunks WHERE tenant_id = %s", (tenant,)
        )
        == 0
    )


def test_artifact_sweep_racing_references_on_the_shards(store: shardstore.Store) -> None:
    """Writers put and reference while a sweeper sweeps with no grace: every acknowledged
    reference's artifact stays readable (the row-by-row sweep of 0034 on the cluster)."""
    import threading
    from datetime import timedelta

    tenant = _tenant()
    stop = threading.Event()
    acked: list[tuple[uuid.UUID, bytes]] = []
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(25):
                data = f"content {i % 5}".encode() * 40
                ref = store.put_artifact(tenant, data, content_type="x/y")
                try:
                    store.ref_artifact(tenant, ref.artifact_id, "business_output", f"w{w}-{i}")
                except shardstore.ArtifactNotFound:
                    continue  # swept between put and ref: refused, never dangling
                acked.append((ref.artifact_id, data))
        except BaseException as exc:
            errors.append(exc)

    def sweeper() -> None:
        try:
            while not stop.is_set():
                store.sweep_artifacts(grace=timedelta(0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    sweep = threading.Thread(target=sweeper)
    sweep.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    sweep.join(60)
    assert not errors, errors
    assert acked
    store.sweep_artifacts(grace=timedelta(0))
    for aid, data in acked:
        assert store.get_artifact(tenant, aid) == data


@pytest.fixture
def empty_citus_dsn(citus: str) -> Iterator[str]:
    """An empty database on the cluster, set up as CITUS_DSN's: created through the
    coordinator (Citus >= 12.2 propagates it to the workers), with citus and vector on every
    node and the same workers added. Dropped afterwards."""
    name = f"shardstore_up_{uuid.uuid4().hex[:10]}"
    propagate = "-c citus.enable_create_database_propagation=on"
    with psycopg.connect(citus, autocommit=True) as conn:
        workers = conn.execute("SELECT * FROM citus_get_active_worker_nodes()").fetchall()
    with psycopg.connect(citus, autocommit=True, options=propagate) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(citus, dbname=name)
    try:
        for host, port in workers:
            with psycopg.connect(make_conninfo(dsn, host=host, port=port), autocommit=True) as w:
                w.execute("CREATE EXTENSION IF NOT EXISTS citus")
                w.execute("CREATE EXTENSION IF NOT EXISTS vector")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for host, port in workers:
                conn.execute("SELECT citus_add_node(%s, %s)", (host, port))
        yield dsn
    finally:
        with psycopg.connect(citus, autocommit=True, options=propagate) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_lexeme_hashes_upgrade_a_distributed_schema(
    empty_citus_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema distributed at 0041 (tsvector windows on the shards, folded and buffered
    turns) upgraded past 0042: every window becomes its lexeme hashes on the shards, every
    text ranking (session and tenant, exact and sampled) is the same, and turns appended
    after the upgrade, sealing chunks (0043), are found."""
    from shardstore.schema import distribute, migrate
    from tests.search.test_text_windows_as_lexeme_hashes import (
        LEXEME_MIGRATION,
        RANK_ARGS,
        RANK_SHIM,
        _both_rankings,
        build_sessions,
    )

    full = migrate.all_migrations()
    cut = next(i for i, m in enumerate(full) if m.name == LEXEME_MIGRATION)
    migrate.baseline()  # read once per process, against the full set
    monkeypatch.setattr(migrate, "all_migrations", lambda: full[:cut])
    # what the shardstore of that schema delegated, under the names it had then
    monkeypatch.setattr(
        distribute,
        "DELEGATED",
        dict.fromkeys(
            ("append_one_v1", "append_v1", "append_v2", "append_one_v2", "tail_v1"), "p_session_id"
        ),
    )
    old = shardstore.connect(empty_citus_dsn, background_fold=False, **SMALL)
    try:
        assert old.distribute().workers >= 1
        with psycopg.connect(empty_citus_dsn, autocommit=True) as admin:
            admin.execute(RANK_SHIM)  # this version's text search, on that schema's ranking
        sids = build_sessions(old)
        before = _both_rankings(old, sids)
        windows = _one(empty_citus_dsn, "SELECT count(*) FROM shardstore.turn_text")
        with psycopg.connect(empty_citus_dsn, autocommit=True) as admin:
            admin.execute(f"DROP FUNCTION shardstore.text_rank_v2({RANK_ARGS})")
    finally:
        old.close()
    monkeypatch.undo()
    assert any(hits for ranking in before for hits in ranking) and windows > 100
    new = shardstore.connect(empty_citus_dsn, background_fold=False, **SMALL)
    try:
        # the upgrade renamed a delegated helper: distributing again delegates it by its new
        # name (the old one is gone with its delegation)
        report = new.distribute()
        assert "shardstore.append_to_open_chunk" in report.functions_delegated, report
        delegated = _one(
            empty_citus_dsn,
            "SELECT array_agg(p.proname::text ORDER BY p.proname) FROM pg_dist_object o"
            " JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid"
            " WHERE o.distribution_argument_index IS NOT NULL",
        )
        assert delegated == sorted(distribute.DELEGATED), delegated
        assert not new.distribute().changed
        assert _both_rankings(new, sids) == before
        assert _one(empty_citus_dsn, "SELECT count(*) FROM shardstore.turn_text") == windows
        assert (
            _one(
                empty_citus_dsn,
                "SELECT count(*) FROM shardstore.turn_text"
                " WHERE tsv @> ARRAY[hashtext('zanzibar')]",
            )
            >= 3
        )
        first = new.append_turn(sids[0], {"role": "user", "content": "a quokka at the harbour"})
        results = [
            new.append_turn(sids[0], {"role": "user", "content": f"quokka {i} " + "w " * 40})
            for i in range(6)
        ]
        assert results[-1].chunk_seq > first.chunk_seq  # sealed on the way
        new.flush(sids[0])
        hits = new.search("quokka", session_id=sids[0], k=10, mode="text")
        # one hit per chunk holding the word (its best window), as on one server
        assert sorted(h.chunk_seq for h in hits) == sorted({r.chunk_seq for r in [first, *results]})
        assert all("quokka" in str(t.message) for h in hits for t in h.turns)
    finally:
        new.close()
