"""Run operations (:mod:`shardstore.core.steps`) with the one driver
(:mod:`partition_manager.driver`), translating driver errors into the shardstore error tree
at this one boundary."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors

from partition_manager import driver

from .. import errors as e
from .steps import Op

T = TypeVar("T")

_BY_SQLSTATE: dict[str, type[e.ShardstoreError]] = {
    "SS404": e.SessionNotFound,
    "SS410": e.SessionPurged,
    "SS409": e.EmbeddingModelMismatch,
    "SS500": e.ConfigurationError,
    "40001": e.Conflict,
    "40P01": e.Conflict,
    "55P03": e.Conflict,  # lock_not_available (lock_timeout)
    "57014": e.Conflict,  # query_canceled (statement_timeout)
    "22P02": e.InvalidInput,
    "22021": e.InvalidInput,  # character_not_in_repertoire
    "54000": e.InvalidInput,  # program_limit_exceeded (e.g. jsonb too large)
    "3F000": e.ConfigurationError,  # invalid_schema_name: not migrated
    "42P01": e.ConfigurationError,  # undefined_table: not migrated
    "42883": e.ConfigurationError,  # undefined_function: schema older than the code
    "25001": e.InvalidInput,  # active_sql_transaction: e.g. VACUUM inside a transaction
    "22003": e.InvalidInput,  # numeric_value_out_of_range
    "42501": e.AccessDenied,  # insufficient_privilege (e.g. Row-Level Security)
}


def translate(exc: psycopg.Error) -> e.ShardstoreError:
    """The shardstore error for a driver error (the driver error is kept as __cause__)."""
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not isinstance(
        exc, pgerrors.LockNotAvailable | pgerrors.QueryCanceled
    ):
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate is None or sqlstate.startswith(("08", "57P")):
            return e.DatabaseUnavailable(f"database unavailable: {exc}".strip())
    sqlstate = getattr(exc, "sqlstate", None) or ""
    kind = _BY_SQLSTATE.get(sqlstate, e.DatabaseError)
    diag = getattr(exc, "diag", None)
    text = (diag.message_primary if diag is not None else None) or str(exc)
    if kind is e.DatabaseError:
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


def run_sync(source: Any, op: Op[T]) -> T:
    """Run an operation to completion on a sync connection or connector; shardstore errors
    only."""
    return driver.run_sync(source, op, translate)


def stream_sync(source: Any, op: Op[Any]) -> Iterator[Any]:
    """Run a streaming operation on a sync connection or connector, yielding what it emits."""
    return driver.stream_sync(source, op, translate)


async def run_async(source: Any, op: Op[T]) -> T:
    """Run an operation to completion on an asyncio connection or connector."""
    return await driver.run_async(source, op, translate)


def stream_async(source: Any, op: Op[Any]) -> AsyncIterator[Any]:
    """Run a streaming operation on an asyncio connection or connector."""
    return driver.stream_async(source, op, translate)
