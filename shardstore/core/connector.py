"""The one connector: turns a DSN, a psycopg pool or a psycopg connection into a source of
connections (``acquire`` / ``release``) for the driver. Sync and asyncio flavours share the
resolution and the pool settings; they differ only where psycopg does."""

from __future__ import annotations

import asyncio
import os
import select
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..errors import ConfigurationError, DatabaseUnavailable
from ..settings import Settings


def resolve_dsn(dsn: str | None) -> str:
    """``dsn``, else ``$SHARDSTORE_DSN``, else the embedded server's DSN."""
    if dsn:
        return dsn
    env = os.environ.get("SHARDSTORE_DSN")
    if env:
        return env
    from ..embedded import embedded_dsn

    dsn = embedded_dsn()
    return dsn


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


def pool_options(settings: Settings, name: str, check: Any) -> dict[str, Any]:
    """Options of a pool the store creates (sync or asyncio)."""
    # autocommit: a single-statement call (append, tail) is then one round trip and one
    # commit; multi-statement calls open an explicit transaction.
    return {
        "min_size": settings.pool_min_size,
        "max_size": settings.pool_max_size,
        "kwargs": {"autocommit": True, "prepare_threshold": settings.prepare_threshold},
        "open": False,
        "name": name,
        "timeout": settings.connect_timeout,
        "check": check,
    }


def _no_connection(exc: Exception) -> DatabaseUnavailable:
    return DatabaseUnavailable(f"no database connection available: {exc}")


def _wrong_source(what: str, kinds: str, source: Any) -> ConfigurationError:
    return ConfigurationError(f"{what}() takes {kinds}, not {type(source).__name__}")


class Connector:
    """Hands out connections. Owns (and closes) a pool only if it created it. A caller's
    connection runs one whole operation at a time."""

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
            options = pool_options(settings, "shardstore", check_stale)
            self._pool = ConnectionPool(self.dsn, **options)
            try:
                self._pool.open(wait=True, timeout=settings.connect_timeout)
            except Exception as exc:
                self._pool.close()
                raise _unreachable(exc) from exc
            self._owned = True
        else:
            raise _wrong_source(
                "connect",
                "a DSN string, a psycopg_pool.ConnectionPool or a psycopg.Connection",
                source,
            )

    def acquire(self) -> psycopg.Connection[Any]:
        """A connection for one operation; give it back with :meth:`release`."""
        if self._conn is not None:
            self._lock.acquire()
            return self._conn
        assert self._pool is not None
        try:
            conn: psycopg.Connection[Any] = self._pool.getconn()
            return conn
        except Exception as exc:  # pool timeout, pool closed, server gone
            raise _no_connection(exc) from exc

    def release(self, conn: psycopg.Connection[Any]) -> None:
        """Give back a connection from :meth:`acquire` (a broken one is discarded)."""
        if self._conn is not None:
            self._lock.release()
        elif self._pool is not None:
            self._pool.putconn(conn)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for a block of the caller's own statements (tests, benchmarks)."""
        conn = self.acquire()
        try:
            yield conn
        finally:
            self.release(conn)

    @property
    def pooled(self) -> bool:
        """True when connections come from a pool (background work may take one)."""
        return self._pool is not None

    def close(self) -> None:
        """Close the pool if this connector created it."""
        if self._owned and self._pool is not None:
            self._pool.close()


class AsyncConnector:
    """The asyncio flavour of :class:`Connector` (same sources, async pool)."""

    def __init__(self) -> None:
        self._pool: AsyncConnectionPool[Any] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._owned = False
        self._lock = asyncio.Lock()
        self.dsn: str | None = None

    @classmethod
    async def create(cls, source: Any, settings: Settings) -> AsyncConnector:
        """Resolve ``source`` (a DSN, an AsyncConnectionPool or an AsyncConnection)."""
        self = cls()
        if isinstance(source, AsyncConnectionPool):
            self._pool = source
        elif isinstance(source, psycopg.AsyncConnection):
            self._conn = source
        elif source is None or isinstance(source, str):
            self.dsn = dsn = await asyncio.to_thread(resolve_dsn, source)
            await aprobe(dsn, settings.connect_timeout)
            options = pool_options(settings, "shardstore-async", acheck_stale)
            self._pool = AsyncConnectionPool(dsn, **options)
            try:
                await self._pool.open(wait=True, timeout=settings.connect_timeout)
            except Exception as exc:
                await self._pool.close()
                raise _unreachable(exc) from exc
            self._owned = True
        else:
            raise _wrong_source(
                "connect_async",
                "a DSN string, a psycopg_pool.AsyncConnectionPool or a psycopg.AsyncConnection",
                source,
            )
        return self

    async def acquire(self) -> psycopg.AsyncConnection[Any]:
        """See :meth:`Connector.acquire`."""
        if self._conn is not None:
            await self._lock.acquire()
            return self._conn
        assert self._pool is not None
        try:
            conn: psycopg.AsyncConnection[Any] = await self._pool.getconn()
            return conn
        except Exception as exc:
            raise _no_connection(exc) from exc

    async def release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """See :meth:`Connector.release`."""
        if self._conn is not None:
            self._lock.release()
        elif self._pool is not None:
            await self._pool.putconn(conn)

    @property
    def pooled(self) -> bool:
        """True when connections come from a pool (background work may take one)."""
        return self._pool is not None

    async def close(self) -> None:
        """Close the pool if this connector created it."""
        if self._owned and self._pool is not None:
            await self._pool.close()
