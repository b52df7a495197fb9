"""Behind a real PgBouncer in transaction mode (tests/pgbouncer.py): tenants stay apart through
one shared unbound role, and the public API, the framework adapters, maintenance, purges
and search work with no call failing because of the pooler (docs/pooling.md)."""

from __future__ import annotations

import asyncio
import io
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.core.connector import behind_pooler
from shardstore.schema import rls
from tests.embedders import HashEmbedder
from tests.pgbouncer import POOL_SIZE, Pooler

TENANTS = ("acme", "beta")
THREADS_PER_TENANT = 4
ROUNDS = 30  # per thread, each round four store calls: hundreds of interleaved transactions


def test_the_pooler_is_in_front(pgbouncer: Pooler, dsn: str, pooled_dsn: str) -> None:
    """The fixture really puts a pooler in front, and the store finds it."""
    with psycopg.connect(pooled_dsn, autocommit=True) as conn:
        assert behind_pooler(conn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert not behind_pooler(conn)
    with shardstore.connect(pooled_dsn) as store:
        assert store.connector.pooler is True


def _tenant_store(dsn: str, tenant: str, how: int) -> tuple[shardstore.Store, Any]:
    """A tenant's store made each way the docs show: a DSN and tenant=, a tenant
    connection, a DSN that names the tenant in its options."""
    if how == 0:
        return rls.connect_tenant(dsn, tenant=tenant, pool_min_size=1, pool_max_size=2), None
    if how == 1:
        holder = rls.tenant_connection(dsn, tenant)
        conn = holder.__enter__()
        return rls.connect_tenant(conn), holder
    named = f"{dsn} options='-c shardstore.tenant_id={tenant}'"
    return shardstore.connect(named, pool_min_size=1, pool_max_size=2), None


@pytest.mark.slow
def test_tenants_stay_apart_through_one_shared_role(
    pgbouncer: Pooler, dsn: str, shared_role: str
) -> None:
    """Two tenants, four threads each, every store through the pooler as the same unbound
    role, and a client that keeps leaving session-level tenant settings on the server
    connections (what a session-level binding does): no read returns another tenant's row,
    no write is refused, nothing fails."""
    pooled = pgbouncer.dsn(dsn, user=shared_role)
    with shardstore.connect(dsn) as owner:
        mine = {t: owner.create_session(t, "user:1") for t in TENANTS}
        for t, sid in mine.items():
            owner.append_turns(
                sid, [{"role": "user", "content": f"{t} seed {i}"} for i in range(5)]
            )
    errors: list[str] = []
    leaks: list[str] = []
    done = threading.Event()

    def poison() -> None:  # session state on whatever server connection it gets
        with psycopg.connect(pooled, autocommit=True, prepare_threshold=None) as conn:
            i = 0
            while not done.is_set():
                rls.set_session_tenant(conn, TENANTS[i % 2])
                i += 1

    def work(tenant: str, index: int) -> None:
        try:
            store, holder = _tenant_store(pooled, tenant, index % 3)
            try:
                sid = store.create_session(tenant, f"user:{index}")
                for r in range(ROUNDS):
                    store.append_turn(sid, {"role": "user", "content": f"{tenant} {index} {r}"})
                    listed = store.sessions(tenant_id=tenant, limit=100)
                    leaks.extend(
                        f"{tenant} saw {s.tenant_id}" for s in listed if s.tenant_id != tenant
                    )
                    every = store.sessions(limit=100)
                    leaks.extend(
                        f"{tenant} saw {s.tenant_id}" for s in every if s.tenant_id != tenant
                    )
                    tail = store.tail(mine[tenant], n=3)
                    if any(not t.message["content"].startswith(tenant) for t in tail):
                        leaks.append(f"{tenant} read a foreign turn")
                assert [t.turn_seq for t in store.tail(sid, n=ROUNDS)] == list(range(ROUNDS))
            finally:
                store.close()
                if holder is not None:
                    holder.__exit__(None, None, None)
        except Exception as exc:
            errors.append(f"{tenant}/{index}: {type(exc).__name__}: {exc}")

    poisoner = threading.Thread(target=poison)
    poisoner.start()
    workers = [
        threading.Thread(target=work, args=(t, i))
        for i in range(THREADS_PER_TENANT)
        for t in TENANTS
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    poisoner.join()
    assert errors == []
    assert leaks == []
    with shardstore.connect(dsn) as owner:  # every write landed in its own tenant
        for t in TENANTS:
            listed = owner.sessions(tenant_id=t, limit=100)
            assert len(listed) == THREADS_PER_TENANT + 1
            assert sum(s.turn_count for s in listed) == THREADS_PER_TENANT * ROUNDS + 5


@pytest.mark.slow
def test_async_tenant_stores_stay_apart(pgbouncer: Pooler, dsn: str, shared_role: str) -> None:
    pooled = pgbouncer.dsn(dsn, user=shared_role)
    with shardstore.connect(dsn) as owner:
        for t in TENANTS:
            owner.create_session(t, "user:1")

    async def one(tenant: str) -> list[str]:
        store = await rls.connect_tenant_async(
            pooled, tenant=tenant, pool_min_size=1, pool_max_size=2
        )
        seen: list[str] = []
        try:
            sid = await store.create_session(tenant)
            for r in range(ROUNDS):
                await store.append_turn(sid, {"role": "user", "content": f"{tenant} {r}"})
                seen += [s.tenant_id for s in await store.sessions(limit=100)]
            assert len(await store.tail(sid, n=100)) == ROUNDS
        finally:
            await store.close()
        return seen

    async def both() -> list[list[str]]:
        return list(await asyncio.gather(*(one(t) for t in TENANTS for _ in range(2))))

    results = asyncio.run(both())
    for tenant, seen in zip([t for t in TENANTS for _ in range(2)], results, strict=True):
        assert seen and set(seen) == {tenant}


def _tour(store: shardstore.Store) -> None:
    """The public API, call by call, each result checked."""
    sid = store.create_session("acme", "user:42", "support", metadata={"k": 1})
    assert store.append_turn(sid, {"role": "user", "content": "where is my refund?"}).turn_seq == 0
    assert (
        store.append_turn(sid, {"role": "user", "content": "x"}, idempotency_key="k1").turn_seq == 1
    )
    assert store.append_turn(sid, {"role": "user", "content": "x"}, idempotency_key="k1").duplicate
    store.append_turns(
        sid, [{"role": "assistant", "content": f"answer {i} " * 50} for i in range(60)]
    )
    store.append_turn(sid, {"role": "user", "content": "ok"}, checkpoint={"step": 1})
    assert [t.turn_seq for t in store.tail(sid, n=3)] == [60, 61, 62]
    assert store.tail(sid, max_tokens=400)
    assert len(list(store.history(sid))) == 63
    assert store.flush(sid) >= 0
    assert store.chunks(sid)
    assert store.context(sid, max_tokens=2000)
    assert store.checkpoints(sid)
    restored = store.restore(sid, n=5)
    assert restored.checkpoint is not None
    fork = store.fork(sid, at_turn_seq=10)
    assert len(list(store.history(fork))) == 11
    store.rewind(fork, to_turn_seq=5)
    assert len(list(store.history(fork))) == 5  # turns 0 .. 4
    store.remember("acme", "user:42", "plan", {"tier": "gold"}, source=(sid, 3))
    assert [f.value for f in store.recall("acme", "user:42")] == [{"tier": "gold"}]
    run = store.open_run(sid, framework="test", thread_key="t-1")
    assert store.record_step(run.run_id, steps=2).steps == 2
    store.close_run(run.run_id, "done")
    assert store.get_run(run.run_id).status == "done"
    assert [s.session_id for s in store.sessions(tenant_id="acme")][:1] in ([fork], [sid])
    assert store.search("refund", tenant_id="acme", mode="text")
    assert store.embed() > 0
    assert store.search("where is my refund", session_id=sid, k=3)
    report = store.maintain()
    assert report.healthy and not report.already_running
    assert store.maintain().healthy  # the lock was given back
    assert store.purge_range(sid, 10).cut_turn_seq == 10
    assert store.purge_range(sid, 4).cut_turn_seq == 10  # where the history starts
    assert (store.session(sid).first_turn_seq, store.session(sid).stored_turns) == (10, 53)
    summarized = store.summarize(lambda turns: f"{len(turns)} turns", tenant_id="acme")
    assert summarized == len(store.summaries(sid)) + len(store.summaries(fork))
    exported = io.StringIO()
    store.export_sessions(tenant_id="acme", out=exported)  # format version 2: state too
    again = store.import_jsonl(io.StringIO(exported.getvalue()), on_existing="skip")
    assert (again.sessions, len(again.skipped)) == (0, 2)
    assert store.purge_session(fork).sessions_affected == 1
    assert store.purge_subject("acme", "user:42").sessions_affected >= 1
    other = store.create_session("gone", "user:1")
    store.append_turn(other, {"role": "user", "content": "bye"})
    assert store.purge_tenant("gone").sessions_affected == 1
    assert store.stats().sessions == 0


@pytest.mark.slow
def test_public_api_behind_the_pooler(pooled_dsn: str) -> None:
    with shardstore.connect(
        pooled_dsn, chunk_tokens=500, embedding_model=HashEmbedder(), pool_max_size=3
    ) as store:
        _tour(store)
        store.drain_folds()


def test_async_public_api_behind_the_pooler(pooled_dsn: str) -> None:
    async def go() -> None:
        store = await shardstore.connect_async(pooled_dsn, chunk_tokens=500)
        try:
            sid = await store.create_session("acme", "user:1")
            await store.append_turns(
                sid, [{"role": "user", "content": f"m {i} " * 80} for i in range(40)]
            )
            await store.append_turn(sid, {"role": "user", "content": "cp"}, checkpoint={"s": 2})
            assert [t.turn_seq for t in await store.tail(sid, n=2)] == [39, 40]
            assert len([t async for t in store.history(sid)]) == 41
            assert (await store.restore(sid, n=3)).checkpoint is not None
            assert await store.context(sid, max_tokens=1000)
            assert await store.search("m 7", tenant_id="acme", mode="text")
            assert (await store.maintain()).healthy
            assert (await store.purge_session(sid)).sessions_affected == 1
            await store.drain_folds()
        finally:
            await store.close()

    asyncio.run(go())


@pytest.mark.slow
def test_adapters_behind_the_pooler(pooled_dsn: str) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.types import Command

    from shardstore.integrations.langchain import ShardstoreChatMessageHistory
    from shardstore.integrations.langgraph import ShardstoreSaver
    from shardstore.integrations.openai_agents import ShardstoreSession
    from tests.integrations.test_langgraph_checkpointer import build_graph, cfg

    with shardstore.connect(pooled_dsn) as store:
        history = ShardstoreChatMessageHistory("chat-1", store, tenant_id="acme")
        history.add_messages([HumanMessage("hi"), AIMessage("hello")])
        assert [m.content for m in history.messages] == ["hi", "hello"]

        session = ShardstoreSession("agents-1", store, tenant_id="acme")

        async def agents() -> list[Any]:
            await session.add_items([{"role": "user", "content": "hi"}])
            return await session.get_items()

        assert asyncio.run(agents()) == [{"role": "user", "content": "hi"}]

        graph = build_graph(ShardstoreSaver(store, tenant_id="acme"))
        first = graph.invoke({"messages": [HumanMessage("look up 7")]}, cfg("t1"))
        assert "__interrupt__" in first
        out = graph.invoke(Command(resume="yes"), cfg("t1"))
        assert out["messages"][-1].content


@contextmanager
def _busy_pooler(pooled_dsn: str) -> Iterator[None]:
    """Clients that keep every server connection of the pool busy and queue for more, so
    that a client's consecutive transactions land on different server connections."""
    done = threading.Event()

    def busy() -> None:
        with psycopg.connect(pooled_dsn, autocommit=True, prepare_threshold=None) as conn:
            while not done.is_set():
                conn.execute("SELECT pg_sleep(0.01)")

    others = [threading.Thread(target=busy) for _ in range(2 * POOL_SIZE)]
    for t in others:
        t.start()
    try:
        yield
    finally:
        done.set()
        for t in others:
            t.join()


@pytest.mark.slow
def test_maintenance_lock_behind_the_pooler(pooled_dsn: str, dsn: str) -> None:
    """Runs behind the pooler while other clients keep its server connections busy: every
    run gets the lock and gives it back (a session-level lock would be taken on one server
    connection and released on another, leaving the next runs 'already running'), two
    runs at once still exclude each other, and nothing holds the lock afterwards."""
    from shardstore.lifecycle.maintenance import MAINTENANCE_LOCK_KEY

    with _busy_pooler(pooled_dsn), shardstore.connect(pooled_dsn, pool_max_size=4) as store:
        reports = [store.maintain(embed=False) for _ in range(8)]
        assert [r.already_running for r in reports] == [False] * 8
        assert all(r.healthy for r in reports)
        held = store.connector.acquire()  # another run holds the lock now
        try:
            held.execute("BEGIN")
            held.execute("SELECT pg_advisory_xact_lock(%s)", (MAINTENANCE_LOCK_KEY,))
            assert store.maintain(embed=False).already_running
            held.execute("COMMIT")
        finally:
            store.connector.release(held)
        assert not store.maintain(embed=False).already_running
    with psycopg.connect(dsn, autocommit=True) as conn:
        (locks,) = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        ).fetchone() or (None,)
        assert locks == 0


def test_maintenance_on_one_pooled_connection_says_what_it_needs(pooled_dsn: str) -> None:
    with psycopg.connect(pooled_dsn, autocommit=True) as conn:
        store = shardstore.connect(conn)
        with pytest.raises(shardstore.ConfigurationError, match="pool of its own"):
            store.maintain(embed=False)


@pytest.mark.slow
def test_retention_behind_the_pooler_leaves_no_setting_behind(pooled_dsn: str) -> None:
    """Retention detaches and drops expired partitions through the pooler, with a plain
    DETACH bounded by a transaction-local lock_timeout: the session-level one that bounds
    DETACH ... CONCURRENTLY would stay on whichever server connection it landed on."""
    import time
    from datetime import timedelta

    with shardstore.connect(pooled_dsn, partition_interval=timedelta(seconds=1), premake=2) as s:
        sid = s.create_session("acme")
        s.append_turn(sid, {"role": "user", "content": "old"})
        s.flush(sid)
        time.sleep(3.2)  # the turn's partition ends more than the retention ago
        with _busy_pooler(pooled_dsn):  # so that consecutive transactions change server
            report = s.maintain(retention=timedelta(seconds=1), embed=False)
        assert report.errors == []
        assert report.partitions_dropped
        assert report.sessions_expired == 1
    held = [psycopg.connect(pooled_dsn, autocommit=True, prepare_threshold=None) for _ in range(3)]
    try:
        for conn in held:  # each on a server connection of its own while the others wait
            conn.execute("BEGIN")
            (value,) = conn.execute("SHOW lock_timeout").fetchone() or ("?",)
            assert value == "0"
    finally:
        for conn in held:
            conn.close()


@pytest.mark.slow
def test_migrations_run_through_the_pooler(pgbouncer: Pooler, server_dsn: str) -> None:
    """A fresh, empty database migrated through the pooler alone: every migration is one
    transaction under a transaction-level advisory lock, which a transaction pooler keeps
    on one server connection; two stores racing to migrate apply each version once."""
    from psycopg.conninfo import make_conninfo

    from shardstore.schema.migrate import all_migrations

    name = f"ss_pooled_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        pooled = pgbouncer.dsn(make_conninfo(server_dsn, dbname=name))
        stores: list[shardstore.Store] = []
        errors: list[BaseException] = []

        def migrate() -> None:
            try:
                stores.append(shardstore.connect(pooled, pool_max_size=2))
            except BaseException as exc:
                errors.append(exc)

        racers = [threading.Thread(target=migrate) for _ in range(2)]
        for t in racers:
            t.start()
        for t in racers:
            t.join()
        assert errors == []
        for store in stores:
            sid = store.create_session("acme")
            assert store.append_turn(sid, {"role": "user", "content": "hi"}).turn_seq == 0
            store.close()
        with psycopg.connect(make_conninfo(server_dsn, dbname=name)) as conn:
            versions = [
                v
                for (v,) in conn.execute(
                    "SELECT version FROM shardstore.schema_migrations ORDER BY version"
                )
            ]
        assert versions == [m.version for m in all_migrations()]
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
