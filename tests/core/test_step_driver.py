"""The step driver (partition_manager.driver): the plain-statement loop
(``_plain_statements``, shared by both drivers) and the general driver it hands over to give
every operation the same outcome. Each case runs one operation through ``run_sync`` on a
pooled source, on a plain connection, and through ``run_async`` on an asyncio pool; what the
operation saw and returned is compared with what it must be, and every pool must have its
connection back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from partition_manager.driver import run_async, run_sync
from partition_manager.steps import Op, Q, StatementFailed, Tx


class Translated(Exception):
    """What the test's translator turns a driver error into."""

    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


class PoolSource:
    """A psycopg_pool pool as a driver source (acquire / release)."""

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self.pool = pool

    def acquire(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] = self.pool.getconn()
        return conn

    def release(self, conn: psycopg.Connection[Any]) -> None:
        self.pool.putconn(conn)


class AsyncPoolSource:
    """An asyncio pool as a driver source."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    async def acquire(self) -> psycopg.AsyncConnection[Any]:
        conn: psycopg.AsyncConnection[Any] = await self.pool.getconn()
        return conn

    async def release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await self.pool.putconn(conn)


def translate(exc: psycopg.Error) -> BaseException:
    return Translated(exc.sqlstate)


def plain() -> Op[Any]:
    (a,) = yield Q("SELECT 1", fetch="one")
    (b,) = yield Q("SELECT %s::int + 1", (a,), fetch="one")
    return [a, b]


def recovered() -> Op[Any]:
    got = yield Q("SELECT 1/0", fetch="one", recover=frozenset({"22012"}))
    (after,) = yield Q("SELECT 7", fetch="one")
    return [type(got).__name__, getattr(got, "sqlstate", None), after]


def caught() -> Op[Any]:
    seen = []
    try:
        yield Q("SELECT 1/0", fetch="one")
    except Translated as exc:
        seen.append(exc.sqlstate)
    (after,) = yield Q("SELECT 2", fetch="one")  # the connection is usable again
    seen.append(after)
    return seen


def uncaught() -> Op[Any]:
    yield Q("SELECT 1/0", fetch="one")
    return "never"


def raises_after_a_statement() -> Op[Any]:
    yield Q("SELECT 1", fetch="one")
    raise KeyError("the operation's own error")


def hands_over() -> Op[Any]:
    (a,) = yield Q("SELECT 1", fetch="one")
    yield Tx.BEGIN
    (status,) = [(yield Tx.STATUS)]
    (b,) = yield Q("SELECT 2", fetch="one")
    yield Tx.COMMIT
    (c,) = yield Q("SELECT 3", fetch="one")
    return [a, status, b, c]


def bad_parameter() -> Op[Any]:
    seen = []
    try:
        yield Q("SELECT %s", (object(),), fetch="one")  # psycopg cannot adapt it
    except Exception as exc:
        seen.append(type(exc).__name__)
    (after,) = yield Q("SELECT 4", fetch="one")
    seen.append(after)
    return seen


def no_statement() -> Op[Any]:
    return "nothing to run"
    yield  # pragma: no cover - makes this a generator


def rows(n: int) -> Op[Any]:
    got = yield Q("SELECT g FROM generate_series(1, %s) g", (n,), fetch="all", named=True)
    return [r["g"] for r in got]


CASES: dict[str, Callable[[], Op[Any]]] = {
    "plain": plain,
    "recovered": recovered,
    "caught": caught,
    "uncaught": uncaught,
    "raises_after_a_statement": raises_after_a_statement,
    "hands_over": hands_over,
    "bad_parameter": bad_parameter,
    "no_statement": no_statement,
    "rows": lambda: rows(3),
}


def outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", run()
    except Translated as exc:
        return "Translated", exc.sqlstate
    except KeyError as exc:
        return "KeyError", str(exc)


EXPECTED: dict[str, tuple[str, Any]] = {
    "plain": ("ok", [1, 2]),
    "recovered": ("ok", ["StatementFailed", "22012", 7]),
    "caught": ("ok", ["22012", 2]),
    "uncaught": ("Translated", "22012"),
    "raises_after_a_statement": ("KeyError", '"the operation\'s own error"'),
    "hands_over": ("ok", [1, True, 2, 3]),
    "bad_parameter": ("ok", ["Translated", 4]),
    "no_statement": ("ok", "nothing to run"),
    "rows": ("ok", [1, 2, 3]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_sync_and_async_drivers_agree(dsn: str, case: str) -> None:
    make = CASES[case]
    kwargs = {"autocommit": True}
    with ConnectionPool(dsn, min_size=1, max_size=1, kwargs=kwargs, open=True) as pool:
        pooled = outcome(lambda: run_sync(PoolSource(pool), make(), translate))
        back = pool.getconn(timeout=2)  # the pool's one connection was given back
        assert back.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        pool.putconn(back)
    with psycopg.connect(dsn, autocommit=True) as conn:
        direct = outcome(lambda: run_sync(conn, make(), translate))
        assert conn.execute("SELECT 5").fetchone() == (5,)  # still usable

    async def on_async() -> tuple[str, Any]:
        async with AsyncConnectionPool(
            dsn, min_size=1, max_size=1, kwargs=kwargs, open=False
        ) as apool:
            try:
                got: tuple[str, Any] = (
                    "ok",
                    await run_async(AsyncPoolSource(apool), make(), translate),
                )
            except Translated as exc:
                got = "Translated", exc.sqlstate
            except KeyError as exc:
                got = "KeyError", str(exc)
            back = await apool.getconn(timeout=2)  # given back, and idle
            assert back.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            await apool.putconn(back)
            return got

    asynced = asyncio.run(on_async())
    assert pooled == direct == asynced == EXPECTED[case]


def test_recover_inside_a_callers_transaction_undoes_only_the_statement(dsn: str) -> None:
    """A ``recover`` statement on a connection that is in a transaction goes to the
    general driver (it needs a savepoint): the caller's earlier write survives."""
    with psycopg.connect(dsn) as conn:  # not autocommit: the caller's transaction
        conn.execute("CREATE TEMP TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")

        def op() -> Op[Any]:
            got = yield Q("SELECT 1/0", fetch="one", recover=frozenset({"22012"}))
            rows = yield Q("SELECT x FROM t", fetch="all")
            return [type(got).__name__, rows]

        assert run_sync(conn, op(), translate) == ["StatementFailed", [(1,)]]
        assert isinstance(StatementFailed("x"), StatementFailed)


