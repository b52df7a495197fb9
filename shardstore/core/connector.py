"""The one connector: turns a DSN, a psycopg pool or a psycopg connection into a source of
connections for the store. Sync and asyncio flavours share the resolution logic."""

from __future__ import annotations

import asyncio
import os
import select
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from .errors import ConfigurationError, DatabaseUnavailable
from .settings import Settings


def resolve_dsn(dsn: str | None) -> str:
    """``dsn``, else ``$SHARDSTORE_DSN``, else the embedded server's DSN."""
    if dsn:
        return dsn
    env = os.environ.get("SHARDSTORE_DSN")
    if env:
        return env
    from .embedded import embedded_dsn

    return embedded_dsn()


def _unreachable(exc: Exception) -> DatabaseUnavailable:
    return DatabaseUnavailable(f"cannot connect to the database: {str(exc).strip()}")


def probe(dsn: str, timeout: float) -> None:
    """One direct connection attempt, so that a wrong DSN fails at once with the server's
    reason instead of after the pool's retries."""
    try:
        psycopg.connect(dsn, connect_timeout=max(1, round(timeout)), autocommit=True).close()
    except psycopg.Error as exc:
        raise _unreachable(exc) from exc


async def aprobe(dsn: str, timeout: float) -> None:
    """asyncio version of :func:`probe`."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, connect_timeout=max(1, round(timeout)), autocommit=True
        )
        await conn.close()
    except psycopg.Error as exc:
        raise _unreachable(exc) from exc


def _server_hung_up(conn: Any) -> bool:
    # an idle connection has nothing to read: if its socket is readable, the server closed
    # it (restart, crash, idle timeout) or sent a termination notice. One poll, no round trip.
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def check_stale(conn: psycopg.Connection[Any]) -> None:
    """Pool check: ping only connections whose server hung up, so a restart costs no failed
    call and a healthy checkout costs no round trip."""
    if _server_hung_up(conn):
        ConnectionPool.check_connection(conn)


async def acheck_stale(conn: psycopg.AsyncConnection[Any]) -> None:
    """asyncio version of :func:`check_stale`."""
    if _server_hung_up(conn):
        await AsyncConnectionPool.check_connection(conn)


def connection_kwargs(settings: Settings) -> dict[str, Any]:
    # autocommit: a single-statement call (append, tail) is then one round trip and one
    # commit; multi-statement calls open an explicit transaction.
    return {"autocommit": True, "prepare_threshold": settings.prepare_threshold}


class Connector:
    """Hands out connections. Owns (and closes) a pool only if it created it."""

    def __init__(self, source: Any, settings: Settings) -> None:
        self._pool: ConnectionPool[Any] | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._owned = False
        self._lock = threading.Lock()
        self.dsn: str | None = None
        if isinstance(source, ConnectionPool):
            self._pool = source
        elif isinstance(source, psycopg.Connection):
            self._conn = source
        elif source is None or isinstance(source, str):
            self.dsn = resolve_dsn(source)
            probe(self.dsn, settings.connect_timeout)
            self._pool = ConnectionPool(
                self.dsn,
                min_size=settings.pool_min_size,
                max_size=settings.pool_max_size,
                kwargs=connection_kwargs(settings),
                open=False,
                name="shardstore",
                timeout=settings.connect_timeout,
                check=check_stale,
            )
            try:
                self._pool.open(wait=True, timeout=settings.connect_timeout)
            except Exception as exc:
                self._pool.close()
                raise _unreachable(exc) from exc
            self._owned = True
        else:
            raise ConfigurationError(
                "connect() takes a DSN string, a psycopg_pool.ConnectionPool or a "
                f"psycopg.Connection, not {type(source).__name__}"
            )

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._conn is not None:
            # one caller connection: run whole operations one at a time
            with self._lock:
                yield self._conn
            return
        assert self._pool is not None
        try:
            cm = self._pool.connection()
            conn = cm.__enter__()
        except psycopg.Error as exc:
            raise DatabaseUnavailable(f"no database connection available: {exc}") from exc
        except Exception as exc:  # pool timeout
            raise DatabaseUnavailable(f"no database connection available: {exc}") from exc
        try:
            yield conn
        except BaseException as exc:
            cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        else:
            cm.__exit__(None, None, None)

    @property
    def pooled(self) -> bool:
        """True when connections come from a pool (background work may take one)."""
        return self._pool is not None

    def close(self) -> None:
        if self._owned and self._pool is not None:
            self._pool.close()


class AsyncConnector:
    """The asyncio twin of :class:`Connector` (same sources, async pool)."""

    def __init__(self) -> None:
        self._pool: AsyncConnectionPool[Any] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._owned = False
        self._lock = asyncio.Lock()
        self.dsn: str | None = None

    @classmethod
    async def create(cls, source: Any, settings: Settings) -> AsyncConnector:
        self = cls()
        if isinstance(source, AsyncConnectionPool):
            self._pool = source
        elif isinstance(source, psycopg.AsyncConnection):
            self._conn = source
        elif source is None or isinstance(source, str):
            self.dsn = dsn = await asyncio.to_thread(resolve_dsn, source)
            await aprobe(dsn, settings.connect_timeout)
            self._pool = AsyncConnectionPool(
                dsn,
                min_size=settings.pool_min_size,
                max_size=settings.pool_max_size,
                kwargs=connection_kwargs(settings),
                open=False,
                name="shardstore-async",
                timeout=settings.connect_timeout,
                check=acheck_stale,
            )
            try:
                await self._pool.open(wait=True, timeout=settings.connect_timeout)
            except Exception as exc:
                await self._pool.close()
                raise _unreachable(exc) from exc
            self._owned = True
        else:
            raise ConfigurationError(
                "connect_async() takes a DSN string, a psycopg_pool.AsyncConnectionPool or a "
                f"psycopg.AsyncConnection, not {type(source).__name__}"
            )
        return self

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._conn is not None:
            async with self._lock:
                yield self._conn
            return
        assert self._pool is not None
        try:
            cm = self._pool.connection()
            conn = await cm.__aenter__()
        except Exception as exc:
            raise DatabaseUnavailable(f"no database connection available: {exc}") from exc
        try:
            yield conn
        except BaseException as exc:
            await cm.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        else:
            await cm.__aexit__(None, None, None)

    @property
    def pooled(self) -> bool:
        """True when connections come from a pool (background work may take one)."""
        return self._pool is not None

    async def close(self) -> None:
        if self._owned and self._pool is not None:
            await self._pool.close()
