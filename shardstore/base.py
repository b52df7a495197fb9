"""What :class:`~shardstore.Store` and :class:`~shardstore.AsyncStore` share: their state,
their setup and the store methods that belong to no single feature."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from .core.context import Context
from .core.steps import Op
from .history import configure_op
from .maintenance import premake_op
from .migrate import migrate_op
from .settings import Settings
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
    interval, origin = yield from configure_op(store.settings.partition_interval)
    store._partitioning(interval, origin)
    yield from premake_op(store.settings.premake)
    yield from check_model_op(store.settings.embedding_model)


def premake_partitions(store: Any, premake: int | None = None) -> Op[list[str]]:
    """Create the current partition and ``premake`` more ahead; returns new names."""
    created: list[str] = yield from premake_op(
        store.settings.premake if premake is None else premake
    )
    return created
