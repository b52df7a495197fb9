"""The registry of session-scoped tables: every table with a session column
is registered, and a table registered with one call is covered by every purge, by
retention and by Row-Level Security without any other change."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.schema import rls
from tests.purge_support import append_unfolded, converse, next_second, snapshot
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

# default_tail_turns=1: folds keep no sealed chunk in the buffer (the keep rule), so every
# sealed chunk of these short conversations is in agent_history (and chunk_map) once the folds ran
SMALL = {"chunk_tokens": 200, "partition_interval": timedelta(seconds=1), "default_tail_turns": 1}
# the tables the tests register: turn-level with its own tenant column (a policy without
# subquery), chunk-level partitioned like agent_history (a policy that looks the session
# up), session-level
FACTS = "shardstore.test_facts"
NOTES = "shardstore.test_chunk_notes"
RUNS = "shardstore.test_runs"
TEST_TABLES = (FACTS, NOTES, RUNS)

UNREGISTERED = """
SELECT c.oid::regclass::text
  FROM pg_class c
 WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind IN ('r', 'p')
   AND NOT c.relispartition
   AND EXISTS (SELECT 1 FROM pg_attribute a
                WHERE a.attrelid = c.oid AND a.attname = 'session_id' AND NOT a.attisdropped)
   AND c.oid NOT IN (SELECT r_table FROM shardstore.rls_partition_tables())
   AND c.oid NOT IN (SELECT table_name FROM shardstore.table_registry WHERE kind = 'session')
 ORDER BY 1
"""


def _unregistered(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(UNREGISTERED)]


def _register(conn: psycopg.Connection[Any]) -> None:
    """Create the test tables and register each with the one call a migration makes."""
    conn.execute(
        "CREATE TABLE shardstore.test_facts (session_id uuid NOT NULL, turn_seq bigint NOT NULL,"
        " tenant_id text NOT NULL, fact text, PRIMARY KEY (session_id, turn_seq))"
    )
    conn.execute(
        "CREATE TABLE shardstore.test_chunk_notes (session_id uuid NOT NULL,"
        " chunk_seq bigint NOT NULL, chunk_start timestamptz NOT NULL, note text,"
        " PRIMARY KEY (session_id, chunk_seq, chunk_start)) PARTITION BY RANGE (chunk_start)"
    )
    conn.execute(
        "CREATE TABLE shardstore.test_chunk_notes_p20000101t000000"
        " PARTITION OF shardstore.test_chunk_notes FOR VALUES FROM (MINVALUE) TO (MAXVALUE)"
    )
    conn.execute("CREATE TABLE shardstore.test_runs (session_id uuid NOT NULL, state text)")
    conn.execute(
        "SELECT shardstore.register_session_table_v2('shardstore.test_facts',"
        " turn_column => 'turn_seq', tenant_column => 'tenant_id')"
    )
    conn.execute(
        "SELECT shardstore.register_session_table_v2('shardstore.test_chunk_notes',"
        " chunk_column => 'chunk_seq', chunk_start_column => 'chunk_start')"
    )
    conn.execute("SELECT shardstore.register_session_table_v2('shardstore.test_runs')")


def _write(dsn: str, store: shardstore.Store, sid: uuid.UUID, text: str = "x") -> None:
    """Registered rows for every turn and every folded chunk (like vectors: a chunk-level
    row belongs to a chunk of agent_history) the session has now, and a run row."""
    session = store.session(sid)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO shardstore.test_facts SELECT %s, g, %s, %s || ' fact ' || g"
            " FROM generate_series(0, %s - 1) g ON CONFLICT DO NOTHING",
            (sid, session.tenant_id, text, session.turn_count),
        )
        conn.execute(
            "INSERT INTO shardstore.test_chunk_notes"
            " SELECT session_id, chunk_seq, chunk_start, %s || ' note ' || chunk_seq"
            " FROM shardstore.chunk_map WHERE session_id = %s ON CONFLICT DO NOTHING",
            (text, sid),
        )
        conn.execute("INSERT INTO shardstore.test_runs VALUES (%s, %s)", (sid, f"{text} run"))


def _rows(dsn: str, sid: uuid.UUID) -> dict[str, list[tuple[Any, ...]]]:
    """The session's rows in the test tables: turn_seqs, chunk_seqs, run states."""
    with psycopg.connect(dsn) as conn:
        return {
            FACTS: conn.execute(
                "SELECT turn_seq FROM shardstore.test_facts WHERE session_id = %s ORDER BY 1",
                (sid,),
            ).fetchall(),
            NOTES: conn.execute(
                "SELECT chunk_seq FROM shardstore.test_chunk_notes WHERE session_id = %s"
                " ORDER BY 1",
                (sid,),
            ).fetchall(),
            RUNS: conn.execute(
                "SELECT state FROM shardstore.test_runs WHERE session_id = %s", (sid,)
            ).fetchall(),
        }