def test_a_broken_connection_is_not_given_back(dsn: str) -> None:
    """A plain statement whose connection dies: the error reaches the operation translated,
    the dead connection is discarded, and the pool hands out a working one next."""
    with ConnectionPool(
        dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True
    ) as pool:

        def killer() -> Op[Any]:
            (pid,) = yield Q("SELECT pg_backend_pid()", fetch="one")
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
            yield Q("SELECT 1", fetch="one")
            return "never"

        kind, _ = outcome(lambda: run_sync(PoolSource(pool), killer(), translate))
        assert kind == "Translated"
        assert run_sync(PoolSource(pool), plain(), translate) == [1, 2]


def test_a_broken_connection_is_not_given_back_async(dsn: str) -> None:
    """The same on the asyncio driver."""

    async def check() -> None:
        async with AsyncConnectionPool(
            dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
        ) as apool:

            def killer() -> Op[Any]:
                (pid,) = yield Q("SELECT pg_backend_pid()", fetch="one")
                with psycopg.connect(dsn, autocommit=True) as other:
                    other.execute("SELECT pg_terminate_backend(%s)", (pid,))
                yield Q("SELECT 1", fetch="one")
                return "never"

            with pytest.raises(Translated):
                await run_async(AsyncPoolSource(apool), killer(), translate)
            assert await run_async(AsyncPoolSource(apool), plain(), translate) == [1, 2]

    asyncio.run(check())
