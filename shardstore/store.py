"""The synchronous store: bindings only. Every method is an operation written once in its
feature module and bound here with one line (its docstring is the method's);
:mod:`shardstore.aio` binds the same operations for asyncio."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from . import base
from .artifacts import offload as artifact_offload
from .artifacts import ops as artifact_ops
from .artifacts import sweep as artifact_sweep
from .context import assembly
from .context import summaries as summary_ops
from .core.bind import method, reader, stream
from .core.connector import Connector
from .core.executor import run_sync, stream_sync
from .core.state import StoreState
from .core.steps import Op
from .encryption import rotation as key_rotation
from .history import ops as history_ops
from .history.folding import BackgroundFolder
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


class Store(base.StoreBase):
    """A shardstore on one PostgreSQL database. Safe to share between threads.

    Create it with :func:`shardstore.connect`; close it with :meth:`close` (or use it as a
    context manager).
    """

    def __init__(self, connector: Connector, settings: Settings, counter: TokenCounter) -> None:
        super().__init__(connector, settings, counter)
        if connector.pooled and settings.background_fold:
            self.background_folder = BackgroundFolder(self._run, settings.default_tail_turns)

    def _run(self, op: Op[T]) -> T:
        return run_sync(self.connector, op)

    def _stream(self, op: Op[Any]) -> Iterator[Any]:
        return stream_sync(self.connector, op)

    create_session = method(history_ops.create_session)
    session = method(history_ops.session)
    sessions = method(history_ops.sessions)
    append_turn = method(history_ops.append_turn)
    append_turns = method(history_ops.append_turns)
    flush = method(history_ops.flush)
    tail = method(history_ops.tail)
    tail_explained = method(history_ops.tail_explained)
    history = stream(history_ops.history, Turn)
    chunks = method(history_ops.chunks)
    stats = method(history_ops.stats)
    premake_partitions = method(base.premake_partitions)
    maintain = method(maintenance.maintain)
    purge_session = method(purge.purge_session)
    purge_subject = method(purge.purge_subject)
    purge_tenant = method(purge.purge_tenant)
    purge_range = method(purge.purge_range)
    purge_before = method(purge.purge_before)
    rotate_data_key = method(key_rotation.rotate_data_key)
    embed = method(search_ops.embed)
    reembed = method(search_ops.reembed)
    search = method(search_ops.search)
    checkpoint = method(checkpoint_ops.checkpoint)
    restore = method(checkpoint_ops.restore)
    checkpoints = method(checkpoint_ops.checkpoints)
    rewind = method(rewind_ops.rewind)
    fork = method(fork_ops.fork)
    remember = method(facts.remember)
    recall = method(facts.recall)
    forget = method(facts.forget)
    fact_history = method(facts.fact_history)
    open_run = method(runs_ops.open_run)
    mark_awaiting = method(runs_ops.mark_awaiting)
    resume_run = method(runs_ops.resume_run)
    record_step = method(runs_ops.record_step)
    close_run = method(runs_ops.close_run)
    get_run = method(runs_ops.get_run)
    runs = method(runs_ops.runs)
    context = method(assembly.context)
    summarize = method(summary_ops.summarize)
    summaries = method(summary_ops.summaries)
    configure_text_search = method(textsearch.configure_text_search)
    configure_sealed_vectors = method(search_ops.configure_sealed_vectors)
    sealed_vectors = method(search_ops.sealed_vectors)
    text_search_language = method(textsearch.text_search_language)
    put_artifact = method(artifact_ops.put_artifact)
    get_artifact = method(artifact_ops.get_artifact)
    open_artifact = reader(artifact_ops.open_artifact)
    ref_artifact = method(artifact_ops.ref_artifact)
    unref_artifact = method(artifact_ops.unref_artifact)
    list_artifacts = method(artifact_ops.list_artifacts)
    sweep_artifacts = method(artifact_sweep.sweep_artifacts)
    expand = method(artifact_offload.expand)
    attach_payload = method(tracing.attach_payload)
    import_single_row = method(single_row_ops.import_single_row)
    import_langgraph = method(langgraph_ops.import_langgraph)
    import_jsonl = method(jsonl_ops.import_jsonl)
    export_sessions = method(jsonl_ops.export_sessions)
    distribute = method(distribute_ops.distribute)

    def drain_folds(self) -> None:
        """Block until every chunk sealed by this store's appends so far has been folded into
        ``agent_history``. Reads never need this (they merge buffer and chunks); it is for
        benchmarks, tests and orderly shutdown."""
        if self.background_folder is not None:
            self.background_folder.drain()

    def close(self) -> None:
        """Finish queued folds, then close the connection pool if this store created it
        (idempotent)."""
        if self.background_folder is not None:
            self.background_folder.close()
        self.connector.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:  # mypy checks that the store is what operations take

    def _implements(store: Store) -> StoreState:
        return store
