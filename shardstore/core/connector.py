"""The one connector: turns a DSN, a psycopg pool or a psycopg connection (or a SQLAlchemy
engine or connection on the psycopg 3 driver) into a source of connections (``acquire`` /
``release``) for the driver. Sync and asyncio flavours share the resolution and the pool
settings; they differ only where psycopg does."""

from __future__ import annotations

import asyncio
import os
import re
import select
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..errors import ConfigurationError, ConnectionRejected, DatabaseError, DatabaseUnavailable
from ..settings import Settings


def resolve_dsn(dsn: str | None) -> str:
    """``dsn``, else ``$SHARDSTORE_DSN``, else the embedded server's DSN."""
    if dsn:
        return dsn
    env = os.environ.get("SHARDSTORE_DSN")
    if env:
        return env
    from ..embedded_server import embedded_dsn

    dsn = embedded_dsn()
    return dsn


TENANT_SETTING = "shardstore.tenant_id"


class TenantConnection(psycopg.Connection[Any]):
    """A psycopg connection that carries the tenant it is for, on the client only: no
    session state is set on the server (a transaction-mode pooler would hand that to the
    next client). A store made from it binds ``tenant_id`` in every transaction it runs
    (:func:`shardstore.schema.rls.tenant_connection`)."""

    tenant_id: str | None = None


class AsyncTenantConnection(psycopg.AsyncConnection[Any]):
    """The asyncio flavour of :class:`TenantConnection`."""

    tenant_id: str | None = None


def _tenant_in_options(options: str | None) -> str | None:
    """The ``shardstore.tenant_id`` a libpq ``options`` string sets (``-c name=value``,
    ``-cname=value`` or ``--name=value``; a backslash escapes a space), the last one if
    several do."""
    if not options:
        return None
    words = re.split(r"(?<!\\)\s+", options.strip())
    found: str | None = None
    for i, word in enumerate(words):
        if word == "-c" and i + 1 < len(words):
            word = words[i + 1]
        elif word.startswith(("-c", "--")):
            word = word[2:]
        else:
            continue
        name, sep, value = word.partition("=")
        if sep and name == TENANT_SETTING:
            found = re.sub(r"\\(.)", r"\1", value) or None
    return found


def source_tenant(source: Any) -> str | None:
    """The tenant a connection source names on the client side: a
    :class:`TenantConnection`'s, or the one a DSN (or a pool's conninfo) sets with
    ``options=-c shardstore.tenant_id=...`` (``$PGOPTIONS`` too). A store binds it per
    transaction, so that it holds behind a transaction-mode pooler, which does not pass
    startup options on to each server connection it uses."""
    tenant = getattr(source, "tenant_id", None)
    if isinstance(source, TenantConnection | AsyncTenantConnection):
        return tenant if isinstance(tenant, str) else None
    conninfo = source if isinstance(source, str) else getattr(source, "conninfo", None)
    if not isinstance(conninfo, str):
        return None
    try:
        options = conninfo_to_dict(conninfo).get("options")
    except psycopg.Error as exc:
        raise ConnectionRejected(f"invalid DSN: {str(exc).strip()}") from exc
    return _tenant_in_options(str(options) if options else os.environ.get("PGOPTIONS"))


_SERVER_PID = "SELECT pg_backend_pid()"


def _pid_differs(conn: Any, server_pid: Any) -> bool:
    # a direct connection's BackendKeyData names its server process; a pooler (PgBouncer,
    # RDS Proxy, Supavisor) sends a key of its own, since the server process changes
    return bool(server_pid is not None and conn.info.backend_pid != server_pid[0])


