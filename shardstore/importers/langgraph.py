"""Import LangGraph threads from the tables of ``langgraph.checkpoint.postgres.PostgresSaver``
(``store.import_langgraph``, ``shardstore import langgraph``).

Each thread's latest checkpoint in the root namespace (``checkpoint_ns = ''``) is read with
PostgresSaver's own loader (``get_tuple``: its serde, msgpack / JSON, pending writes), and
the messages of its ``channel`` (``"messages"``, as ``MessagesState`` keeps them) become the
session's turns in their order, each as ``langchain_core.messages.message_to_dict``
writes it (``{"type": "ai", "data": {...}}``: tool calls, tool_call_ids, ids and metadata
kept, so ``messages_from_dict`` gives the messages back and shardstore's pairing rules keep
each tool result with its call). The session id is
``integrations.ids.external_session_id("langgraph", tenant, thread_id)``, its metadata
``external_metadata("langgraph", thread_id)``.

LangGraph stores a thread's messages as one serialized value, so a thread is loaded whole
(as LangGraph itself loads it); it is appended ``batch_size`` turns per statement in one
transaction. A re-run appends only the messages after those the session holds (a thread
that went on since is brought up to date; messages LangGraph edited or removed in place are
not re-imported)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ..core import validate
from ..core.state import StoreState
from ..core.steps import Call, Op
from ..errors import (
    ImportRejected,
    InvalidInput,
    MissingDependency,
)
from .report import ImportReport
from .source import SourceRun, connect, guarded, source_query
from .writer import Batch, append_batch_op

FRAMEWORK = "langgraph"
PAGE = 500  # thread ids per round trip
DEFAULT_BATCH = 500
_WHAT = "LangGraph checkpoints (is this a database PostgresSaver.setup() made?)"


class LangGraphSource:
    """A PostgresSaver on the source database, and the thread listing."""

    def __init__(self, dsn: str, channel: str) -> None:
        self.dsn = dsn
        self.channel = channel
        self.conn: Any = None
        self.saver: Any = None
        self.after: str | None = None
        self.done = False

    def open(self) -> None:
        """Connect as PostgresSaver does (autocommit, dict rows, no prepared statements)
        and check that its tables are there."""
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row
        except ImportError as exc:
            raise MissingDependency(
                "importing LangGraph threads needs langgraph-checkpoint-postgres: "
                "pip install 'shardstore[langgraph]'"
            ) from exc
        # unprepared: a source behind a transaction-mode pooler has no statement prepared
        # on the server connection the next transaction gets
        self.conn = connect(self.dsn, autocommit=True, prepare_threshold=None, row_factory=dict_row)
        self.saver = PostgresSaver(self.conn)
        guarded(
            _WHAT, lambda: self.conn.execute(source_query("langgraph_threads"), (0,)).fetchall()
        )

    def threads(self) -> list[str]:
        """The next page of thread ids (with a root checkpoint), in order; empty at the end."""
        if self.done:
            return []
        statement = source_query(
            "langgraph_threads" if self.after is None else "langgraph_threads_after"
        )
        params: tuple[Any, ...] = (PAGE,) if self.after is None else (self.after, PAGE)
        rows = guarded(_WHAT, lambda: self.conn.execute(statement, params).fetchall())
        ids = [row["thread_id"] for row in rows]
        if ids:
            self.after = ids[-1]
        self.done = len(ids) < PAGE
        return ids

    def messages(self, thread_id: str, where: str) -> list[Any]:
        """The thread's messages at its latest root checkpoint, converted to dicts
        (``message_to_dict``); ``ImportRejected`` when it has no checkpoint or holds
        something that is not a LangChain message."""
        from langchain_core.messages import BaseMessage, message_to_dict

        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        found = guarded(_WHAT, lambda: self.saver.get_tuple(config))
        if found is None:
            raise ImportRejected(f"{where}: no checkpoint in the root namespace")
        values = found.checkpoint.get("channel_values") or {}
        items = values.get(self.channel, [])
        if not isinstance(items, list):
            raise ImportRejected(
                f"{where}: channel {self.channel!r} holds a {type(items).__name__}, not a list"
            )
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, BaseMessage):
                raise ImportRejected(
                    f"{where} message {i}: a {type(item).__name__}, not a LangChain message"
                )
            out.append(message_to_dict(item))
        return out

    def close(self) -> None:
        """Disconnect (idempotent)."""
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()


def _thread_op(
    store: StoreState, source: LangGraphSource, thread_id: str, tenant: str, run: SourceRun
) -> Op[None]:
    """Import one thread in one transaction of the store."""
    where = f"thread {thread_id!r}"
    ctx = store.ctx

    def fill(sid: uuid.UUID, have: int, batch: Batch) -> Op[None]:
        messages: list[Any] = yield Call(source.messages, (thread_id, where))
        run.bar.expect(len(messages) - have)
        for start in range(have, len(messages), run.size):
            for index in range(start, min(start + run.size, len(messages))):
                batch.add(ctx, messages[index], f"{where} message {index}")
            yield from append_batch_op(ctx, sid, batch, run.bar)

    yield from run.session_op(where, FRAMEWORK, tenant, thread_id, fill)


def import_langgraph(
    store: StoreState,
    source_dsn: str,
    *,
    tenant_id: str,
    thread_id: str | Sequence[str] | None = None,
    channel: str = "messages",
    batch_size: int = DEFAULT_BATCH,
    on_error: str = "raise",
    progress: bool = False,
) -> Op[ImportReport]:
    """Import LangGraph threads from the PostgresSaver tables in ``source_dsn``: every
    thread with a root checkpoint, or the ``thread_id`` given (one id or several). Each
    becomes the session ``external_session_id("langgraph", tenant_id, thread_id)``
    holding the messages of its latest checkpoint's ``channel``, in order, as
    ``message_to_dict`` writes them; the thread id is kept in the session's metadata.

    Each thread is one transaction; a thread that cannot be imported (no checkpoint, a
    value that is not a message, a message over ``chunk_max_bytes``, a session id taken by
    other owners) raises ``ImportRejected`` naming it, with nothing of it written, or with
    ``on_error="skip"`` is listed in the report's ``skipped``. A re-run appends only what
    each session lacks. Needs ``langgraph-checkpoint-postgres`` (``MissingDependency``);
    the source is read in a worker thread under asyncio."""
    tenant = validate.text(tenant_id, "tenant_id")
    if thread_id is None:
        wanted: list[str] | None = None
    elif isinstance(thread_id, str):
        wanted = [validate.text(thread_id, "thread_id")]
    elif isinstance(thread_id, list | tuple):
        wanted = [validate.text(t, "thread_id") for t in thread_id]
    else:
        raise InvalidInput("thread_id must be a string, a list of strings or None")
    name = validate.text(channel, "channel")
    run = SourceRun(source_dsn, batch_size, on_error, progress, "importing LangGraph threads")
    source = LangGraphSource(source_dsn, name)
    try:
        yield Call(source.open)
        while True:
            if wanted is not None:
                page, wanted = wanted, []
            else:
                page = yield Call(source.threads)
            if not page:
                break
            for thread in page:
                yield from run.element_op(
                    f"thread {thread!r}", _thread_op(store, source, thread, tenant, run)
                )
    finally:
        source.close()
        run.bar.close()
    return run.tally.report()
