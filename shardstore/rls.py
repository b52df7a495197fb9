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
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from .core import validate
from .core.connector import Connector
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


def connect_tenant(
    conn: psycopg.Connection[Any], *, tokenizer: TokenCounter | str | None = None, **settings: Any
) -> Store:
    """A store on a tenant-scoped connection of a role without DDL rights.

    Like ``shardstore.connect(conn)``, but runs no migration and creates no partition (a
    tenant role may do neither; the owner migrates, ``shardstore maintain`` premakes): it
    checks that the schema is current and reads the partitioning. The store then sees and
    writes only the tenant of ``conn`` (:func:`set_tenant` / :func:`tenant_connection`)."""
    if not isinstance(conn, psycopg.Connection):
        raise ConfigurationError("connect_tenant() takes a psycopg.Connection")
    config = Settings.from_kwargs(settings)
    store = Store(Connector(conn, config), config, make_counter(tokenizer))
    store._run(_schema_current_op())
    store._partitioning(*store._run(configure_op(config.partition_interval)))
    return store