def behind_pooler(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` reaches PostgreSQL through a connection pooler (one round trip)."""
    return _pid_differs(conn, conn.execute(_SERVER_PID, prepare=False).fetchone())


async def abehind_pooler(conn: psycopg.AsyncConnection[Any]) -> bool:
    """asyncio version of :func:`behind_pooler`."""
    cur = await conn.execute(_SERVER_PID, prepare=False)
    return _pid_differs(conn, await cur.fetchone())


# what libpq and the server say when the settings, not the network or the server's state,
# stop a connection: a malformed option value is refused before any connection is tried
# ("connection is bad: invalid port number"; a missing socket is "connection is bad" too,
# and stays retryable); the rest are the server's FATAL messages (libpq gives no SQLSTATE
# for a failed connection, so the text is all there is)
_REJECTED = re.compile(
    r"connection is bad: invalid |FATAL:\s+(database \S+ does not exist|role \S+ does not exist"
    r"|password authentication failed|no pg_hba\.conf entry|permission denied for database"
    r"|Peer authentication failed|Ident authentication failed)"
)


def _unreachable(exc: Exception) -> DatabaseUnavailable | ConnectionRejected:
    """The error for a failed connection attempt: :class:`ConnectionRejected` when the
    settings are wrong (retrying cannot help), else :class:`DatabaseUnavailable`."""
    reason = str(exc).strip()
    if _REJECTED.search(reason):
        return ConnectionRejected(f"the database refused the connection settings: {reason}")
    return DatabaseUnavailable(f"cannot connect to the database: {reason}")


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


class LifoConnectionPool(ConnectionPool[Any]):
    """psycopg_pool's pool, except that a checkout gets the connection returned last.

    psycopg_pool hands out its idle connections in FIFO order, so one thread's consecutive
    calls rotate over every idle connection: each call lands on a server backend that has not
    run for a while (cold caches; on a small machine, a context switch). Measured with 9 idle
    connections, one caller, interleaved on a quiet 2-core VM: append_turn p50 0.84x
    [0.78-0.87] and tail(20) 0.89x [0.85-0.92] of the FIFO pool's, the same as a pool of one
    connection (docs/decisions/0006-folds-keep-the-tail-buffered.md). Taking the newest
    instead keeps a lone caller on one hot backend; the oldest idle connections stay at the
    other end, which is where the pool's shrinking takes them from. Only the order changes
    (under the pool's own lock); if psycopg_pool renames what this overrides, the pool is
    FIFO again, nothing else."""

    def _get_ready_connection(self, timeout: float | None) -> Any:
        idle = getattr(self, "_pool", None)
        if idle is not None and len(idle) > 1:
            idle.rotate(1)  # the newest (right end) to the front, where the base pops
        return super()._get_ready_connection(timeout)


class LifoAsyncConnectionPool(AsyncConnectionPool[Any]):
    """The asyncio flavour of :class:`LifoConnectionPool`."""

    async def _get_ready_connection(self, timeout: float | None) -> Any:
        idle = getattr(self, "_pool", None)
        if idle is not None and len(idle) > 1:
            idle.rotate(1)
        return await super()._get_ready_connection(timeout)


def _no_connection(exc: Exception) -> DatabaseUnavailable:
    return DatabaseUnavailable(f"no database connection available: {exc}")


def _wrong_source(what: str, kinds: str, source: Any) -> ConfigurationError:
    return ConfigurationError(f"{what}() takes {kinds}, not {type(source).__name__}")


# ---------------------------------------------------------------- SQLAlchemy sources
#
# A SQLAlchemy Engine is a source of connections like a pool; a SQLAlchemy Connection is
# the caller's connection, like a psycopg one. Both must be on the psycopg 3 driver, whose
# raw connection the driver then runs on. sqlalchemy is imported only when a source comes
# from it, so shardstore never needs it otherwise.


def _sqlalchemy_kind(source: Any) -> str | None:
    """``"engine"``, ``"connection"``, ``"async_engine"`` or ``"async_connection"`` for a
    SQLAlchemy source; None for anything else (sqlalchemy not imported then)."""
    if not type(source).__module__.startswith("sqlalchemy."):
        return None
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    kinds = (
        (AsyncEngine, "async_engine"),
        (AsyncConnection, "async_connection"),
        (Engine, "engine"),
        (Connection, "connection"),
    )
    for cls, kind in kinds:
        if isinstance(source, cls):
            _check_driver(source.dialect, kind)
            return kind
    return None


def _check_driver(dialect: Any, kind: str) -> None:
    wanted = "psycopg_async" if kind.startswith("async") else "psycopg"
    if dialect.name != "postgresql" or dialect.driver not in ("psycopg", "psycopg_async"):
        raise ConfigurationError(
            f"a SQLAlchemy {kind.replace('_', ' ')} for shardstore must use the psycopg 3 "
            f"driver (postgresql+{wanted}://...), not {dialect.name}+{dialect.driver}"
        )


def _sqlalchemy_closed(exc: Exception) -> DatabaseError:
    # not retryable: the application must roll back or reopen its connection first
    return DatabaseError(f"the SQLAlchemy connection cannot be used: {exc}")


def _join_sqlalchemy(sa_conn: Any) -> psycopg.Connection[Any]:
    """The raw psycopg connection of a SQLAlchemy Connection, inside the application's
    transaction: begun the way its own first statement would begin it (SQLAlchemy's
    autobegin, then psycopg's implicit BEGIN), so that shardstore's transaction blocks
    are savepoints in it and its commit or rollback decides. Under the AUTOCOMMIT
    isolation level statements commit as they run, as the application's own do."""
    try:
        raw: psycopg.Connection[Any] = sa_conn.connection.dbapi_connection
        if raw.autocommit:
            return raw
        if not sa_conn.in_transaction():
            sa_conn.begin()
    except Exception as exc:  # closed, invalidated: SQLAlchemy's own errors
        raise _sqlalchemy_closed(exc) from exc
    if raw.info.transaction_status == TransactionStatus.IDLE:
        # psycopg begins on the next statement; a transaction block opened on an idle
        # connection would instead commit on its own, outside the application's control
        raw.execute("SELECT 1")
    return raw


async def _ajoin_sqlalchemy(sa_conn: Any) -> psycopg.AsyncConnection[Any]:
    """asyncio version of :func:`_join_sqlalchemy` (a SQLAlchemy AsyncConnection)."""
    try:
        raw: psycopg.AsyncConnection[Any] = (await sa_conn.get_raw_connection()).driver_connection
        if raw.autocommit:
            return raw
        if not sa_conn.in_transaction():
            await sa_conn.begin()
    except Exception as exc:
        raise _sqlalchemy_closed(exc) from exc
    if raw.info.transaction_status == TransactionStatus.IDLE:
        await raw.execute("SELECT 1")
    return raw


class _Slots:
    """Where a connector keeps its source, sync or asyncio alike: a pool (its own or the
    caller's), the caller's connection, or a SQLAlchemy engine or connection."""

    # a Q run first in every transaction, in the same round trip as the statement after it
    # (a tenant store's binding: partition_manager.driver); in_block: a statement outside a
    # transaction runs with it in an explicit transaction block, not the implicit one
    prologue: Any = None
    prologue_in_block = False
    _pool: Any
    _conn: Any
    _engine: Any
    _sa_conn: Any

    def _adopt(
        self, source: Any, pool_type: type, conn_type: type, sa_kinds: tuple[str, str]
    ) -> bool:
        """Keep a caller's source in the slot for its kind (a pool, a connection, a
        SQLAlchemy engine or connection of the kinds ``sa_kinds`` names); False for any
        other source (a DSN, None, or something that is no source)."""
        kind = _sqlalchemy_kind(source)
        if isinstance(source, pool_type):
            self._pool = source
        elif isinstance(source, conn_type):
            self._conn = source
        elif kind == sa_kinds[0]:
            self._engine = source
        elif kind == sa_kinds[1]:
            self._sa_conn = source
        else:
            return False
        return True

    @property
    def pooled(self) -> bool:
        """True when connections come from a pool (background work may take one)."""
        return self._pool is not None or self._engine is not None

    @property
    def single(self) -> bool:
        """True when every operation runs on the caller's one connection."""
        return self._conn is not None or self._sa_conn is not None


class Connector(_Slots):
    """Hands out connections. Owns (and closes) a pool only if it created it. A caller's
    connection runs one whole operation at a time."""

    def __init__(self, source: Any, settings: Settings) -> None:
        self.tenant = source_tenant(source)
        self.pooler: bool | None = None  # reached through a connection pooler (first acquire)
        self._pool: ConnectionPool[Any] | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._engine: Any = None  # a SQLAlchemy Engine
        self._sa_conn: Any = None  # a SQLAlchemy Connection
        self._borrowed: dict[int, Any] = {}  # raw connection id -> its SQLAlchemy Connection
        self._owned = False
        self._lock = threading.Lock()
        self.dsn: str | None = None
        if self._adopt(source, ConnectionPool, psycopg.Connection, ("engine", "connection")):
            pass
        elif source is None or isinstance(source, str):
            self.dsn = resolve_dsn(source)
            probe(self.dsn, settings.connect_timeout)
            options = pool_options(settings, "shardstore", check_stale)
            self._pool = LifoConnectionPool(self.dsn, **options)
            try:
                self._pool.open(wait=True, timeout=settings.connect_timeout)
            except Exception as exc:
                self._pool.close()
                raise _unreachable(exc) from exc
            self._owned = True
        else:
            raise _wrong_source(
                "connect",
                "a DSN string, a psycopg_pool.ConnectionPool, a psycopg.Connection, or a "
                "SQLAlchemy Engine or Connection (postgresql+psycopg)",
                source,
            )

    def acquire(self) -> psycopg.Connection[Any]:
        """A connection for one operation; give it back with :meth:`release`.

        Behind a connection pooler (found on the first connection) every connection runs
        its statements unprepared: a transaction-mode pooler sends each transaction to any
        server connection, where a statement prepared on another one does not exist."""
        conn = self._acquire()
        if self.pooler is None:  # two threads finding it at once find the same
            # a broken connection: the operation's own first statement reports it
            with suppress(psycopg.Error):
                self.pooler = behind_pooler(conn)
        if self.pooler:
            conn.prepare_threshold = None
        return conn

    def _acquire(self) -> psycopg.Connection[Any]:
        if self._conn is not None:
            self._lock.acquire()
            return self._conn
        if self._sa_conn is not None:
            self._lock.acquire()
            try:
                return _join_sqlalchemy(self._sa_conn)
            except BaseException:
                self._lock.release()
                raise
        if self._engine is not None:
            return self._borrow()
        assert self._pool is not None
        try:
            conn: psycopg.Connection[Any] = self._pool.getconn()
            return conn
        except Exception as exc:  # pool timeout, pool closed, server gone
            raise _no_connection(exc) from exc

    def release(self, conn: psycopg.Connection[Any]) -> None:
        """Give back a connection from :meth:`acquire` (a broken one is discarded)."""
        if self._conn is not None or self._sa_conn is not None:
            self._lock.release()
        elif self._engine is not None:
            self._give_back(conn)
        elif self._pool is not None:
            self._pool.putconn(conn)

    def _borrow(self) -> psycopg.Connection[Any]:
        # a connection of the engine's pool, in autocommit as the store's own pool's are;
        # SQLAlchemy restores its isolation level when it goes back
        try:
            sa_conn = self._engine.connect()
        except Exception as exc:  # the engine's pool timeout, the server gone
            raise _no_connection(exc) from exc
        try:
            sa_conn.execution_options(isolation_level="AUTOCOMMIT")
            raw: psycopg.Connection[Any] = sa_conn.connection.dbapi_connection
        except BaseException:
            sa_conn.close()
            raise
        with self._lock:
            self._borrowed[id(raw)] = sa_conn
        return raw

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            sa_conn = self._borrowed.pop(id(conn))
        if conn.closed or getattr(conn, "broken", False):
            sa_conn.invalidate()  # the engine's pool opens a new one for the next caller
        sa_conn.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for a block of the caller's own statements (tests, benchmarks)."""
        conn = self.acquire()
        try:
            yield conn
        finally:
            self.release(conn)

    def close(self) -> None:
        """Close the pool if this connector created it."""
        if self._owned and self._pool is not None:
            self._pool.close()


class AsyncConnector(_Slots):
    """The asyncio flavour of :class:`Connector` (same sources, async pool)."""

    def __init__(self) -> None:
        self.tenant: str | None = None
        self.pooler: bool | None = None  # as Connector.pooler
        self._pool: AsyncConnectionPool[Any] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._engine: Any = None  # a SQLAlchemy AsyncEngine
        self._sa_conn: Any = None  # a SQLAlchemy AsyncConnection
        self._borrowed: dict[int, Any] = {}
        self._owned = False
        self._lock = asyncio.Lock()
        self.dsn: str | None = None

    @classmethod
    async def create(cls, source: Any, settings: Settings) -> AsyncConnector:
        """Resolve ``source`` (a DSN, an AsyncConnectionPool or an AsyncConnection, or a
        SQLAlchemy AsyncEngine or AsyncConnection on psycopg)."""
        self = cls()
        self.tenant = source_tenant(source)
        sa_kinds = ("async_engine", "async_connection")
        if self._adopt(source, AsyncConnectionPool, psycopg.AsyncConnection, sa_kinds):
            pass
        elif source is None or isinstance(source, str):
            self.dsn = dsn = await asyncio.to_thread(resolve_dsn, source)
            await aprobe(dsn, settings.connect_timeout)
            options = pool_options(settings, "shardstore-async", acheck_stale)
            self._pool = LifoAsyncConnectionPool(dsn, **options)
            try:
                await self._pool.open(wait=True, timeout=settings.connect_timeout)
            except Exception as exc:
                await self._pool.close()
                raise _unreachable(exc) from exc
            self._owned = True
        else:
            raise _wrong_source(
                "connect_async",
                "a DSN string, a psycopg_pool.AsyncConnectionPool, a psycopg.AsyncConnection, "
                "or a SQLAlchemy AsyncEngine or AsyncConnection (postgresql+psycopg)",
                source,
            )
        return self

    async def acquire(self) -> psycopg.AsyncConnection[Any]:
        """See :meth:`Connector.acquire` (pooler included)."""
        conn = await self._acquire()
        if self.pooler is None:
            with suppress(psycopg.Error):  # as Connector.acquire
                self.pooler = await abehind_pooler(conn)
        if self.pooler:
            conn.prepare_threshold = None
        return conn

    async def _acquire(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is not None:
            await self._lock.acquire()
            return self._conn
        if self._sa_conn is not None:
            await self._lock.acquire()
            try:
                return await _ajoin_sqlalchemy(self._sa_conn)
            except BaseException:
                self._lock.release()
                raise
        if self._engine is not None:
            return await self._borrow()
        assert self._pool is not None
        try:
            conn: psycopg.AsyncConnection[Any] = await self._pool.getconn()
            return conn
        except Exception as exc:
            raise _no_connection(exc) from exc

    async def release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """See :meth:`Connector.release`."""
        if self._conn is not None or self._sa_conn is not None:
            self._lock.release()
        elif self._engine is not None:
            await self._give_back(conn)
        elif self._pool is not None:
            await self._pool.putconn(conn)

    async def _borrow(self) -> psycopg.AsyncConnection[Any]:
        try:
            sa_conn = await self._engine.connect()
        except Exception as exc:
            raise _no_connection(exc) from exc
        try:
            await sa_conn.execution_options(isolation_level="AUTOCOMMIT")
            raw: psycopg.AsyncConnection[Any] = (
                await sa_conn.get_raw_connection()
            ).driver_connection
        except BaseException:
            await sa_conn.close()
            raise
        self._borrowed[id(raw)] = sa_conn
        return raw

    async def _give_back(self, conn: psycopg.AsyncConnection[Any]) -> None:
        sa_conn = self._borrowed.pop(id(conn))
        if conn.closed or getattr(conn, "broken", False):
            await sa_conn.invalidate()
        await sa_conn.close()

    async def close(self) -> None:
        """Close the pool if this connector created it."""
        if self._owned and self._pool is not None:
            await self._pool.close()
