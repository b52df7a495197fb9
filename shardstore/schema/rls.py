"""Tenant isolation with PostgreSQL Row-Level Security (docs/security.md).

Off by default. An operator turns it on once, as the owner of the shardstore tables::

    from . import rls
    rls.enable_rls(conn)                          # or: SELECT shardstore.enable_rls_v2();
    rls.grant_tenant_role(conn, "shardstore_app") # what a tenant role needs, nothing more

and the application makes one store per tenant::

    store = rls.connect_tenant(dsn, tenant="acme")  # sees and writes only acme's sessions

The policies compare each row's tenant with ``shardstore.rls_tenant_v2()``: the tenant
bound to the current role, if any (``grant_tenant_role(conn, role, tenant=...)``), else the
``shardstore.tenant_id`` setting. A store binds its tenant in every transaction it runs
(``SET LOCAL``, in the same round trip as the transaction's first statement), so nothing of
it stays on a server connection: that is what holds behind a transaction-mode pooler
(PgBouncer), which hands a server connection to another client after each transaction,
and what reaches the shards on Citus. :func:`set_session_tenant` is the one session-level
binding, for a direct connection only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from ..aio import AsyncStore
from ..base import record_partitioning, tenant_binding_op
from ..core import validate
from ..core.connector import AsyncConnector, Connector, TenantConnection
from ..core.executor import translate
from ..core.sql import query
from ..core.steps import Op, Q
from ..encryption import KeyStore, sealer_for
from ..errors import ConfigurationError, InvalidInput
from ..history.ops import configure_op
from ..history.tokens import TokenCounter, make_counter
from ..settings import Settings
from ..store import Store
from .migrate import all_migrations

__all__ = [
    "connect_tenant",
    "connect_tenant_async",
    "current_tenant",
    "disable_rls",
    "enable_rls",
    "grant_tenant_role",
    "rls_enabled",
    "set_session_tenant",
    "tenant_connection",
]


def _execute(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    try:
        with conn.transaction():
            return conn.execute(sql, params, prepare=False).fetchall()
    except psycopg.Error as exc:
        raise translate(exc) from exc


def _tenant(tenant_id: Any) -> str:
    return validate.text(tenant_id, "tenant_id")


def enable_rls(conn: psycopg.Connection[Any], *, force: bool = False) -> list[str]:
    """Turn row security on for every shardstore table and existing partition (idempotent).
    Run as the tables' owner. ``force=True`` subjects the owner too (it then needs BYPASSRLS
    for maintenance and cross-tenant purges). Returns the tables covered."""
    if type(force) is not bool:
        raise InvalidInput("force must be a bool")
    return [r[0] for r in _execute(conn, query("rls_enable"), (force,))]


def disable_rls(conn: psycopg.Connection[Any]) -> list[str]:
    """Turn row security off again (the policies stay, inert). Returns the tables."""
    return [r[0] for r in _execute(conn, query("rls_disable"))]


def rls_enabled(conn: psycopg.Connection[Any]) -> bool:
    """Whether row security is on for every table it covers."""
    return bool(_execute(conn, query("rls_enabled"))[0][0])


def grant_tenant_role(
    conn: psycopg.Connection[Any], role: str, *, tenant: str | None = None
) -> None:
    """Grant ``role`` (an existing, non-superuser role that does not own the tables) what the
    library needs; nothing on partitions, no CREATE. With ``tenant``, bind the role to that
    tenant: its connections see only that tenant whatever ``shardstore.tenant_id`` says."""
    bound = None if tenant is None else _tenant(tenant)
    if not isinstance(role, str) or not role:
        raise InvalidInput("role must be a non-empty string")
    _execute(conn, query("rls_grant_tenant_role"), (role, bound))


def set_session_tenant(conn: psycopg.Connection[Any], tenant_id: str) -> None:
    """Scope a connection to one tenant for its lifetime (``SET shardstore.tenant_id``),
    for raw SQL on a direct connection.

    **Unsafe behind a transaction-mode pooler** (PgBouncer, RDS Proxy, Supabase's and
    Neon's poolers): the setting lands on whichever server connection the pooler picked
    for that statement and stays there for the next client, so another client's reads may
    see this tenant's rows and this client's next statement may run without it. Stores
    never need it: :func:`connect_tenant` binds per transaction."""
    _execute(conn, query("rls_set_tenant"), (_tenant(tenant_id),))


def current_tenant(conn: psycopg.Connection[Any]) -> str | None:
    """The tenant the policies see on this connection now (None: no tenant, nothing
    visible): the role's binding, else the session's setting."""
    value = _execute(conn, query("rls_current_tenant"))[0][0]
    return None if value is None else str(value)


@contextmanager
def tenant_connection(dsn: str, tenant_id: str, **kwargs: Any) -> Iterator[TenantConnection]:
    """A new autocommit connection for ``tenant_id`` (closed on exit). Give it to
    :func:`connect_tenant` or :func:`shardstore.connect` to get a store that sees only that
    tenant's sessions: the store binds the tenant in every transaction it runs. The tenant
    is carried by the connection object, not set on the server, so this is safe behind a
    transaction-mode pooler; raw SQL on the connection itself sees no tenant (nothing)
    unless it binds one (``SET LOCAL shardstore.tenant_id`` in its own transaction)."""
    tenant = _tenant(tenant_id)
    kwargs.setdefault("autocommit", True)
    try:
        conn = TenantConnection.connect(dsn, **kwargs)
    except psycopg.Error as exc:
        raise translate(exc) from exc
    conn.tenant_id = tenant
    try:
        yield conn
    finally:
        conn.close()


def _schema_current_op() -> Op[None]:
    rows = yield Q("SELECT version, checksum FROM shardstore.schema_migrations ORDER BY version")
    found = {int(v): c for v, c in rows}
    missing = [m.version for m in all_migrations() if found.get(m.version) != m.checksum]
    if missing:
        raise ConfigurationError(
            f"the shardstore schema lacks (or differs in) migrations {missing}: run "
            "'shardstore init' or shardstore.connect() once as the owner of the schema"
        )


def _bound_tenant(tenant: Any) -> str | None:
    return None if tenant is None else _tenant(tenant)


def _tenant_setup_op(connector: Any, tenant: str | None, config: Settings) -> Op[Any]:
    """Bind the tenant, check the schema, read the partitioning (connect_tenant's setup)."""
    connector.prologue, role_bound = yield from tenant_binding_op(connector, tenant)
    if connector.prologue is None and not role_bound:
        raise ConfigurationError(
            "connect_tenant() needs a tenant: pass tenant=..., a DSN or connection that "
            "names one, or use a role bound to a tenant (grant_tenant_role(..., tenant=...))"
        )
    yield from _schema_current_op()
    return (yield from configure_op(config.partition_interval))


def connect_tenant(
    source: Any = None,
    *,
    tenant: str | None = None,
    tokenizer: TokenCounter | str | None = None,
    encryption: KeyStore | None = None,
    **settings: Any,
) -> Store:
    """A store that sees and writes only one tenant's sessions, for a role without DDL
    rights.

    ``source`` is what :func:`shardstore.connect` takes (a DSN, a pool, a connection;
    default ``$SHARDSTORE_DSN``). The tenant is ``tenant``, else the one ``source`` names (a
    :func:`tenant_connection`, a DSN with ``options=-c shardstore.tenant_id=...``), else the
    session setting of a single connection given as ``source`` (:func:`set_session_tenant`).
    The store binds it with ``SET LOCAL`` first in every transaction it runs, in the same
    round trip as that transaction's first statement: safe behind a transaction-mode
    pooler and on Citus, and nothing is left on the connection. A role bound to a tenant
    (``grant_tenant_role(..., tenant=...)``) needs no tenant here; otherwise a source that
    names none is a :class:`~shardstore.errors.ConfigurationError`.

    Unlike ``shardstore.connect`` it runs no migration and creates no partition (a tenant
    role may do neither; the owner migrates, ``shardstore maintain`` premakes): it checks
    that the schema is current and reads the partitioning. The tenant is fixed when the
    store is made. ``encryption``: as for :func:`shardstore.connect` (the tenant's sealed
    values are opened with the key store's data keys; a ciphertext of another tenant, were
    one copied into this tenant's rows, fails with ``DecryptionFailed``)."""
    bound = _bound_tenant(tenant)
    sealer = sealer_for(encryption)
    config = Settings.from_kwargs(settings)
    connector = Connector(source, config)
    store = Store(connector, config, make_counter(tokenizer))
    store.ctx = dataclasses.replace(store.ctx, sealer=sealer)
    try:
        record_partitioning(store, *store._run(_tenant_setup_op(connector, bound, config)))
    except BaseException:
        connector.close()
        raise
    return store


async def connect_tenant_async(
    source: Any = None,
    *,
    tenant: str | None = None,
    tokenizer: TokenCounter | str | None = None,
    encryption: KeyStore | None = None,
    **settings: Any,
) -> AsyncStore:
    """asyncio version of :func:`connect_tenant` (a DSN, an ``AsyncConnectionPool`` or an
    ``AsyncConnection``), returning an :class:`~shardstore.AsyncStore`; the same rules."""
    bound = _bound_tenant(tenant)
    sealer = sealer_for(encryption)
    config = Settings.from_kwargs(settings)
    connector = await AsyncConnector.create(source, config)
    store = AsyncStore(connector, config, make_counter(tokenizer))
    store.ctx = dataclasses.replace(store.ctx, sealer=sealer)
    try:
        record_partitioning(store, *(await store._run(_tenant_setup_op(connector, bound, config))))
    except BaseException:
        await connector.close()
        raise
    return store
