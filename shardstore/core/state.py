"""What an operation may use of the store it runs for: :class:`StoreState`.

A store method is written once, as a function taking the store first and returning an
operation (:mod:`shardstore.core.bind`); :class:`~shardstore.Store` and
:class:`~shardstore.AsyncStore` both implement this protocol (through
:class:`shardstore.base.StoreBase`). How a store runs operations, sync or asyncio, is not
part of it: an operation yields steps and the store's driver runs them."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # types only: core imports no feature module at run time
    from ..artifacts.config import ArtifactConfig
    from ..search.vectors import VectorState
    from ..settings import Settings
    from .context import Context


class Folder(Protocol):
    """A store's background folder (a thread or an asyncio task): sealed chunks and
    sessions due for text indexing are handed to it after their append commits."""

    text_search: bool

    def submit(self, session_id: Any) -> None:
        """Fold the session soon, after the caller's commit; never raises for a fold."""
        ...


class StoreState(Protocol):
    """The state of a store that operations read: settings, the context handed to
    operations (settings, tokenizer, partitioning), the connector (its tenant binding, the
    pooler it found), the embedding state, the artifact configuration and the background
    folder (None where appends fold inline)."""

    settings: Settings
    ctx: Context
    connector: Any
    vector_state: VectorState
    artifact_config: ArtifactConfig | None
    background_folder: Folder | None
    partition_interval: timedelta

    @property
    def dsn(self) -> str | None:
        """The DSN the store connected with; None for a pool or a connection."""
        ...

    def drain_folds(self) -> Any:
        """Wait until the background folder has folded what was handed to it (sync, or a
        coroutine for an asyncio store: a :class:`~shardstore.core.steps.Call` runs both)."""
        ...

    def _run(self, op: Any) -> Any:
        """Run an operation as a store call of its own, on a connection of the store's pool
        (committed apart from the calling operation's transaction)."""
        ...
