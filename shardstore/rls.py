"""Tenant isolation with PostgreSQL Row-Level Security (docs/security.md).

Off by default. An operator turns it on once, as the owner of the shardstore tables::

    from shardstore import rls
    rls.enable_rls(conn)                          # or: SELECT shardstore.enable_rls_v1();
    rls.grant_tenant_role(conn, "shardstore_app") # what a tenant role needs, nothing more

and the application scopes each connection to one tenant before handing it to the store::

    with rls.tenant_connection(dsn, "acme") as conn:
        store = shardstore.connect(conn)          # sees and writes only acme's sessions

The policies (migration 0004) compare each row's tenant with
``shardstore.rls_tenant_v1()``: the tenant bound to the current role, if any
(``grant_tenant_role(conn, role, tenant=...)``), else the ``shardstore.tenant_id`` setting.

On Citus the setting must be ``SET LOCAL`` inside each transaction to reach the shards: a
store from :func:`connect_tenant` on a distributed database binds its tenant that way in
every transaction it runs (``shardstore/core/binding.py``, docs/scale-out.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from .aio import AsyncStore
from .core import validate
from .core.connector import AsyncConnector, Connector
from .core.executor import translate
from .core.steps import Op, Q
from .errors import ConfigurationError, InvalidInput
from .history import configure_op
from .migrate import all_migrations
from .settings import Settings
from .sql import query
from .store import Store
from .tokens import TokenCounter, make_counter

__all__ = [
    "connect_tenant",
    "connect_tenant_async",
    "current_tenant",
    "disable_rls",
    "enable_rls",
    "grant_tenant_role",
    "rls_enabled",
    "set_tenant",
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


def set_tenant(conn: psycopg.Connection[Any], tenant_id: str) -> None:
    """Scope a connection to one tenant for its lifetime (``SET shardstore.tenant_id``)."""
    _execute(conn, query("rls_set_tenant"), (_tenant(tenant_id),))


def current_tenant(conn: psycopg.Connection[Any]) -> str | None:
    """The tenant the policies see on this connection (None: no tenant, nothing visible)."""
    value = _execute(conn, query("rls_current_tenant"))[0][0]
    return None if value is None else str(value)


@contextmanager
def tenant_connection(dsn: str, tenant_id: str, **kwargs: Any) -> Iterator[psycopg.Connection[Any]]:
    """A new autocommit connection scoped to ``tenant_id`` (closed on exit). Give it to
    :func:`shardstore.connect` to get a store that sees only that tenant's sessions."""
    tenant = _tenant(tenant_id)
    kwargs.setdefault("autocommit", True)
    try:
        conn = psycopg.connect(dsn, **kwargs)
    except psycopg.Error as exc:
        raise translate(exc) from exc
    try:
        set_tenant(conn, tenant)
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


def _binding_op(tenant: str | None, per_transaction: bool | None) -> Op[Q | None]:
    """The statement that binds the store's tenant in each transaction, or None (the
    connection's session-level setting, or the role's binding, decides as before)."""
    setting, role_bound, distributed = yield Q(query("rls_store_binding"), fetch="one")
    chosen = tenant if tenant is not None else setting
    per = (bool(distributed) and not role_bound) if per_transaction is None else per_transaction
    if not per:
        if tenant is not None:  # what set_tenant() does: for the connection's lifetime
            yield Q(query("rls_set_tenant"), (tenant,), fetch="one")
        return None
    if chosen is None:  # no tenant to bind: the store sees nothing, as before
        return None
    return Q(query("rls_bind_tenant"), (str(chosen),), fetch="none")


def _tenant_args(tenant: Any, per_transaction: Any) -> tuple[str | None, bool | None]:
    bound = None if tenant is None else _tenant(tenant)
    per = None if per_transaction is None else validate.flag(per_transaction, "per_transaction")
    return bound, per


def connect_tenant(
    conn: psycopg.Connection[Any],
    *,
    tenant: str | None = None,
    per_transaction: bool | None = None,
    tokenizer: TokenCounter | str | None = None,
    **settings: Any,
) -> Store:
    """A store on a tenant-scoped connection of a role without DDL rights.

    Like ``shardstore.connect(conn)``, but runs no migration and creates no partition (a
    tenant role may do neither; the owner migrates, ``shardstore maintain`` premakes): it
    checks that the schema is current and reads the partitioning. The store then sees and
    writes only the tenant of ``conn`` (:func:`set_tenant` / :func:`tenant_connection`), or
    ``tenant`` when given.

    ``per_transaction`` says how the tenant is bound. True: ``SET LOCAL
    shardstore.tenant_id`` first in every transaction the store runs (a single statement
    runs in a transaction of its own for it), so that on Citus every shard query sees the
    tenant; the connection's own setting is left as it is. False: the session-level
    setting decides (``tenant`` given: set for the connection's lifetime, as
    :func:`set_tenant`). None (default): per transaction where the store is distributed
    (Citus) and the role is not bound to a tenant, else the session-level setting (plain
    PostgreSQL: nothing changes; a bound role's binding holds on every shard by itself).
    The tenant is fixed when the store is made."""
    if not isinstance(conn, psycopg.Connection):
        raise ConfigurationError("connect_tenant() takes a psycopg.Connection")
    bound, per = _tenant_args(tenant, per_transaction)
    config = Settings.from_kwargs(settings)
    connector = Connector(conn, config)
    store = Store(connector, config, make_counter(tokenizer))
    connector.binding = store._run(_binding_op(bound, per))
    store._run(_schema_current_op())
    store._partitioning(*store._run(configure_op(config.partition_interval)))
    return store


async def connect_tenant_async(
    conn: psycopg.AsyncConnection[Any],
    *,
    tenant: str | None = None,
    per_transaction: bool | None = None,
    tokenizer: TokenCounter | str | None = None,
    **settings: Any,
) -> AsyncStore:
    """asyncio version of :func:`connect_tenant` (an ``AsyncConnection`` scoped to a tenant,
    or ``tenant``), returning an :class:`~shardstore.AsyncStore`; the same binding rules."""
    if not isinstance(conn, psycopg.AsyncConnection):
        raise ConfigurationError("connect_tenant_async() takes a psycopg.AsyncConnection")
    bound, per = _tenant_args(tenant, per_transaction)
    config = Settings.from_kwargs(settings)
    connector = await AsyncConnector.create(conn, config)
    store = AsyncStore(connector, config, make_counter(tokenizer))
    connector.binding = await store._run(_binding_op(bound, per))
    await store._run(_schema_current_op())
    store._partitioning(*(await store._run(configure_op(config.partition_interval))))
    return store
