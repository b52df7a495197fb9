"""The asyncio store: the same operations as :class:`shardstore.Store`, awaited."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from partition_manager import premake_op

from . import retry as retry_policy
from .connector import AsyncConnector
from .executor import run_async, stream_async
from .folding import AsyncFolder
from .maintenance import AsyncMaintenanceMethods
from .migrations import migrate_op
from .models import AppendResult, Chunk, SessionInfo, Stats, Turn
from .ops import (
    AppendOutcome,
    Context,
    Op,
    append_op,
    chunks_op,
    configure_op,
    create_session_op,
    flush_op,
    fold_sealed_op,
    history_op,
    session_info_op,
    stats_op,
    tail_op,
)
from .purge import AsyncPurgeMethods
from .search import AsyncSearchMethods
from .settings import Settings
from .store import _keys_for, _require_keys
from .tokens import TokenCounter
from .vector_ops import VectorState, check_model_op

T = TypeVar("T")


class AsyncStore(AsyncMaintenanceMethods, AsyncPurgeMethods, AsyncSearchMethods):
    """asyncio twin of :class:`shardstore.Store`; each method has the same guarantees.
    Create it with :func:`shardstore.connect_async`."""

    def __init__(
        self, connector: AsyncConnector, settings: Settings, counter: TokenCounter
    ) -> None:
        self._connector = connector
        self.settings = settings
        self._ctx = Context(settings, counter)
        self._vectors = VectorState(settings.embedding_model)
        self._folder = (
            AsyncFolder(self._run) if connector.pooled and settings.background_fold else None
        )
        self.partition_interval: timedelta = settings.partition_interval or timedelta(days=7)

    @property
    def dsn(self) -> str | None:
        """See :attr:`shardstore.Store.dsn`."""
        return self._connector.dsn

    async def _run(self, op: Op[T]) -> T:
        async with self._connector.connection() as conn:
            return await run_async(conn, op)

    async def _after_append(self, outcome: AppendOutcome) -> None:
        if not outcome.sealed:
            return
        if self._folder is not None:
            self._folder.submit(outcome.session_id)
        else:
            await self._run(fold_sealed_op(outcome.session_id))

    async def drain_folds(self) -> None:
        """See :meth:`shardstore.Store.drain_folds`."""
        if self._folder is not None:
            await self._folder.drain()

    async def _setup(self) -> None:
        await self._run(migrate_op())
        interval, origin = await self._run(configure_op(self.settings.partition_interval))
        self.partition_interval = interval
        self._ctx = dataclasses.replace(
            self._ctx, partition_interval=interval, partition_origin=origin
        )
        await self._run(premake_op(self.settings.premake))
        await self._run(check_model_op(self.settings.embedding_model))

    async def create_session(
        self,
        tenant_id: str,
        subject_id: str | None = None,
        agent_id: str | None = None,
        session_id: uuid.UUID | str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> uuid.UUID:
        """See :meth:`shardstore.Store.create_session`."""
        return await self._run(
            create_session_op(tenant_id, subject_id, agent_id, session_id, metadata)
        )

    async def session(self, session_id: uuid.UUID | str) -> SessionInfo:
        """See :meth:`shardstore.Store.session`."""
        return await self._run(session_info_op(session_id))

    async def append_turn(
        self,
        session_id: uuid.UUID | str,
        message: dict[str, Any],
        idempotency_key: str | None = None,
        *,
        retry: bool = False,
    ) -> AppendResult:
        """See :meth:`shardstore.Store.append_turn`."""
        if retry:
            _require_keys([idempotency_key])
            return await retry_policy.acall(self.append_turn, session_id, message, idempotency_key)
        outcome = await self._run(append_op(self._ctx, session_id, [message], [idempotency_key]))
        await self._after_append(outcome)
        return outcome.results[0]

    async def append_turns(
        self,
        session_id: uuid.UUID | str,
        messages: Sequence[dict[str, Any]],
        idempotency_keys: Sequence[str | None] | None = None,
        *,
        retry: bool = False,
    ) -> list[AppendResult]:
        """See :meth:`shardstore.Store.append_turns`."""
        keys = _keys_for(messages, idempotency_keys)
        if retry:
            _require_keys(keys)
            return await retry_policy.acall(self.append_turns, session_id, messages, keys)
        outcome = await self._run(append_op(self._ctx, session_id, list(messages), keys))
        await self._after_append(outcome)
        return outcome.results

    async def flush(self, session_id: uuid.UUID | str) -> int:
        """See :meth:`shardstore.Store.flush`."""
        return await self._run(flush_op(session_id))

    async def tail(
        self,
        session_id: uuid.UUID | str,
        n: int | None = None,
        max_tokens: int | None = None,
    ) -> list[Turn]:
        """See :meth:`shardstore.Store.tail`."""
        return await self._run(tail_op(self._ctx, session_id, n, max_tokens))

    async def history(
        self, session_id: uuid.UUID | str, from_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Turn]:
        """See :meth:`shardstore.Store.history` (an async iterator)."""
        op = history_op(session_id, from_seq, to_seq)
        async with self._connector.connection() as conn:
            async for turn in stream_async(conn, op):
                yield turn

    async def chunks(self, session_id: uuid.UUID | str, last: int | None = None) -> list[Chunk]:
        """See :meth:`shardstore.Store.chunks`."""
        return await self._run(chunks_op(session_id, last))

    async def stats(self) -> Stats:
        """See :meth:`shardstore.Store.stats`."""
        return await self._run(stats_op())

    async def premake_partitions(self, premake: int | None = None) -> list[str]:
        """See :meth:`shardstore.Store.premake_partitions`."""
        return await self._run(premake_op(self.settings.premake if premake is None else premake))

    async def close(self) -> None:
        """Finish queued folds, then close the pool if this store created it."""
        if self._folder is not None:
            await self._folder.close()
        await self._connector.close()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
