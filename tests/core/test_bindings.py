"""Store and AsyncStore are bound to the same operations: same public methods, same
parameters, one docstring each; the asyncio ones are awaitable or async-iterable. And the
step protocol holds inside a caller's transaction: an operation that recovers from a failed
statement, or retries, runs nested (savepoints) without aborting the caller's work."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import shardstore
from partition_manager import driver
from partition_manager.steps import Call, Op, Q, Sleep, StatementFailed, Try, Tx


def _public(cls: type) -> dict[str, Any]:
    return {
        name: getattr(cls, name)
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }


def test_same_public_methods_and_parameters() -> None:
    sync, aio = _public(shardstore.Store), _public(shardstore.AsyncStore)
    assert sorted(sync) == sorted(aio)
    assert len(sync) >= 20
    for name, fn in sync.items():
        afn = aio[name]
        assert inspect.signature(fn) == inspect.signature(afn), name
        assert inspect.iscoroutinefunction(afn) or inspect.isasyncgenfunction(afn), name
        assert not inspect.iscoroutinefunction(fn) and not inspect.isasyncgenfunction(fn), name
        assert fn.__doc__ and fn.__doc__.strip(), f"Store.{name} has no docstring"
    # bound from one function: the docstring is the same text, written once
    for name in ("append_turn", "tail", "purge_session", "search", "maintain", "history"):
        assert sync[name].__doc__ == aio[name].__doc__, name
        assert sync[name].__wrapped__ is aio[name].__wrapped__, name


def test_history_streams_in_both(make_store: Callable[..., shardstore.Store], dsn: str) -> None:
    store = make_store()
    sid = store.create_session("t")
    store.append_turns(sid, [{"role": "user", "content": f"m{i}"} for i in range(5)])
    assert [t.turn_seq for t in store.history(sid)] == [0, 1, 2, 3, 4]

    async def collect() -> list[int]:
        astore = await shardstore.connect_async(dsn)
        try:
            assert inspect.isasyncgen(astore.history(sid))
            return [t.turn_seq async for t in astore.history(sid, from_seq=2)]
        finally:
            await astore.close()

    assert asyncio.run(collect()) == [2, 3, 4]


def _probe_table(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS probe (k int PRIMARY KEY)")
    conn.execute("DELETE FROM probe")


def _nested_op() -> Op[list[int]]:
    """Inside one transaction: a recovered duplicate, a failed child rolled back to its
    savepoint, a retried child that succeeds the second time."""
    yield Tx.BEGIN
    yield Q("INSERT INTO probe VALUES (1)", fetch="none")
    dup = yield Q("INSERT INTO probe VALUES (1)", fetch="none", recover=frozenset({"23505"}))
    assert isinstance(dup, StatementFailed) and dup.sqlstate == "23505"

    def child(k: int, fail: bool) -> Op[None]:
        yield Q("INSERT INTO probe VALUES (%s)", (k,), fetch="none")
        if fail:
            yield Q("SELECT 1/0", fetch="none")

    with pytest.raises(psycopg.errors.DivisionByZero):
        yield Try(child(2, fail=True))
    attempts = []
    for attempt in range(2):
        try:
            yield Try(child(3, fail=attempt == 0))
            attempts.append(attempt)
            break
        except psycopg.errors.DivisionByZero:
            yield Sleep(0.001)
    seen = yield Call(lambda: "called")
    assert seen == "called"
    yield Tx.COMMIT
    rows = yield Q("SELECT k FROM probe ORDER BY k")
    return [k for (k,) in rows] + attempts


def test_savepoints_inside_a_callers_transaction(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _probe_table(conn)
        with conn.transaction():
            conn.execute("INSERT INTO probe VALUES (100)")
            # 1 stays, the duplicate and the failed child's 2 are undone, 3 on the retry
            assert driver.run_sync(conn, _nested_op()) == [1, 3, 100, 1]
            conn.execute("INSERT INTO probe VALUES (101)")  # the caller's transaction lives
        assert [k for (k,) in conn.execute("SELECT k FROM probe ORDER BY k")] == [1, 3, 100, 101]


def test_savepoints_asyncio(dsn: str) -> None:
    async def go() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS probe (k int PRIMARY KEY)")
            await conn.execute("DELETE FROM probe")
            return await driver.run_async(conn, _nested_op())

    assert asyncio.run(go()) == [1, 3, 1]


def test_error_escaping_an_op_rolls_back_only_its_levels(dsn: str) -> None:
    def failing() -> Op[None]:
        yield Tx.BEGIN
        yield Q("INSERT INTO probe VALUES (7)", fetch="none")
        yield Q("SELECT 1/0", fetch="none")

    with psycopg.connect(dsn, autocommit=True) as conn:
        _probe_table(conn)
        with pytest.raises(psycopg.errors.DivisionByZero):
            driver.run_sync(conn, failing())
        assert conn.execute("SELECT count(*) FROM probe").fetchone() == (0,)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_append_with_duplicate_key_inside_callers_transaction(dsn: str) -> None:
    """append_turn's fast path recovers from a unique violation (a repeated key): inside a
    caller's transaction that must not abort the caller's work (it did before: recover
    was honoured only in autocommit)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = shardstore.connect(conn)
        sid = store.create_session("t")
        with conn.transaction():
            first = store.append_turn(sid, {"role": "user", "content": "a"}, "k1")
            again = store.append_turn(sid, {"role": "user", "content": "a"}, "k1")
            assert again.duplicate and again.turn_seq == first.turn_seq
            store.append_turn(sid, {"role": "user", "content": "b"}, "k2")
        assert [t.message["content"] for t in store.tail(sid)] == ["a", "b"]
        store.close()


def test_a_turn_and_other_writes_commit_together(dsn: str) -> None:
    """An op nested in a caller's transaction commits with it, or not at all."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _probe_table(conn)
        store = shardstore.connect(conn)
        sid = store.create_session("t")
        with pytest.raises(RuntimeError), conn.transaction():
            store.append_turn(sid, {"role": "user", "content": "lost"})
            conn.execute("INSERT INTO probe VALUES (5)")
            raise RuntimeError("caller fails after both writes")
        assert store.tail(sid) == []
        assert conn.execute("SELECT count(*) FROM probe").fetchone() == (0,)
        store.close()
