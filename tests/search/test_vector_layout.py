"""The vector layout (migration vector_layout): chunk_vectors hashed by tenant, the two
tenant search paths (exact for a tenant with few vectors, HNSW scaled to the tenant's
share of its leaf), their agreement on a small synthetic set, and the upgrade from the
range-partitioned layout (every vector moved; grants, row security and registry kept)."""

from __future__ import annotations

import asyncio
import math
import random
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.core import sql
from shardstore.core.executor import run_sync
from shardstore.errors import ConfigurationError
from shardstore.schema import migrate, rls
from shardstore.search.vectors import (
    DEFAULT_MAX_SCAN_TUPLES,
    MAX_CANDIDATES,
    MIN_SHARE,
    ann_settings,
)
from tests.embedders import HashEmbedder
from tests.search.test_vector_search import SMALL, fill, filler

StoreFactory = Callable[..., shardstore.Store]
LAYOUT_MIGRATION = "vector_layout"
LEAVES = 32
VECTOR_ROWS = (
    "SELECT session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id, first_turn_seq,"
    " last_turn_seq, first_at, last_at, embedding::text FROM shardstore.chunk_vectors"
)
LEAF_OF = (
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
    " WHERE i.inhparent = 'shardstore.chunk_vectors'::regclass"
    " AND satisfies_hash_partition('shardstore.chunk_vectors'::regclass, %s,"
    " (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'remainder (\\d+)'))[1]::integer, %s::text)"
)


def _layout(conn: psycopg.Connection[Any]) -> tuple[str, int]:
    row = conn.execute(
        "SELECT p.partstrat, (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = p.partrelid)"
        " FROM pg_partitioned_table p WHERE p.partrelid = 'shardstore.chunk_vectors'::regclass"
    ).fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


def _leaf(conn: psycopg.Connection[Any], tenant: str) -> str:
    row = conn.execute(LEAF_OF, (LEAVES, tenant)).fetchone()
    assert row is not None
    return str(row[0])


def _same_leaf_tenants(conn: psycopg.Connection[Any], n: int) -> list[str]:
    """``n`` tenant names whose vectors share one leaf."""
    by_leaf: dict[str, list[str]] = {}
    for i in range(2000):
        name = f"t{i}"
        group = by_leaf.setdefault(_leaf(conn, name), [])
        group.append(name)
        if len(group) == n:
            return group
    raise AssertionError("no leaf got n tenants")


# ------------------------------------------------------------------ ann_settings (pure)


@settings(max_examples=300, deadline=None)
@given(
    base=st.integers(1, 1000),
    limit=st.integers(1, 1000),
    leaf=st.one_of(st.none(), st.floats(-1, 1e8, allow_nan=False)),
    share=st.one_of(st.none(), st.floats(0, 1, allow_nan=False)),
    min_rows=st.integers(1, 10**6),
)
def test_ann_settings_scale_with_the_share_and_stay_in_pgvector_limits(
    base: int, limit: int, leaf: float | None, share: float | None, min_rows: int
) -> None:
    got = ann_settings(base, limit, leaf, share, min_rows)
    assert 1 <= got.ef_search <= max(base, MAX_CANDIDATES)
    assert DEFAULT_MAX_SCAN_TUPLES <= got.max_scan_tuples <= 2**31 - 1
    known = (
        share
        if share is not None and share > 0
        else (min_rows / leaf if leaf is not None and leaf > 0 else None)
    )
    if known is None:
        assert got == ann_settings(base, limit, None, None, 1)
        assert got.ef_search == base
    else:
        # never below the unscaled setting; the smaller the share, the wider the scan
        clamped = max(MIN_SHARE, min(1.0, known))
        assert got.ef_search == min(MAX_CANDIDATES, math.ceil(base / clamped))
        assert got.ef_search >= min(base, MAX_CANDIDATES)
        half = ann_settings(base, limit, None, clamped / 2, 1)
        assert half.ef_search >= got.ef_search and half.max_scan_tuples >= got.max_scan_tuples