@pytest.fixture
def registered(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _register(conn)
    return dsn


# ---------------------------------------------------------------- coverage


@pytest.mark.slow
def test_every_table_with_a_session_id_is_registered(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme", "user:1")
    converse(store, sid, "COVER", 20)
    store.drain_folds()
    store.maintain()  # partitions of agent_history and chunk_vectors
    assert _unregistered(dsn) == []
    with psycopg.connect(dsn) as conn:
        # every session table has its policy and a NOT NULL session column (or one the
        # registry records as NULLable, with a tenant column: facts without a source)
        rows = conn.execute(
            "SELECT r.table_name::text, EXISTS (SELECT 1 FROM pg_policy p"
            "   WHERE p.polrelid = r.table_name AND p.polname = 'tenant_isolation'),"
            "  (SELECT a.attnotnull OR (r.session_nullable AND r.tenant_column IS NOT NULL)"
            "   FROM pg_attribute a"
            "   WHERE a.attrelid = r.table_name AND a.attname = r.session_column)"
            "  FROM shardstore.table_registry r WHERE r.kind = 'session' ORDER BY 1"
        ).fetchall()
        assert {r[0] for r in rows} >= {
            "shardstore.sessions",
            "shardstore.turn_buffer",
            "shardstore.agent_history",
            "shardstore.chunk_map",
            "shardstore.turn_keys",
            "shardstore.chunk_vectors",
            "shardstore.embed_queue",
        }
        assert [r for r in rows if not (r[1] and r[2])] == []
        # no SQL function lists the tables it covers
        listing = conn.execute(
            "SELECT p.proname FROM pg_proc p"
            " WHERE p.pronamespace = 'shardstore'::regnamespace"
            "   AND p.prosrc ~ 'ARRAY\\[''shardstore\\.'"
        ).fetchall()
        assert listing == []
    # the check above does catch a table that was not registered
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE shardstore.test_forgotten (session_id uuid NOT NULL, x text)")
    assert _unregistered(dsn) == ["shardstore.test_forgotten"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT shardstore.register_session_table_v2('shardstore.test_forgotten')")
    assert _unregistered(dsn) == []


def test_registration_checks_its_arguments(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE shardstore.test_bad (session_id uuid, sid uuid NOT NULL,"
            " turn_seq text, chunk_seq bigint)"
        )
        for call, message in (
            ("'shardstore.test_bad'", "must be NOT NULL"),
            ("'shardstore.test_bad', 'nope'", "has no column"),
            ("'shardstore.test_bad', 'sid', turn_column => 'turn_seq'", "is text, not bigint"),
            (
                "'shardstore.test_bad', 'sid',"
                " turn_column => 'chunk_seq', chunk_column => 'chunk_seq'",
                "not both",
            ),
            ("'shardstore.test_bad', 'sid', chunk_start_column => 'sid'", "needs chunk_column"),
            ("'shardstore.agent_history_p20000101t000000'", "does not exist"),
        ):
            with pytest.raises(psycopg.Error, match=message):
                conn.execute(f"SELECT shardstore.register_session_table_v2({call})")
        conn.execute("SELECT shardstore.register_session_table_v2('shardstore.test_bad', 'sid')")
        (n,) = conn.execute(
            "SELECT count(*) FROM shardstore.purge_targets"
            " WHERE table_name = 'shardstore.test_bad'::regclass AND session_column = 'sid'"
        ).fetchone() or (0,)
        assert n == 1


# ---------------------------------------------------------------- purges


@pytest.mark.slow
def test_purge_session_and_range_cover_a_registered_table(
    make_store: Callable[..., shardstore.Store], registered: str
) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme", "user:1")
    other = store.create_session("acme", "user:2")
    for s, marker in ((sid, "MINE"), (other, "THEIRS")):
        converse(store, s, marker, 30)
        store.drain_folds()
        _write(registered, store, s)
    theirs = _rows(registered, other)
    chunks = store.chunks(sid)
    assert len(chunks) >= 3 and not chunks[1].is_open
    cut = chunks[1].first_turn_seq + 1  # chunk 0 deleted, chunk 1 rewritten

    report = store.purge_range(sid, before_turn_seq=cut)

    assert report.tables[FACTS].rows == cut
    assert report.tables[NOTES].rows == 2
    assert report.tables[RUNS].rows == 0  # session-level: a range purge keeps it
    left = _rows(registered, sid)
    assert left[FACTS] == [(s,) for s in range(cut, 30)]
    assert left[NOTES] == [(c.chunk_seq,) for c in chunks[2:] if not c.is_open]
    assert left[RUNS] == [("x run",)]

    whole = store.purge_session(sid)

    assert whole.tables[FACTS].rows == 30 - cut
    assert whole.tables[RUNS].rows == 1
    assert _rows(registered, sid) == {FACTS: [], NOTES: [], RUNS: []}
    assert _rows(registered, other) == theirs


@pytest.mark.slow
def test_purge_before_covers_a_registered_table(
    make_store: Callable[..., shardstore.Store], registered: str
) -> None:
    store = make_store(**SMALL)
    old = store.create_session("acme", "user:old")
    both = store.create_session("acme", "user:both")
    next_second()
    converse(store, old, "OLDONLY", 8)
    converse(store, both, "BOTHOLD", 8)
    store.drain_folds()
    next_second()
    converse(store, both, "BOTHNEW", 6, start=8)
    store.drain_folds()
    for s in (old, both):
        _write(registered, store, s)
    full = snapshot(store, both)
    cutoff = full[8][3]  # the first turn of the newer second
    kept_chunks = [
        c.chunk_seq for c in store.chunks(both) if c.chunk_start >= cutoff and not c.is_open
    ]

    report = store.purge_before(cutoff)

    assert report.tables[FACTS].rows == 8 + 8
    assert _rows(registered, old)[FACTS] == []
    assert _rows(registered, old)[NOTES] == []
    assert _rows(registered, both)[FACTS] == [(s,) for s in range(8, 14)]
    assert _rows(registered, both)[NOTES] == [(c,) for c in kept_chunks]
    with psycopg.connect(registered) as conn:
        (old_notes,) = conn.execute(
            "SELECT count(*) FROM shardstore.test_chunk_notes WHERE chunk_start < %s", (cutoff,)
        ).fetchone() or (1,)
    assert old_notes == 0
    # retention is not a tombstone: session-level rows stay
    assert _rows(registered, old)[RUNS] == [("x run",)]


@pytest.mark.slow
def test_maintenance_retention_covers_a_registered_table(
    make_store: Callable[..., shardstore.Store], registered: str
) -> None:
    store = make_store(partition_interval=timedelta(seconds=1), premake=2)
    old = store.create_session("acme", "user:old")
    mixed = store.create_session("acme", "user:mixed")
    next_second()
    store.append_turn(old, {"role": "user", "content": "old"}, idempotency_key="o-1")
    store.flush(old)
    store.append_turn(mixed, {"role": "user", "content": "mixed old folded"}, "m-1")
    store.flush(mixed)
    time.sleep(0.5)
    store.append_turn(mixed, {"role": "user", "content": "stuck"}, "m-2")  # stays buffered
    for s in (old, mixed):
        _write(registered, store, s)
    time.sleep(3.2)
    # seals the chunk holding "stuck" without folding it (as if the process died)
    append_unfolded(store, mixed, {"role": "user", "content": "recent"}, "m-3")
    _write(registered, store, mixed, "recent")
    assert _rows(registered, mixed)[NOTES] == [(0,)]
    assert _rows(registered, mixed)[FACTS] == [(0,), (1,), (2,)]

    report = store.maintain(retention=timedelta(seconds=2))

    assert report.errors == []
    assert report.sessions_expired == 1
    assert report.buffered_turns_expired == 1
    assert report.partitions_dropped
    # the expired session: everything; the live one: the rows of its expired turns (turn 0
    # in a dropped partition, turn 1 an expired buffered turn) and of its dropped chunk 0
    assert _rows(registered, old) == {FACTS: [], NOTES: [], RUNS: []}
    left = _rows(registered, mixed)
    assert left[FACTS] == [(2,)]
    assert left[NOTES] == []
    assert left[RUNS] == [("x run",), ("recent run",)]


@pytest.mark.slow
def test_in_database_maintenance_covers_a_registered_table(
    make_store: Callable[..., shardstore.Store], registered: str
) -> None:
    """CALL shardstore.run_maintenance() (pg_cron) calls the v1 names: they do what v2 does."""
    store = make_store(partition_interval=timedelta(seconds=1), premake=2)
    sid = store.create_session("acme", "user:1")
    next_second()
    store.append_turn(sid, {"role": "user", "content": "old"})
    store.flush(sid)
    _write(registered, store, sid)
    time.sleep(2.5)
    store.append_turn(sid, {"role": "user", "content": "new"})
    _write(registered, store, sid, "new")
    assert _rows(registered, sid)[NOTES] == [(0,)]
    with psycopg.connect(registered, autocommit=True) as conn:
        conn.execute("CALL shardstore.run_maintenance(p_retention => interval '1 second')")
    left = _rows(registered, sid)
    assert left[FACTS] == [(1,)]
    assert left[NOTES] == []


# ---------------------------------------------------------------- row-level security


@pytest.fixture
def ungranted_role(dsn: str) -> Iterator[str]:
    """A role without grants: each test grants and enables RLS in the order it checks."""
    role = make_tenant_role(dsn, grant=False)
    try:
        yield role
    finally:
        drop_tenant_role(dsn, role)


def _visible(conn: psycopg.Connection[Any], table: str) -> set[uuid.UUID]:
    return {r[0] for r in conn.execute(f"SELECT session_id FROM {table}")}


@pytest.mark.parametrize("order", ["registered_before_enable", "registered_after_enable"])
def test_rls_covers_a_registered_table(
    make_store: Callable[..., shardstore.Store], dsn: str, ungranted_role: str, order: str
) -> None:
    store = make_store(chunk_tokens=200, default_tail_turns=1)  # folded chunks: see SMALL
    acme = store.create_session("acme", "user:1")
    globex = store.create_session("globex", "user:1")
    for s, marker in ((acme, "ACME"), (globex, "GLOBEX")):
        converse(store, s, marker, 20)
        store.drain_folds()
    with psycopg.connect(dsn, autocommit=True) as admin:
        if order == "registered_before_enable":
            _register(admin)
        rls.grant_tenant_role(admin, ungranted_role)
        rls.enable_rls(admin)
        if order == "registered_after_enable":
            # one call, no re-run of enable_rls or grant_tenant_role
            _register(admin)
        assert rls.rls_enabled(admin)
    for s in (acme, globex):
        _write(dsn, store, s)
    with as_tenant(dsn, ungranted_role, "acme") as conn:
        for table in TEST_TABLES:
            assert _visible(conn, table) == {acme}, table
            cur = conn.execute(f"DELETE FROM {table} WHERE session_id = %s", (globex,))
            assert cur.rowcount == 0, table
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO shardstore.test_facts VALUES (%s, 999, 'globex', 'x')", (globex,)
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            # a row for another tenant's session: the policy looks the session up
            conn.execute(
                "INSERT INTO shardstore.test_chunk_notes VALUES (%s, 999, now(), 'x')", (globex,)
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            # a row of another tenant: the policy compares the tenant column
            conn.execute(
                "INSERT INTO shardstore.test_facts VALUES (%s, 999, 'globex', 'x')", (acme,)
            )
        # the store API of a tenant purges the registered rows of its own sessions only
        tenant_store = rls.connect_tenant(conn)
        report = tenant_store.purge_session(acme)
        assert report.tables[FACTS].rows == 20
        with pytest.raises(shardstore.SessionNotFound):
            tenant_store.purge_session(globex)
    assert _rows(dsn, acme) == {FACTS: [], NOTES: [], RUNS: []}
    assert len(_rows(dsn, globex)[FACTS]) == 20
    with psycopg.connect(dsn, autocommit=True) as admin:
        covered = rls.disable_rls(admin)
        assert set(TEST_TABLES) <= set(covered)
        assert "shardstore.test_chunk_notes_p20000101t000000" in covered
        assert not rls.rls_enabled(admin)
    with as_tenant(dsn, ungranted_role, "acme") as conn:
        assert _visible(conn, FACTS) == {globex}
