"""Tenant isolation with Row-Level Security (docs/security.md).

The test server connects as a superuser, which bypasses row security; every check here runs
as a non-superuser tenant role (SET ROLE on a superuser connection)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.schema import rls

TABLES = ("sessions", "turn_buffer", "agent_history", "chunk_map", "turn_keys")


@dataclass
class World:
    dsn: str
    role: str
    acme: uuid.UUID
    other: uuid.UUID
    owner: shardstore.Store


def _snapshot(dsn: str) -> dict[str, Any]:
    """Every row of every session table, as the superuser sees them."""
    with psycopg.connect(dsn) as conn:
        return {
            t: conn.execute(
                f"SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), ''))"
                f" FROM shardstore.{t} x"
            ).fetchone()
            for t in TABLES
        }


def _partitions(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'shardstore.agent_history'::regclass ORDER BY 1"
        ).fetchall()
    return [r[0] for r in rows]


def _fill(store: shardstore.Store, sid: uuid.UUID, text: str) -> None:
    # enough turns to seal and fold chunks: rows in every table
    for i in range(40):
        store.append_turn(
            sid,
            {"role": "user", "content": f"{text} {i} " + "w " * 400},
            idempotency_key=f"{text}-{i}",
        )
    store.drain_folds()


@pytest.fixture
def world(dsn: str) -> Iterator[World]:
    owner = shardstore.connect(dsn, chunk_tokens=2000)
    acme = owner.create_session("acme", "user:1", "bot", metadata={"t": "acme"})
    other = owner.create_session("globex", "user:1", "bot", metadata={"t": "globex"})
    _fill(owner, acme, "acme")
    _fill(owner, other, "globex")
    role = f"ss_tenant_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" NOLOGIN')
        rls.grant_tenant_role(admin, role)
        rls.enable_rls(admin)
    try:
        yield World(dsn, role, acme, other, owner)
    finally:
        owner.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def _tenant_conn(w: World, tenant: str | None) -> psycopg.Connection[Any]:
    conn = psycopg.connect(w.dsn, autocommit=True)
    conn.execute(f'SET ROLE "{w.role}"')
    if tenant is not None:
        rls.set_session_tenant(conn, tenant)
    return conn


def test_rls_is_off_by_default_and_switches(store: shardstore.Store, dsn: str) -> None:
    assert _partitions(dsn)  # connect() premade some
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert not rls.rls_enabled(admin)
        covered = rls.enable_rls(admin)
        assert "shardstore.sessions" in covered and "shardstore.agent_history" in covered
        assert any(t.startswith("shardstore.agent_history_p") for t in covered)
        assert rls.rls_enabled(admin)
        assert rls.enable_rls(admin) == covered  # idempotent
        rls.disable_rls(admin)
        assert not rls.rls_enabled(admin)


def test_raw_sql_sees_only_its_tenant(world: World) -> None:
    with _tenant_conn(world, "acme") as conn:
        tenants = conn.execute("SELECT DISTINCT tenant_id FROM shardstore.sessions").fetchall()
        assert tenants == [("acme",)]
        for table in TABLES:
            ids = {r[0] for r in conn.execute(f"SELECT session_id FROM shardstore.{table}")}
            assert ids == {world.acme}, table
        # the other tenant's rows, asked for by id: nothing
        for table in TABLES:
            (n,) = conn.execute(
                f"SELECT count(*) FROM shardstore.{table} WHERE session_id = %s", (world.other,)
            ).fetchone() or (None,)
            assert n == 0, table


def test_no_tenant_set_sees_nothing(world: World) -> None:
    for setting in (None, ""):
        with _tenant_conn(world, None) as conn:
            if setting is not None:
                conn.execute("SET shardstore.tenant_id = ''")
            for table in TABLES:
                (n,) = conn.execute(f"SELECT count(*) FROM shardstore.{table}").fetchone() or (1,)
                assert n == 0, table
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO shardstore.sessions (session_id, tenant_id) VALUES (%s, 'acme')",
                    (uuid.uuid4(),),
                )


def test_raw_writes_cannot_touch_another_tenant(world: World) -> None:
    before = _snapshot(world.dsn)
    with _tenant_conn(world, "acme") as conn:
        for table in TABLES:
            cur = conn.execute(
                f"DELETE FROM shardstore.{table} WHERE session_id = %s", (world.other,)
            )
            assert cur.rowcount == 0
        cur = conn.execute(
            "UPDATE shardstore.sessions SET metadata = '{}' WHERE tenant_id <> 'acme'"
        )
        assert cur.rowcount == 0
        # moving one's own session to another tenant, or writing rows into theirs: refused
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "UPDATE shardstore.sessions SET tenant_id = 'globex' WHERE session_id = %s",
                (world.acme,),
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO shardstore.turn_keys VALUES (%s, 'x', 999, 0, 1, now())",
                (world.other,),
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("TRUNCATE shardstore.turn_buffer")
    assert _snapshot(world.dsn) == before


def test_direct_partition_access_is_refused(world: World) -> None:
    parts = _partitions(world.dsn)
    assert parts
    with psycopg.connect(world.dsn, autocommit=True) as admin:  # a partition made after enable
        admin.execute("SELECT shardstore.ensure_partition_v1(now() + interval '400 days')")
    new_parts = _partitions(world.dsn)
    assert len(new_parts) == len(parts) + 1
    with _tenant_conn(world, "acme") as conn:
        for part in new_parts:
            for sql in (
                f"SELECT * FROM shardstore.{part}",
                f"DELETE FROM shardstore.{part}",
                f"UPDATE shardstore.{part} SET turn_count = 0",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE shardstore.agent_history_evil (x int)")
        # through the parent, only acme's chunks
        ids = {r[0] for r in conn.execute("SELECT session_id FROM shardstore.agent_history")}
        assert ids == {world.acme}


def test_partitions_have_row_security_too(world: World) -> None:
    """Defence in depth: a partition someone granted by hand still filters rows."""
    part = _partitions(world.dsn)[0]
    with psycopg.connect(world.dsn, autocommit=True) as admin:
        admin.execute(f'GRANT SELECT ON shardstore.{part} TO "{world.role}"')
    with _tenant_conn(world, "acme") as conn:
        ids = {r[0] for r in conn.execute(f"SELECT session_id FROM shardstore.{part}")}
        assert ids <= {world.acme}
    with psycopg.connect(world.dsn) as admin:
        all_ids = {r[0] for r in admin.execute(f"SELECT session_id FROM shardstore.{part}")}
    assert world.other in all_ids


def _scoped(w: World, named: bool, **settings: Any) -> tuple[Any, shardstore.Store]:
    """A connection of the tenant role and a store on it scoped to acme: by the tenant the
    connection's session setting names when the store is made, or (named) by
    ``tenant="acme"`` on a connection set to no tenant at all. Either way the store binds
    acme in each of its transactions."""
    if not named:
        conn = _tenant_conn(w, "acme")
        return conn, rls.connect_tenant(conn, **settings)
    conn = _tenant_conn(w, None)
    return conn, rls.connect_tenant(conn, tenant="acme", **settings)


def _unscoped_after(conn: psycopg.Connection[Any]) -> None:
    """The per-transaction binding left nothing on the connection: no tenant, nothing seen."""
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert rls.current_tenant(conn) is None
    assert conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone() == (0,)


@pytest.mark.slow
@pytest.mark.parametrize("named", [False, True], ids=["setting", "named"])
def test_store_api_is_scoped(world: World, named: bool) -> None:
    before = _snapshot(world.dsn)
    conn, store = _scoped(world, named)
    with conn:
        assert len(store.tail(world.acme, n=5)) == 5
        assert len(list(store.history(world.acme))) == 40
        assert store.session(world.acme).tenant_id == "acme"
        other = world.other
        attempts: dict[str, Callable[[], Any]] = {
            "tail": lambda: store.tail(other),
            "history": lambda: list(store.history(other)),
            "chunks": lambda: store.chunks(other),
            "session": lambda: store.session(other),
            "append": lambda: store.append_turn(other, {"role": "user", "content": "x"}),
            "append_turns": lambda: store.append_turns(other, [{"role": "user"}] * 2),
            "flush": lambda: store.flush(other),
            "purge_session": lambda: store.purge_session(other),
            "purge_session_dry": lambda: store.purge_session(other, dry_run=True),
            "purge_range": lambda: store.purge_range(other, 10),
        }
        for name, call in attempts.items():
            with pytest.raises(shardstore.SessionNotFound):
                call()
            assert _snapshot(world.dsn) == before, name
        # whole-tenant and subject purges of another tenant find nothing
        assert store.purge_tenant("globex").sessions_affected == 0
        assert store.purge_subject("globex", "user:1").sessions_affected == 0
        assert store.stats().sessions == 1
        # creating a session for another tenant is refused
        with pytest.raises(shardstore.ShardstoreError):
            store.create_session("globex")
        assert _snapshot(world.dsn) == before
        # the own tenant works end to end, purges included
        sid = store.create_session("acme")
        store.append_turns(sid, [{"role": "user", "content": "hi"}] * 3)
        assert [t.turn_seq for t in store.tail(sid)] == [0, 1, 2]
        assert store.purge_subject("acme", "user:1").sessions_affected == 1
        with pytest.raises(shardstore.SessionPurged):
            store.tail(world.acme)
        if named:
            _unscoped_after(conn)
    # globex untouched by all of it
    assert world.owner.session(world.other).turn_count == 40
    assert len(list(world.owner.history(world.other))) == 40


def test_bound_role_cannot_switch_tenant(world: World) -> None:
    with psycopg.connect(world.dsn, autocommit=True) as admin:
        rls.grant_tenant_role(admin, world.role, tenant="acme")
    with _tenant_conn(world, "globex") as conn:  # asks for globex: the binding wins
        assert rls.current_tenant(conn) == "acme"
        ids = {r[0] for r in conn.execute("SELECT session_id FROM shardstore.sessions")}
        assert ids == {world.acme}
        conn.execute("RESET shardstore.tenant_id")
        assert rls.current_tenant(conn) == "acme"
        # and cannot rewrite its binding or turn row security off
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM shardstore.rls_role_tenants")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT shardstore.disable_rls_v2()")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("ALTER TABLE shardstore.sessions DISABLE ROW LEVEL SECURITY")


def test_unbound_role_follows_the_setting(world: World) -> None:
    """Without a binding the tenant is whatever the connection SETs: the application must
    keep raw SQL from untrusted code off the connection (docs/security.md)."""
    with _tenant_conn(world, "globex") as conn:
        ids = {r[0] for r in conn.execute("SELECT session_id FROM shardstore.sessions")}
        assert ids == {world.other}


def test_owner_is_unaffected_unless_forced(world: World) -> None:
    assert len(world.owner.tail(world.other, n=3)) == 3
    assert world.owner.stats().sessions == 2


def test_disable_restores_full_access(world: World) -> None:
    with psycopg.connect(world.dsn, autocommit=True) as admin:
        rls.disable_rls(admin)
    with _tenant_conn(world, "acme") as conn:
        (n,) = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone() or (0,)
        assert n == 2


def test_connect_works_for_a_role_without_ddl_rights(world: World) -> None:
    with _tenant_conn(world, "acme") as conn:
        store = shardstore.connect(conn)
        assert store.connector.prologue is not None  # bound per transaction all the same
        assert store.session(world.acme).tenant_id == "acme"


@pytest.mark.slow
@pytest.mark.parametrize("named", [False, True], ids=["setting", "named"])
def test_search_and_vectors_are_scoped(world: World, named: bool) -> None:
    from tests.embedders import HashEmbedder

    owner = shardstore.connect(world.dsn, embedding_model=HashEmbedder())
    try:
        assert owner.embed() > 0
    finally:
        owner.close()
    conn, store = _scoped(world, named, embedding_model=HashEmbedder())
    with conn:
        mine = store.search("acme 7", tenant_id="acme", k=50)
        assert mine and {h.session_id for h in mine} == {world.acme}
        # another tenant's vectors are invisible, whatever the call names
        assert store.search("globex 7", tenant_id="globex", k=50) == []
        assert store.search("globex 7", session_id=world.other, k=50) == []
        if named:  # the raw statements below run with the tenant set
            _unscoped_after(conn)
            rls.set_session_tenant(conn, "acme")
        rows = conn.execute("SELECT DISTINCT tenant_id FROM shardstore.chunk_vectors").fetchall()
        assert rows == [("acme",)]
        queued = conn.execute("SELECT DISTINCT session_id FROM shardstore.embed_queue").fetchall()
        assert set(queued) <= {(world.acme,)}
        # the model record and the partitioning are global: read, never changed by a tenant
        for sql in (
            "DELETE FROM shardstore.embedding_config",
            "UPDATE shardstore.embedding_config SET model = 'other'",
            "UPDATE shardstore.config SET partition_interval = interval '1 hour'",
            "DELETE FROM shardstore.config",
            "INSERT INTO shardstore.config (partition_interval) VALUES (interval '1 day')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)


def test_per_transaction_binding_is_transaction_local(world: World) -> None:
    """The binding is SET LOCAL in each transaction the store runs: nothing stays on the
    connection after a call (also after a failed one), a caller's transaction is bound for
    its rest, and a connection outside autocommit is bound in every transaction it begins."""
    with _tenant_conn(world, None) as conn:
        store = rls.connect_tenant(conn, tenant="acme")
        assert len(store.tail(world.acme, n=3)) == 3
        _unscoped_after(conn)
        with pytest.raises(shardstore.SessionNotFound):
            store.append_turn(world.other, {"role": "user", "content": "x"})
        _unscoped_after(conn)
        with conn.transaction():  # the caller's transaction: bound from the call on
            assert store.session(world.acme).turn_count == 40
            assert rls.current_tenant(conn) == "acme"
            ids = {r[0] for r in conn.execute("SELECT session_id FROM shardstore.sessions")}
            assert ids == {world.acme}
        _unscoped_after(conn)
        # the connection's own setting is left alone and does not decide for the store
        rls.set_session_tenant(conn, "globex")
        assert len(store.tail(world.acme, n=2)) == 2
        with pytest.raises(shardstore.SessionNotFound):
            store.tail(world.other)
        assert rls.current_tenant(conn) == "globex"
    with psycopg.connect(world.dsn) as conn:  # not autocommit: each commit ends the binding
        conn.execute(f'SET ROLE "{world.role}"')
        conn.commit()
        store = rls.connect_tenant(conn, tenant="acme")
        conn.commit()
        for n in (1, 2):
            assert len(store.tail(world.acme, n=n)) == n
            conn.commit()
            assert rls.current_tenant(conn) is None


def test_tenant_is_bound_per_transaction_by_default(world: World) -> None:
    """Plain PostgreSQL too: connect_tenant() binds its tenant in every transaction (the
    setting a connection names when the store is made, or tenant=), and sets nothing on
    the connection."""
    with _tenant_conn(world, "acme") as conn:
        store = rls.connect_tenant(conn)
        assert store.connector.prologue is not None
        rls.set_session_tenant(conn, "globex")  # too late: the store is acme's
        assert store.session(world.acme).tenant_id == "acme"
        with pytest.raises(shardstore.SessionNotFound):
            store.session(world.other)
    with _tenant_conn(world, None) as conn:
        store = rls.connect_tenant(conn, tenant="globex")
        assert store.connector.prologue is not None
        assert rls.current_tenant(conn) is None
        assert store.session(world.other).tenant_id == "globex"
        with pytest.raises(shardstore.SessionNotFound):
            store.session(world.acme)
        assert rls.current_tenant(conn) is None


def test_connect_tenant_needs_a_tenant(world: World) -> None:
    """A role bound to no tenant and a source that names none: refused, not a store that
    silently sees nothing."""
    with (
        _tenant_conn(world, None) as conn,
        pytest.raises(shardstore.ConfigurationError, match="needs a tenant"),
    ):
        rls.connect_tenant(conn)
    with psycopg.connect(world.dsn, autocommit=True) as admin:
        rls.grant_tenant_role(admin, world.role, tenant="acme")
    with _tenant_conn(world, None) as conn:  # the role's binding decides: nothing to bind
        store = rls.connect_tenant(conn)
        assert store.connector.prologue is None
        assert store.session(world.acme).tenant_id == "acme"


def test_tenant_connection_sets_nothing_on_the_server(world: World) -> None:
    """tenant_connection() carries its tenant on the client: the server connection has no
    tenant set (a pooler may hand it to anyone next), and a store made from it by
    connect_tenant() or connect() binds the tenant per transaction."""
    with psycopg.connect(world.dsn, autocommit=True) as admin:
        admin.execute(f'GRANT "{world.role}" TO CURRENT_USER')
    with rls.tenant_connection(world.dsn, "acme") as conn:
        conn.execute(f'SET ROLE "{world.role}"')
        assert conn.tenant_id == "acme"
        assert rls.current_tenant(conn) is None
        for make in (rls.connect_tenant, shardstore.connect):
            store = make(conn)
            assert store.session(world.acme).tenant_id == "acme"
            with pytest.raises(shardstore.SessionNotFound):
                store.session(world.other)
            _unscoped_after(conn)


def test_dsn_options_tenant_is_bound_per_transaction(world: World) -> None:
    """A DSN that sets the tenant (options=-c shardstore.tenant_id=...): the store binds it
    per transaction from the DSN, so it holds where the pooler drops startup options."""
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(world.dsn, autocommit=True) as admin:
        admin.execute(f'ALTER ROLE "{world.role}" LOGIN')
    dsn = make_conninfo(
        world.dsn, user=world.role, password=None, options="-c shardstore.tenant_id=globex"
    )
    store = rls.connect_tenant(dsn, pool_min_size=1, pool_max_size=2)
    try:
        assert store.connector.tenant == "globex"
        assert store.session(world.other).tenant_id == "globex"
        with pytest.raises(shardstore.SessionNotFound):
            store.session(world.acme)
    finally:
        store.close()


def test_connect_tenant_rejects_bad_bindings(world: World) -> None:
    before = _snapshot(world.dsn)
    with _tenant_conn(world, None) as conn:
        for kwargs in (
            {"tenant": ""},
            {"tenant": 7},
            {"tenant": "a\x00b"},
        ):
            with pytest.raises(shardstore.InvalidInput):
                rls.connect_tenant(conn, **kwargs)
        assert rls.current_tenant(conn) is None
    with pytest.raises(shardstore.ConfigurationError):
        rls.connect_tenant(object())
    assert _snapshot(world.dsn) == before


def test_async_tenant_store_per_transaction(world: World) -> None:
    async def go() -> None:
        conn = await psycopg.AsyncConnection.connect(world.dsn, autocommit=True)
        try:
            await conn.execute(f'SET ROLE "{world.role}"')
            store = await rls.connect_tenant_async(conn, tenant="acme")
            assert [t.turn_seq for t in await store.tail(world.acme, n=2)] == [38, 39]
            assert (await store.append_turn(world.acme, {"role": "user"})).turn_seq == 40
            with pytest.raises(shardstore.SessionNotFound):
                await store.tail(world.other)
            turns = [t async for t in store.history(world.acme)]
            assert len(turns) == 41
            cur = await conn.execute("SELECT count(*) FROM shardstore.sessions")
            assert await cur.fetchone() == (0,)  # nothing left on the connection
            with pytest.raises(shardstore.ConfigurationError):
                await rls.connect_tenant_async(object())  # type: ignore[arg-type]
        finally:
            await conn.close()

    asyncio.run(go())
    assert world.owner.session(world.acme).turn_count == 41
    assert world.owner.session(world.other).turn_count == 40