def test_vector_exact_rows_is_checked() -> None:
    for bad in (-1, 1.5, True, "10", 10**8):
        with pytest.raises(ConfigurationError):
            shardstore.Settings(vector_exact_rows=bad)
    assert shardstore.Settings(vector_exact_rows=0).vector_exact_rows == 0


# ------------------------------------------------------------------ fresh layout


def test_a_fresh_schema_hashes_vectors_by_tenant(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(embedding_model=HashEmbedder(), **SMALL)
    sids = [store.create_session(f"tenant-{i}") for i in range(6)]
    for sid in sids:
        fill(store, sid, 30)
    assert store.embed() > 0
    with psycopg.connect(dsn) as conn:
        assert _layout(conn) == ("h", LEAVES)
        # a tenant's rows lie in one leaf, and a tenant search plans only that leaf
        per_tenant = conn.execute(
            "SELECT tenant_id, count(DISTINCT tableoid), min(tableoid::regclass::text)"
            " FROM shardstore.chunk_vectors GROUP BY tenant_id"
        ).fetchall()
        assert len(per_tenant) == 6 and all(n == 1 for _, n, _ in per_tenant)
        assert all(leaf == "shardstore." + _leaf(conn, t) for t, _, leaf in per_tenant)
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT session_id FROM shardstore.chunk_vectors"
                " WHERE tenant_id = 'tenant-3'"
            ).fetchall()
        )
        assert set(re.findall(r"chunk_vectors_h\d\d", plan)) == {_leaf(conn, "tenant-3")}, plan
        # the leaf's statistics name the tenant's share once it is analysed
        conn.execute("ANALYZE shardstore.chunk_vectors")
        rows, share = conn.execute(
            "SELECT * FROM shardstore.vec_tenant_leaf_v1('tenant-3')"
        ).fetchone() or (None, None)
        (mine,) = conn.execute(
            "SELECT count(*) FROM shardstore.chunk_vectors WHERE tenant_id = 'tenant-3'"
        ).fetchone() or (0,)
        assert rows is not None and share is not None and mine > 0
        assert math.isclose(rows * share, mine, rel_tol=0.01)
        assert (
            conn.execute("SELECT * FROM shardstore.vec_tenant_leaf_v1('nobody')").fetchone()
            is not None
        )
    # new vectors need no partition made first: the worker no longer syncs partitions
    hits = store.search("weather harbour", tenant_id="tenant-3", k=3)
    assert hits and {h.session_id for h in hits} == {sids[3]}


