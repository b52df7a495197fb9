"""Embedding and search as store methods (mixins of :class:`Store` / :class:`AsyncStore`).

The flows are operations in :mod:`shardstore.vector_ops`; the model runs in
:class:`~shardstore.ops.Call` steps, which the asyncio executor moves off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, TypeVar

from tqdm import tqdm

from .errors import InvalidInput
from .models import SearchHit
from .ops import Context, Op, session_uuid
from .vector_ops import (
    VectorState,
    embed_op,
    prepare_op,
    search_query_op,
    search_scope,
)

T = TypeVar("T")
DEFAULT_BATCH = 16
Query = str | Sequence[float]


def _batch(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise InvalidInput("batch_size must be an int between 1 and 10000")
    return value


def _limit(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput("limit must be None or an int >= 1")
    return value


def _bar(progress: bool) -> Any:
    return tqdm(total=0, unit="chunk", desc="embedding", disable=not progress, leave=False)


class SearchMethods:
    """Embedding and search methods of :class:`shardstore.Store`."""

    _run: Callable[[Op[Any]], Any]
    _ctx: Context
    _vectors: VectorState

    def embed(
        self,
        *,
        limit: int | None = None,
        batch_size: int = DEFAULT_BATCH,
        progress: bool = False,
        session_id: Any = None,
    ) -> int:
        """Embed every chunk that has no vectors yet or changed since it was embedded
        (folds, flushes and purges queue chunks automatically); returns how many chunks it
        embedded. Each chunk is cut into model windows, one vector each.

        Guarantees: several workers (threads, processes, machines) may run at once and never
        embed the same chunk twice (queue rows are claimed FOR UPDATE SKIP LOCKED for the
        length of a batch); a worker that dies leaves nothing locked and nothing half
        written (each batch is one transaction); a chunk that changed while it was being
        embedded is not written with stale vectors but stays queued. Needs the embedding
        model (``pip install 'shardstore[embeddings]'``). ``session_id`` embeds only that
        session's chunks."""
        sid = None if session_id is None else session_uuid(session_id)
        bar = _bar(progress)
        try:
            done: int = self._run(
                embed_op(self._vectors, _limit(limit), _batch(batch_size), bar, sid)
            )
        finally:
            bar.close()
        return done

    def reembed(
        self, model: Any = None, *, progress: bool = False, batch_size: int = DEFAULT_BATCH
    ) -> int:
        """Switch the database to ``model`` (default: this store's ``embedding_model``):
        drop every stored vector, record the new model, queue every chunk and embed them all.
        Searches find less until it is done. Returns chunks embedded."""
        self._run(prepare_op(self._vectors, model, reset=True))
        return self.embed(progress=progress, batch_size=batch_size)

    def search(
        self,
        query: Query,
        *,
        session_id: Any = None,
        tenant_id: str | None = None,
        agent_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        k: int = 5,
    ) -> list[SearchHit]:
        """The ``k`` chunks nearest to ``query`` (a text, embedded with the store's model, or
        a vector), best first, each with the turns of its best-matching window.

        Scope: ``session_id`` searches one session exactly (every window compared: perfect
        recall); otherwise ``tenant_id`` is required and the search uses each partition's
        HNSW index with iterative scanning, merged across partitions by distance. Results
        never include another tenant's chunks; ``agent_id`` narrows to one agent; ``since``
        / ``until`` (timezone-aware) to windows with turns in that time range. Only folded
        chunks that were embedded are found (``embed()``, ``shardstore embed`` or
        ``maintain``)."""
        scope = search_scope(session_id, tenant_id, agent_id, since, until, k)
        hits: list[SearchHit] = self._run(search_query_op(self._ctx, self._vectors, scope, query))
        return hits


class AsyncSearchMethods:
    """Embedding and search methods of :class:`shardstore.AsyncStore`."""

    _run: Callable[[Op[Any]], Coroutine[Any, Any, Any]]
    _ctx: Context
    _vectors: VectorState

    async def embed(
        self,
        *,
        limit: int | None = None,
        batch_size: int = DEFAULT_BATCH,
        progress: bool = False,
        session_id: Any = None,
    ) -> int:
        """See :meth:`shardstore.Store.embed`; the model runs in a worker thread."""
        sid = None if session_id is None else session_uuid(session_id)
        bar = _bar(progress)
        try:
            done: int = await self._run(
                embed_op(self._vectors, _limit(limit), _batch(batch_size), bar, sid)
            )
        finally:
            bar.close()
        return done

    async def reembed(
        self, model: Any = None, *, progress: bool = False, batch_size: int = DEFAULT_BATCH
    ) -> int:
        """See :meth:`shardstore.Store.reembed`."""
        await self._run(prepare_op(self._vectors, model, reset=True))
        return await self.embed(progress=progress, batch_size=batch_size)

    async def search(
        self,
        query: Query,
        *,
        session_id: Any = None,
        tenant_id: str | None = None,
        agent_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        k: int = 5,
    ) -> list[SearchHit]:
        """See :meth:`shardstore.Store.search`."""
        scope = search_scope(session_id, tenant_id, agent_id, since, until, k)
        hits: list[SearchHit] = await self._run(
            search_query_op(self._ctx, self._vectors, scope, query)
        )
        return hits
