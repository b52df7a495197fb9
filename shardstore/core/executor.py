"""Drive sans-IO operations (:mod:`shardstore.ops`) over psycopg, sync or asyncio, and
translate driver errors into the shardstore error tree at this one boundary."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, NoReturn, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus

from .errors import (
    AccessDenied,
    ConfigurationError,
    Conflict,
    DatabaseError,
    DatabaseUnavailable,
    EmbeddingModelMismatch,
    InvalidInput,
    SessionNotFound,
    SessionPurged,
    ShardstoreError,
)
from .ops import Call, Emit, Op, Q, StatementFailed, Tx

T = TypeVar("T")

_BY_SQLSTATE: dict[str, type[ShardstoreError]] = {
    "SS404": SessionNotFound,
    "SS410": SessionPurged,
    "SS409": EmbeddingModelMismatch,
    "SS500": ConfigurationError,
    "40001": Conflict,
    "40P01": Conflict,
    "55P03": Conflict,  # lock_not_available (lock_timeout)
    "57014": Conflict,  # query_canceled (statement_timeout)
    "22P02": InvalidInput,
    "22021": InvalidInput,  # character_not_in_repertoire
    "54000": InvalidInput,  # program_limit_exceeded (e.g. jsonb too large)
    "3F000": ConfigurationError,  # invalid_schema_name: not migrated
    "42P01": ConfigurationError,  # undefined_table: not migrated
    "42883": ConfigurationError,  # undefined_function: schema older than the code
    "25001": InvalidInput,  # active_sql_transaction: e.g. VACUUM inside a transaction
    "22003": InvalidInput,  # numeric_value_out_of_range
    "42501": AccessDenied,  # insufficient_privilege (e.g. Row-Level Security)
}


def translate(exc: psycopg.Error) -> ShardstoreError:
    """The shardstore error for a driver error (the driver error is kept as __cause__)."""
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not isinstance(
        exc, pgerrors.LockNotAvailable | pgerrors.QueryCanceled
    ):
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate is None or sqlstate.startswith(("08", "57P")):
            return DatabaseUnavailable(f"database unavailable: {exc}".strip())
    sqlstate = getattr(exc, "sqlstate", None) or ""
    kind = _BY_SQLSTATE.get(sqlstate, DatabaseError)
    diag = getattr(exc, "diag", None)
    text = (diag.message_primary if diag is not None else None) or str(exc)
    if kind is DatabaseError:
        text = f"{text} (SQLSTATE {sqlstate or 'unknown'})"
    elif sqlstate == "25001":
        text = (
            f"{text}: this needs a connection outside any transaction (VACUUM, DETACH "
            "CONCURRENTLY); commit first or let the store use its own pool"
        )
    elif sqlstate in ("3F000", "42P01", "42883"):
        text = (
            f"{text}: this database's shardstore schema is missing or older than this "
            "version; connect with shardstore.connect() or run 'shardstore init' to migrate"
        )
    hint = diag.message_hint if diag is not None else None
    if hint:
        text = f"{text}. {hint}"
    return kind(text)


def _raise(exc: psycopg.Error) -> NoReturn:
    raise translate(exc) from exc


def _recoverable(exc: psycopg.Error, step: Q, autocommit: bool, open_tx: list[Any]) -> bool:
    # outside a transaction the failed statement undid only itself, so the operation may
    # go on; inside one, the transaction is aborted and the error must surface
    return bool(step.recover) and exc.sqlstate in step.recover and autocommit and not open_tx


def _fetch(cur: Any, step: Q) -> Any:
    if step.fetch == "one":
        return cur.fetchone()
    if step.fetch == "all":
        return cur.fetchall()
    return None


# ------------------------------------------------------------------ sync


class _SyncTx:
    """Transactions opened by an operation, closed on COMMIT or on error."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.stack: list[Any] = []

    def begin(self, snapshot: bool) -> None:
        fresh = self.conn.info.transaction_status == TransactionStatus.IDLE
        tx = self.conn.transaction()
        tx.__enter__()
        self.stack.append(tx)
        if snapshot and fresh:
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def commit(self) -> None:
        self.stack.pop().__exit__(None, None, None)

    def abort(self, exc: BaseException) -> None:
        while self.stack:
            # the connection may be gone; the original error is the one to report
            with contextlib.suppress(Exception):
                self.stack.pop().__exit__(type(exc), exc, exc.__traceback__)