def test_migrating_is_idempotent(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        first = run_sync(conn, migrate.migrate_op())
        assert first and run_sync(conn, migrate.migrate_op()) == []
        assert _layout(conn) == ("h", LEAVES)


# ------------------------------------------------------------------ both tenant paths


@pytest.mark.slow
@pytest.mark.parametrize("exact_rows", [20_000, 0], ids=["exact", "hnsw"])
def test_tenant_search_paths_keep_tenants_apart(
    make_store: StoreFactory, dsn: str, exact_rows: int
) -> None:
    """A small tenant sharing its leaf with a bigger one: each path returns k distinct
    chunks of the asked tenant only (the HNSW path's filter removes most of the leaf)."""
    with psycopg.connect(dsn) as conn:
        small, big = _same_leaf_tenants(conn, 2)
    store = make_store(embedding_model=HashEmbedder(), vector_exact_rows=exact_rows, **SMALL)
    mine = store.create_session(small)
    fill(store, mine, 200)
    for _ in range(4):
        fill(store, store.create_session(big), 120)
    store.embed()
    hits = store.search("weather harbour laptop", tenant_id=small, k=8)
    assert len(hits) == 8 and len({h.chunk_seq for h in hits}) == 8
    assert all(h.session_id == mine for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    others = store.search("weather harbour laptop", tenant_id=big, k=20)
    assert len(others) == 20 and mine not in {h.session_id for h in others}
    assert store.search("weather harbour", tenant_id="nobody", k=5) == []


def _synthetic(dsn: str, dim: int, tenants: dict[str, int], seed: int) -> dict[str, list[Any]]:
    """Clustered random unit vectors written straight into chunk_vectors (one window per
    chunk, chunk_seq = row number), ``tenants[name]`` rows each; returns each tenant's rows
    as (session_id, chunk_seq, vector)."""
    rng = random.Random(seed)
    centres = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(8)]
    start = datetime(2026, 1, 5, tzinfo=UTC)
    out: dict[str, list[Any]] = {}
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT shardstore.vec_configure_v2('test/synthetic', %s, 64, false)", (dim,))
        for tenant, n in tenants.items():
            sid = uuid.uuid4()
            rows = []
            for seq in range(n):
                c = centres[rng.randrange(len(centres))]
                v = [x + rng.gauss(0, 0.7) for x in c]
                norm = math.sqrt(sum(x * x for x in v))
                rows.append((sid, seq, [x / norm for x in v]))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO shardstore.chunk_vectors VALUES"
                    " (%s, %s, %s, 0, %s, NULL, %s, %s, %s, %s, %s::halfvec)",
                    [
                        (
                            sid,
                            seq,
                            start + timedelta(minutes=seq),
                            tenant,
                            seq,
                            seq,
                            start + timedelta(minutes=seq),
                            start + timedelta(minutes=seq),
                            "[" + ",".join(f"{x:.6f}" for x in v) + "]",
                        )
                        for sid, seq, v in rows
                    ],
                )
            out[tenant] = rows
        conn.execute("ANALYZE shardstore.chunk_vectors")
    return out


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return 1.0 - dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_exact_path_is_exact_and_hnsw_agrees_on_a_small_set(dsn: str) -> None:
    """Two tenants in one leaf (300 and 60 vectors, 24 dimensions): the exact path returns
    the true top 10 (by float distance; halfvec rounding can only swap near-ties), and the
    HNSW path, whose ef_search (scaled to the share, at least the leaf's 360 rows) covers
    the whole leaf, returns what the exact path returns, for both tenants."""
    with psycopg.connect(dsn) as conn:
        big, small = _same_leaf_tenants(conn, 2)
    data = _synthetic(dsn, 24, {big: 300, small: 60}, seed=7)
    rng = random.Random(11)
    exact = shardstore.connect(dsn, embedding_model=HashEmbedder(24, name="test/synthetic"))
    ann = shardstore.connect(
        dsn,
        embedding_model=HashEmbedder(24, name="test/synthetic"),
        vector_exact_rows=0,
        hnsw_ef_search=400,
    )
    try:
        agree = 0
        for q in range(20):
            tenant = big if q % 2 else small
            rows = data[tenant]
            base = rows[rng.randrange(len(rows))][2]
            query = [x + rng.gauss(0, 0.3) for x in base]
            truth = sorted(rows, key=lambda r: _cosine(query, r[2]))
            got = exact.search(query, tenant_id=tenant, k=10)
            assert len(got) == 10 and all(h.session_id == rows[0][0] for h in got)
            tenth = _cosine(query, truth[9][2])
            by_seq = {r[1]: r[2] for r in rows}
            assert all(_cosine(query, by_seq[h.chunk_seq]) <= tenth + 2e-3 for h in got)
            via_hnsw = ann.search(query, tenant_id=tenant, k=10)
            agree += [h.chunk_seq for h in via_hnsw] == [h.chunk_seq for h in got]
            assert {h.chunk_seq for h in via_hnsw} == {h.chunk_seq for h in got}
        assert agree >= 18  # same set always; order may differ only between equal halfvec scores
    finally:
        exact.close()
        ann.close()


