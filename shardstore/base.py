"""What :class:`~shardstore.Store` and :class:`~shardstore.AsyncStore` share: their state,
their setup and the store methods that belong to no single feature."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from .core import validate
from .core.context import Context
from .core.sql import query
from .core.state import StoreState
from .core.steps import Op, Q
from .history.ops import configure_op
from .history.tokens import TokenCounter
from .lifecycle.maintenance import premake_op
from .schema.migrate import migrate_op
from .search.vectors import VectorState, check_model_op
from .settings import Settings


class StoreBase:
    """State of a store: settings, tokenizer, partitioning, embedding model, connector.
    The two stores add how operations run (sync or asyncio) and their method bindings."""

    background_folder: Any = None
    artifact_config: Any = None  # shardstore.artifacts.config.ArtifactConfig, set by connect()

    def __init__(self, connector: Any, settings: Settings, counter: TokenCounter) -> None:
        self.connector = connector
        self.settings = settings
        self.ctx = Context(settings, counter)
        self.vector_state = VectorState(settings.embedding_model)
        self.partition_interval: timedelta = settings.partition_interval or timedelta(days=7)

    @property
    def dsn(self) -> str | None:
        """The DSN this store connected with (resolved from the environment or the embedded
        server when not given); None when it was given a pool or a connection."""
        dsn: str | None = self.connector.dsn
        return dsn


def record_partitioning(store: StoreState, interval: timedelta, origin: Any) -> None:
    """Give the store the partitioning read from the database (``shardstore.config``)."""
    store.partition_interval = interval
    store.ctx = dataclasses.replace(store.ctx, partition_interval=interval, partition_origin=origin)


def setup_op(store: StoreState) -> Op[None]:
    """Make the schema current, read (or record) the partitioning, premake partitions and
    check the embedding model against the one recorded in the database."""
    yield from migrate_op()
    store.connector.prologue, _ = yield from tenant_binding_op(store.connector, None)
    interval, origin = yield from configure_op(store.settings.partition_interval)
    record_partitioning(store, interval, origin)
    yield from premake_op(store.settings.premake)
    yield from check_model_op(store.settings.embedding_model)


def tenant_binding_op(connector: Any, tenant: str | None) -> Op[tuple[Q | None, bool]]:
    """The statement that binds a store's tenant in every transaction it runs (the
    connector's prologue, run in the same round trip as each transaction's first
    statement), or None where nothing needs binding; and whether the role is bound.

    The tenant is ``tenant`` when given, else the one the source names on the client
    (:func:`~shardstore.core.connector.source_tenant`: a tenant connection, a DSN's
    ``options``), else, for the caller's one connection, the tenant its session setting
    names now (read once: the store is bound to it from then on). Nothing is bound for a
    role bound to a tenant (its binding decides, on every node) or where no tenant is
    named (the owner). A pool's server-side session settings are never read: behind a
    transaction-mode pooler they belong to whichever client set them last."""
    if tenant is None:
        tenant = connector.tenant
    setting, role_bound, distributed = yield Q(query("rls_store_binding"), fetch="one")
    if role_bound:
        return None, True
    if tenant is None and connector.single:
        tenant = setting
    if tenant is None:
        return None, False
    # on Citus only a SET LOCAL inside a transaction block reaches the shards
    connector.prologue_in_block = bool(distributed)
    name = "rls_bind_tenant_distributed" if distributed else "rls_bind_tenant"
    return Q(query(name), (tenant,), fetch="none", prepare=False), False


def premake_partitions(store: StoreState, premake: int | None = None) -> Op[list[str]]:
    """Create the current partition and ``premake`` (an int from 0 to 1000; default: the
    store's setting) more ahead; returns new names. ``InvalidInput`` for another value."""
    ahead = store.settings.premake if premake is None else premake
    created: list[str] = yield from premake_op(validate.count(ahead, "premake", low=0, high=1000))
    return created