def _drive(conn: psycopg.Connection[Any], op: Op[T]) -> Iterator[Any]:
    """Run ``op``; yields emitted items, and finally a _Done carrying the result."""
    tx = _SyncTx(conn)
    result: Any = None
    try:
        while True:
            try:
                step = op.send(result)
            except StopIteration as stop:
                yield _Done(stop.value)
                return
            result = None
            if isinstance(step, Q):
                try:
                    cur = conn.execute(step.sql, step.params, prepare=step.prepare)
                    result = _fetch(cur, step)
                except psycopg.Error as exc:
                    if not _recoverable(exc, step, conn.autocommit, tx.stack):
                        raise
                    result = StatementFailed(exc.sqlstate or "")
            elif step is Tx.BEGIN or step is Tx.BEGIN_SNAPSHOT:
                tx.begin(step is Tx.BEGIN_SNAPSHOT)
            elif step is Tx.COMMIT:
                tx.commit()
            elif isinstance(step, Call):
                result = step.fn(*step.args)
            elif isinstance(step, Emit):
                yield from step.items
    except psycopg.Error as exc:
        tx.abort(exc)
        _raise(exc)
    except BaseException as exc:
        tx.abort(exc)
        op.close()
        raise


class _Done:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def run_sync(conn: psycopg.Connection[Any], op: Op[T]) -> T:
    """Run an operation to completion on a sync connection and return its result."""
    for item in _drive(conn, op):
        if isinstance(item, _Done):
            return item.value  # type: ignore[no-any-return]
    raise AssertionError("operation ended without a result")


def stream_sync(conn: psycopg.Connection[Any], op: Op[Any]) -> Iterator[Any]:
    """Run a streaming operation, yielding what it emits."""
    for item in _drive(conn, op):
        if not isinstance(item, _Done):
            yield item


# ------------------------------------------------------------------ asyncio


class _AsyncTx:
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.stack: list[Any] = []

    async def begin(self, snapshot: bool) -> None:
        fresh = self.conn.info.transaction_status == TransactionStatus.IDLE
        tx = self.conn.transaction()
        await tx.__aenter__()
        self.stack.append(tx)
        if snapshot and fresh:
            await self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    async def commit(self) -> None:
        await self.stack.pop().__aexit__(None, None, None)

    async def abort(self, exc: BaseException) -> None:
        while self.stack:
            with contextlib.suppress(Exception):
                await self.stack.pop().__aexit__(type(exc), exc, exc.__traceback__)


async def _adrive(conn: psycopg.AsyncConnection[Any], op: Op[T]) -> AsyncIterator[Any]:
    tx = _AsyncTx(conn)
    result: Any = None
    try:
        while True:
            try:
                step = op.send(result)
            except StopIteration as stop:
                yield _Done(stop.value)
                return
            result = None
            if isinstance(step, Q):
                try:
                    cur = await conn.execute(step.sql, step.params, prepare=step.prepare)
                    result = await _afetch(cur, step)
                except psycopg.Error as exc:
                    if not _recoverable(exc, step, conn.autocommit, tx.stack):
                        raise
                    result = StatementFailed(exc.sqlstate or "")
            elif step is Tx.BEGIN or step is Tx.BEGIN_SNAPSHOT:
                await tx.begin(step is Tx.BEGIN_SNAPSHOT)
            elif step is Tx.COMMIT:
                await tx.commit()
            elif isinstance(step, Call):
                result = await asyncio.to_thread(step.fn, *step.args)
            elif isinstance(step, Emit):
                for item in step.items:
                    yield item
    except psycopg.Error as exc:
        await tx.abort(exc)
        _raise(exc)
    except BaseException as exc:
        await tx.abort(exc)
        op.close()
        raise


async def _afetch(cur: Any, step: Q) -> Any:
    if step.fetch == "one":
        return await cur.fetchone()
    if step.fetch == "all":
        return await cur.fetchall()
    return None


async def run_async(conn: psycopg.AsyncConnection[Any], op: Op[T]) -> T:
    """Run an operation to completion on an asyncio connection and return its result."""
    async for item in _adrive(conn, op):
        if isinstance(item, _Done):
            return item.value  # type: ignore[no-any-return]
    raise AssertionError("operation ended without a result")


async def stream_async(conn: psycopg.AsyncConnection[Any], op: Op[Any]) -> AsyncIterator[Any]:
    """Run a streaming operation on an asyncio connection, yielding what it emits."""
    async for item in _adrive(conn, op):
        if not isinstance(item, _Done):
            yield item