@pytest.mark.slow
def test_async_tenant_search_both_paths(dsn: str) -> None:
    async def main() -> None:
        for exact_rows in (20_000, 0):
            store = await shardstore.connect_async(
                dsn, embedding_model=HashEmbedder(), vector_exact_rows=exact_rows, **SMALL
            )
            try:
                sid = await store.create_session(f"acme-{exact_rows}")
                await store.append_turns(sid, [filler(i) for i in range(120)])
                await store.flush(sid)
                await store.drain_folds()
                await store.embed()
                hits = await store.search("rye bread", tenant_id=f"acme-{exact_rows}", k=3)
                assert len(hits) == 3 and {h.session_id for h in hits} == {sid}
            finally:
                await store.close()

    asyncio.run(main())


# ------------------------------------------------------------------ upgrade


def _searches(store: shardstore.Store, sids: list[uuid.UUID]) -> list[Any]:
    out: list[Any] = []
    for text in ("weather harbour", "rye bread caraway", "violin metronome"):
        for sid in sids:
            out.append(
                [(h.chunk_seq, round(h.score, 4)) for h in store.search(text, session_id=sid, k=5)]
            )
        for tenant in ("acme", "globex"):
            out.append(
                sorted(
                    (h.session_id, h.chunk_seq) for h in store.search(text, tenant_id=tenant, k=50)
                )
            )
    return out


