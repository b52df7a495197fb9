"""The synchronous store. Every method runs an operation from :mod:`shardstore.ops`."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from partition_manager import premake_op

from . import retry as retry_policy
from .connector import Connector
from .executor import run_sync, stream_sync
from .folding import BackgroundFolder
from .maintenance import MaintenanceMethods
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
from .purge import PurgeMethods
from .search import SearchMethods
from .settings import Settings
from .tokens import TokenCounter
from .vector_ops import VectorState, check_model_op

T = TypeVar("T")


class Store(MaintenanceMethods, PurgeMethods, SearchMethods):
    """A shardstore on one PostgreSQL database. Safe to share between threads.

    Create it with :func:`shardstore.connect`; close it with :meth:`close` (or use it as a
    context manager).
    """

    def __init__(self, connector: Connector, settings: Settings, counter: TokenCounter) -> None:
        self._connector = connector
        self.settings = settings
        self._ctx = Context(settings, counter)
        self._vectors = VectorState(settings.embedding_model)
        self._folder = (
            BackgroundFolder(self._run) if connector.pooled and settings.background_fold else None
        )
        self.partition_interval: timedelta = settings.partition_interval or timedelta(days=7)

    @property
    def dsn(self) -> str | None:
        """The DSN this store connected with (resolved from the environment or the embedded
        server when not given); None when it was given a pool or a connection."""
        return self._connector.dsn

    def _run(self, op: Op[T]) -> T:
        with self._connector.connection() as conn:
            return run_sync(conn, op)

    def _after_append(self, outcome: AppendOutcome) -> None:
        if not outcome.sealed:
            return
        if self._folder is not None:
            self._folder.submit(outcome.session_id)
        else:  # on a caller's connection: fold inside the caller's transaction
            self._run(fold_sealed_op(outcome.session_id))

    def drain_folds(self) -> None:
        """Block until every chunk sealed by this store's appends so far has been folded into
        ``agent_history``. Reads never need this (they merge buffer and chunks); it is for
        benchmarks, tests and orderly shutdown."""
        if self._folder is not None:
            self._folder.drain()

    def _setup(self) -> None:
        self._run(migrate_op())
        interval, origin = self._run(configure_op(self.settings.partition_interval))
        self.partition_interval = interval
        self._ctx = dataclasses.replace(
            self._ctx, partition_interval=interval, partition_origin=origin
        )
        self._run(premake_op(self.settings.premake))
        self._run(check_model_op(self.settings.embedding_model))

    # -- sessions ---------------------------------------------------------------

    def create_session(
        self,
        tenant_id: str,
        subject_id: str | None = None,
        agent_id: str | None = None,
        session_id: uuid.UUID | str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> uuid.UUID:
        """Create a session and return its id. With ``session_id`` given the call is
        idempotent: repeating it returns the same id; different owners raise
        ``SessionConflict``; a purged id raises ``SessionPurged``."""
        return self._run(create_session_op(tenant_id, subject_id, agent_id, session_id, metadata))

    def session(self, session_id: uuid.UUID | str) -> SessionInfo:
        """A session's owners, metadata and counts; ``SessionNotFound`` if unknown."""
        return self._run(session_info_op(session_id))

    # -- writes -----------------------------------------------------------------

    def append_turn(
        self,
        session_id: uuid.UUID | str,
        message: dict[str, Any],
        idempotency_key: str | None = None,
        *,
        retry: bool = False,
    ) -> AppendResult:
        """Append one message, durably, in one round trip and one commit.

        Returns where it landed. A repeat with the same ``idempotency_key`` stores nothing
        and returns the first result with ``duplicate=True``. Bad input raises an
        ``InvalidInput`` subclass and writes nothing. ``retry=True`` repeats the call through
        connection failures for up to 30 s (:mod:`shardstore.retry`); it needs a key."""
        if retry:
            _require_keys([idempotency_key])
            return retry_policy.call(self.append_turn, session_id, message, idempotency_key)
        outcome = self._run(append_op(self._ctx, session_id, [message], [idempotency_key]))
        self._after_append(outcome)
        return outcome.results[0]

    def append_turns(
        self,
        session_id: uuid.UUID | str,
        messages: Sequence[dict[str, Any]],
        idempotency_keys: Sequence[str | None] | None = None,
        *,
        retry: bool = False,
    ) -> list[AppendResult]:
        """Append several messages in one transaction: all are stored or none is.
        ``retry=True`` as for :meth:`append_turn` (every message needs a key)."""
        keys = _keys_for(messages, idempotency_keys)
        if retry:
            _require_keys(keys)
            return retry_policy.call(self.append_turns, session_id, messages, keys)
        outcome = self._run(append_op(self._ctx, session_id, list(messages), keys))
        self._after_append(outcome)
        return outcome.results

    def flush(self, session_id: uuid.UUID | str) -> int:
        """Fold a session's buffered turns into its open chunk in ``agent_history`` (the
        chunk stays open for more turns). Returns how many turns moved."""
        return self._run(flush_op(session_id))

    # -- reads ------------------------------------------------------------------

    def tail(
        self,
        session_id: uuid.UUID | str,
        n: int | None = None,
        max_tokens: int | None = None,
    ) -> list[Turn]:
        """The newest turns, oldest first: at most ``n`` turns and at most ``max_tokens``
        tokens (fewer rather than more; with neither given, ``default_tail_turns``). Never
        starts with a tool result whose tool call was cut off."""
        return self._run(tail_op(self._ctx, session_id, n, max_tokens))

    def history(
        self, session_id: uuid.UUID | str, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[Turn]:
        """Every turn with ``from_seq <= turn_seq < to_seq``, in order, streamed one chunk
        at a time from one consistent snapshot (holds one connection while iterating)."""
        op = history_op(session_id, from_seq, to_seq)
        with self._connector.connection() as conn:
            yield from stream_sync(conn, op)

    def chunks(self, session_id: uuid.UUID | str, last: int | None = None) -> list[Chunk]:
        """Chunk metadata oldest first (the ``last`` newest when given); the open chunk,
        if it holds turns, is the final entry with ``is_open=True``."""
        return self._run(chunks_op(session_id, last))

    def stats(self) -> Stats:
        """Counts of sessions, turns, chunks and buffered turns; every partition with its
        bounds, chunk rows and bytes on disk."""
        return self._run(stats_op())

    # -- maintenance ------------------------------------------------------------

    def premake_partitions(self, premake: int | None = None) -> list[str]:
        """Create the current partition and ``premake`` more ahead; returns new names."""
        return self._run(premake_op(self.settings.premake if premake is None else premake))

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


def _require_keys(keys: Sequence[str | None]) -> None:
    from .errors import InvalidInput

    if any(k is None for k in keys):
        raise InvalidInput(
            "retry=True needs an idempotency key for every turn: without one, a repeat of "
            "an append that did commit would store the turn twice"
        )


def _keys_for(messages: Any, keys: Any) -> list[str | None]:
    """Validate the batch shape: a list (or tuple) of messages and, when given, as many keys
    (each a string or None) in the same order."""
    from .errors import InvalidInput

    if not isinstance(messages, list | tuple):
        raise InvalidInput("messages must be a list of message dicts")
    if keys is None:
        return [None] * len(messages)
    if not isinstance(keys, list | tuple) or len(keys) != len(messages):
        raise InvalidInput("idempotency_keys must be a list as long as messages")
    if not all(k is None or isinstance(k, str) for k in keys):
        raise InvalidInput("each idempotency key must be a string or None")
    return list(keys)
