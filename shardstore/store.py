"""The synchronous store: bindings only. Every method is an operation written once in its
feature module and bound here with one line (its docstring is the method's);
:mod:`shardstore.aio` binds the same operations for asyncio."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

from . import base, facts, maintenance, purge
from . import checkpoints as checkpoint_ops
from . import distribute as distribute_ops
from . import history as history_ops
from . import rewind as rewind_ops
from . import runs as runs_ops
from . import search as search_ops
from .core.bind import method, stream
from .core.connector import Connector
from .core.executor import run_sync, stream_sync
from .core.steps import Op
from .folding import BackgroundFolder
from .models import Turn
from .settings import Settings
from .tokens import TokenCounter

T = TypeVar("T")


class Store(base.StoreBase):
    """A shardstore on one PostgreSQL database. Safe to share between threads.

    Create it with :func:`shardstore.connect`; close it with :meth:`close` (or use it as a
    context manager).
    """

    def __init__(self, connector: Connector, settings: Settings, counter: TokenCounter) -> None:
        super().__init__(connector, settings, counter)
        if connector.pooled and settings.background_fold:
            self._folder = BackgroundFolder(self._run)

    def _run(self, op: Op[T]) -> T:
        return run_sync(self._connector, op)

    def _stream(self, op: Op[Any]) -> Iterator[Any]:
        return stream_sync(self._connector, op)

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
    embed = method(search_ops.embed)
    reembed = method(search_ops.reembed)
    search = method(search_ops.search)
    checkpoint = method(checkpoint_ops.checkpoint)
    restore = method(checkpoint_ops.restore)
    checkpoints = method(checkpoint_ops.checkpoints)
    rewind = method(rewind_ops.rewind)
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
    distribute = method(distribute_ops.distribute)

    def drain_folds(self) -> None:
        """Block until every chunk sealed by this store's appends so far has been folded into
        ``agent_history``. Reads never need this (they merge buffer and chunks); it is for
        benchmarks, tests and orderly shutdown."""
        if self._folder is not None:
            self._folder.drain()

    def close(self) -> None:
        """Finish queued folds, then close the connection pool if this store created it
        (idempotent)."""
        if self._folder is not None:
            self._folder.close()
        self._connector.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