@pytest.mark.slow
def test_an_upgrade_moves_every_vector_and_keeps_grants_rls_and_registry(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migrations up to the one before, vectors written (RLS on and FORCEd, a tenant role
    and a read-only role granted), then the layout migration: the same rows, the same
    search results, the same registry row, grants and row security, and new chunks
    embedded into the new layout and purged from it."""
    full = migrate.all_migrations()
    cut = next(i for i, m in enumerate(full) if m.name == LAYOUT_MIGRATION)
    monkeypatch.setattr(migrate, "all_migrations", lambda: full[:cut])
    # this code on that schema: a batch calls append_v1 there (append_v2, 0040, is later)
    batch = (
        sql.query("append")
        .replace("append_v2(", "append_v1(")
        .replace("%s), %s, %s)", "%s), %s) CROSS JOIN (SELECT %s::integer) AS unused_keep")
    )
    assert "append_v1(" in batch and "unused_keep" in batch
    monkeypatch.setitem(sql._queries(), "append", batch)
    old = shardstore.connect(empty_dsn, embedding_model=HashEmbedder(), premake=3, **SMALL)
    role = f"ss_vl_{uuid.uuid4().hex[:8]}"
    reader = f"ss_vr_{uuid.uuid4().hex[:8]}"
    registry = (
        "SELECT table_name::text, kind, session_column, turn_column, tenant_column, position,"
        " rls, tenant_grants, note FROM shardstore.table_registry"
        " WHERE table_name = 'shardstore.chunk_vectors'::regclass"
    )
    acl = (
        "SELECT a.grantee::regrole::text, a.privilege_type, a.is_grantable FROM pg_class c,"
        " aclexplode(c.relacl) a WHERE c.oid = 'shardstore.chunk_vectors'::regclass"
        " AND a.grantee <> c.relowner ORDER BY 1, 2"
    )
    try:
        sids = [old.create_session(t, agent_id="bot") for t in ("acme", "acme", "globex")]
        for i, sid in enumerate(sids):
            fill(old, sid, 40, start=i)
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            # what the worker of the range layout did before every batch
            admin.execute("SELECT shardstore.vec_sync_partitions_v1()")
        assert old.embed() > 0
        before = _searches(old, sids)
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            assert _layout(admin)[0] == "r"
            rows_before = sorted(admin.execute(VECTOR_ROWS).fetchall())
            admin.execute(f'CREATE ROLE "{role}" NOLOGIN')
            admin.execute(f'CREATE ROLE "{reader}" NOLOGIN')
            rls.grant_tenant_role(admin, role)
            rls.enable_rls(admin, force=True)
            admin.execute(
                f'GRANT SELECT ON shardstore.chunk_vectors TO "{reader}" WITH GRANT OPTION'
            )
            registry_before = admin.execute(registry).fetchone()
            acl_before = admin.execute(acl).fetchall()
    finally:
        old.close()
    monkeypatch.undo()
    try:
        new = shardstore.connect(empty_dsn, embedding_model=HashEmbedder(), **SMALL)
        try:
            with psycopg.connect(empty_dsn, autocommit=True) as admin:
                assert _layout(admin) == ("h", LEAVES)
                assert sorted(admin.execute(VECTOR_ROWS).fetchall()) == rows_before
                assert len(rows_before) > 100
                assert admin.execute(registry).fetchone() == registry_before
                assert admin.execute(acl).fetchall() == acl_before
                assert (reader, "SELECT", True) in acl_before
                forced = admin.execute(
                    "SELECT bool_and(c.relrowsecurity AND c.relforcerowsecurity), count(*),"
                    " count(*) FILTER (WHERE EXISTS (SELECT 1 FROM pg_policy p"
                    "   WHERE p.polrelid = c.oid AND p.polname = 'tenant_isolation'))"
                    " FROM pg_class c WHERE c.oid IN"
                    " (SELECT relid FROM pg_partition_tree('shardstore.chunk_vectors'))"
                ).fetchone()
                assert forced == (True, LEAVES + 1, LEAVES + 1)
                idx = {
                    r[0]
                    for r in admin.execute(
                        "SELECT indexname FROM pg_indexes WHERE schemaname = 'shardstore'"
                        " AND tablename = 'chunk_vectors'"
                    ).fetchall()
                }
                assert idx == {"chunk_vectors_pkey", "chunk_vectors_tenant", "chunk_vectors_hnsw"}
                # the old daily vector partitions are gone with the old table
                assert admin.execute(
                    "SELECT count(*) FROM pg_class WHERE relname ~ '^chunk_vectors_p[0-9]'"
                ).fetchone() == (0,)
            assert _searches(new, sids) == before
            # the tenant role sees its tenant's vectors only, and can still search
            with psycopg.connect(empty_dsn, autocommit=True) as conn:
                conn.execute(f'SET ROLE "{role}"')
                rls.set_session_tenant(conn, "acme")
                tenant = rls.connect_tenant(conn, embedding_model=HashEmbedder())
                seen = conn.execute(
                    "SELECT DISTINCT tenant_id FROM shardstore.chunk_vectors"
                ).fetchall()
                assert seen == [("acme",)]
                hits = tenant.search("rye bread", tenant_id="acme", k=50)
                assert hits and {h.session_id for h in hits} <= set(sids[:2])
                assert tenant.search("rye bread", tenant_id="globex", k=50) == []
            # chunks written after the upgrade are embedded and found
            fill(new, sids[2], 20, start=500)
            assert new.embed() > 0
            with psycopg.connect(empty_dsn) as conn:
                (queued,) = conn.execute(
                    "SELECT count(*) FROM shardstore.embed_queue"
                ).fetchone() or (None,)
                assert queued == 0
            hits = new.search("rye bread", session_id=sids[2], k=50)
            assert any(t.turn_seq >= 40 for h in hits for t in h.turns)
            # a rewind and a purge still reach the moved vectors
            new.rewind(sids[1], 10)
            new.purge_session(sids[0])
            with psycopg.connect(empty_dsn) as conn:
                left = conn.execute(
                    "SELECT count(*) FILTER (WHERE session_id = %s),"
                    " count(*) FILTER (WHERE session_id = %s AND first_turn_seq >= 10)"
                    " FROM shardstore.chunk_vectors",
                    (sids[0], sids[1]),
                ).fetchone()
                assert left == (0, 0)
        finally:
            new.close()
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            for name in (role, reader):
                admin.execute(f'DROP OWNED BY "{name}"')
                admin.execute(f'DROP ROLE "{name}"')
