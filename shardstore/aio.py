"""The asyncio store: the same operations as :class:`shardstore.Store`, bound for asyncio
(each method awaitable, ``history`` an async iterator) with one line each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeVar

from . import base
from .artifacts import offload as artifact_offload
from .artifacts import ops as artifact_ops
from .artifacts import sweep as artifact_sweep
from .context import assembly
from .context import summaries as summary_ops
from .core.bind import amethod, areader, astream
from .core.connector import AsyncConnector
from .core.executor import run_async, stream_async
from .core.state import StoreState
from .core.steps import Op
from .encryption import rotation as key_rotation
from .history import ops as history_ops
from .history.folding import AsyncFolder
from .history.tokens import TokenCounter
from .importers import jsonl as jsonl_ops
from .importers import langgraph as langgraph_ops
from .importers import single_row as single_row_ops
from .integrations import tracing
from .lifecycle import maintenance, purge
from .models import Turn
from .schema import distribute as distribute_ops
from .search import ops as search_ops
from .search import text as textsearch
from .settings import Settings
from .state import checkpoints as checkpoint_ops
from .state import facts
from .state import fork as fork_ops
from .state import rewind as rewind_ops
from .state import runs as runs_ops

T = TypeVar("T")


class AsyncStore(base.StoreBase):
    """The asyncio flavour of :class:`shardstore.Store`: each method has the same
    guarantees (and the same docstring). Create it with :func:`shardstore.connect_async`."""

    def __init__(
        self, connector: AsyncConnector, settings: Settings, counter: TokenCounter
    ) -> None:
        super().__init__(connector, settings, counter)
        if connector.pooled and settings.background_fold:
            self.background_folder = AsyncFolder(self._run, settings.default_tail_turns)

    async def _run(self, op: Op[T]) -> T:
        return await run_async(self.connector, op)

    def _stream(self, op: Op[Any]) -> AsyncIterator[Any]:
        return stream_async(self.connector, op)

    create_session = amethod(history_ops.create_session)
    session = amethod(history_ops.session)
    sessions = amethod(history_ops.sessions)
    append_turn = amethod(history_ops.append_turn)
    append_turns = amethod(history_ops.append_turns)
    flush = amethod(history_ops.flush)
    tail = amethod(history_ops.tail)
    tail_explained = amethod(history_ops.tail_explained)
    history = astream(history_ops.history, Turn)
    chunks = amethod(history_ops.chunks)
    stats = amethod(history_ops.stats)
    premake_partitions = amethod(base.premake_partitions)
    maintain = amethod(maintenance.maintain)
    purge_session = amethod(purge.purge_session)
    purge_subject = amethod(purge.purge_subject)
    purge_tenant = amethod(purge.purge_tenant)
    purge_range = amethod(purge.purge_range)
    purge_before = amethod(purge.purge_before)
    rotate_data_key = amethod(key_rotation.rotate_data_key)
    embed = amethod(search_ops.embed)
    reembed = amethod(search_ops.reembed)
    search = amethod(search_ops.search)
    checkpoint = amethod(checkpoint_ops.checkpoint)
    restore = amethod(checkpoint_ops.restore)
    checkpoints = amethod(checkpoint_ops.checkpoints)
    rewind = amethod(rewind_ops.rewind)
    fork = amethod(fork_ops.fork)
    remember = amethod(facts.remember)
    recall = amethod(facts.recall)
    forget = amethod(facts.forget)
    fact_history = amethod(facts.fact_history)
    open_run = amethod(runs_ops.open_run)
    mark_awaiting = amethod(runs_ops.mark_awaiting)
    resume_run = amethod(runs_ops.resume_run)
    record_step = amethod(runs_ops.record_step)
    close_run = amethod(runs_ops.close_run)
    get_run = amethod(runs_ops.get_run)
    runs = amethod(runs_ops.runs)
    context = amethod(assembly.context)
    summarize = amethod(summary_ops.summarize)
    summaries = amethod(summary_ops.summaries)
    configure_text_search = amethod(textsearch.configure_text_search)
    configure_sealed_vectors = amethod(search_ops.configure_sealed_vectors)
    sealed_vectors = amethod(search_ops.sealed_vectors)
    text_search_language = amethod(textsearch.text_search_language)
    put_artifact = amethod(artifact_ops.put_artifact)
    get_artifact = amethod(artifact_ops.get_artifact)
    open_artifact = areader(artifact_ops.open_artifact)
    ref_artifact = amethod(artifact_ops.ref_artifact)
    unref_artifact = amethod(artifact_ops.unref_artifact)
    list_artifacts = amethod(artifact_ops.list_artifacts)
    sweep_artifacts = amethod(artifact_sweep.sweep_artifacts)
    expand = amethod(artifact_offload.expand)
    attach_payload = amethod(tracing.attach_payload)
    import_single_row = amethod(single_row_ops.import_single_row)
    import_langgraph = amethod(langgraph_ops.import_langgraph)
    import_jsonl = amethod(jsonl_ops.import_jsonl)
    export_sessions = amethod(jsonl_ops.export_sessions)
    distribute = amethod(distribute_ops.distribute)

    async def drain_folds(self) -> None:
        """Wait until every chunk sealed by this store's appends so far has been folded
        (see :meth:`shardstore.Store.drain_folds`)."""
        if self.background_folder is not None:
            await self.background_folder.drain()

    async def close(self) -> None:
        """Finish queued folds, then close the pool if this store created it."""
        if self.background_folder is not None:
            await self.background_folder.close()
        await self.connector.close()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


if TYPE_CHECKING:  # mypy checks that the store is what operations take

    def _implements(store: AsyncStore) -> StoreState:
        return store
