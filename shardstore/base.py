"""What :class:`~shardstore.Store` and :class:`~shardstore.AsyncStore` share: their state,
their setup and the store methods that belong to no single feature."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from .core.context import Context
from .core.steps import Op, Q
from .history import configure_op
from .maintenance import premake_op
from .migrate import migrate_op
from .settings import Settings
from .sql import query
from .tokens import TokenCounter
from .vector_ops import VectorState, check_model_op


class StoreBase:
    """State of a store: settings, tokenizer, partitioning, embedding model, connector.
    The two stores add how operations run (sync or asyncio) and their method bindings."""

    _folder: Any = None
    _artifacts: Any = None  # shardstore.artifacts.config.ArtifactConfig, set by connect()

    def __init__(self, connector: Any, settings: Settings, counter: TokenCounter) -> None:
        self._connector = connector
        self.settings = settings
        self._ctx = Context(settings, counter)
        self._vectors = VectorState(settings.embedding_model)
        self.partition_interval: timedelta = settings.partition_interval or timedelta(days=7)

    @property
    def dsn(self) -> str | None:
        """The DSN this store connected with (resolved from the environment or the embedded
        server when not given); None when it was given a pool or a connection."""
        dsn: str | None = self._connector.dsn
        return dsn

    def _partitioning(self, interval: timedelta, origin: Any) -> None:
        self.partition_interval = interval
        self._ctx = dataclasses.replace(
            self._ctx, partition_interval=interval, partition_origin=origin
        )


def setup_op(store: StoreBase) -> Op[None]:
    """Make the schema current, read (or record) the partitioning, premake partitions and
    check the embedding model against the one recorded in the database."""
    yield from migrate_op()
    store._connector.binding = yield from connection_binding_op(store._connector.binding)
    interval, origin = yield from configure_op(store.settings.partition_interval)
    store._partitioning(interval, origin)
    yield from premake_op(store.settings.premake)
    yield from check_model_op(store.settings.embedding_model)


def connection_binding_op(current: Q | None) -> Op[Q | None]:
    """The per-transaction binding a store given a tenant-scoped source needs (a connection
    or pool whose connections SET ``shardstore.tenant_id``, e.g. from
    :func:`shardstore.rls.tenant_connection`): on a distributed store (Citus) whose role
    is not bound to a tenant, the session-level setting stays on the coordinator and the
    shards would see no tenant, so every transaction the store runs first re-states the
    connection's own setting as ``SET LOCAL`` (core/binding.py), read from the connection
    each time (the store follows the setting as on one node). None where the setting
    reaches every node by itself: plain PostgreSQL, a bound role, or no tenant set (the
    owner). ``current`` (a binding already chosen, :func:`shardstore.rls.connect_tenant`)
    is kept."""
    if current is not None:
        return current
    setting, role_bound, distributed = yield Q(query("rls_store_binding"), fetch="one")
    if setting is None or role_bound or not distributed:
        return None
    return Q(query("rls_rebind_tenant"), fetch="none")


def premake_partitions(store: Any, premake: int | None = None) -> Op[list[str]]:
    """Create the current partition and ``premake`` more ahead; returns new names."""
    created: list[str] = yield from premake_op(
        store.settings.premake if premake is None else premake
    )
    return created
