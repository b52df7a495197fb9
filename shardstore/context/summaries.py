"""Chunk summaries: a worker pass that summarises sealed chunks with the user's model, and
their listing. Summaries never replace turns: ``history()`` is the same before and after.

Lifecycle (docs/context.md, "How it works"): a fold queues its chunk; :func:`summarize` takes
sealed, wholly folded chunks from the queue, one per transaction, calls the summarizer with
the chunk's turns while holding the queue row (``FOR UPDATE SKIP LOCKED``: several workers
never summarise the same chunk), and stores the summary only if the chunk is unchanged; a
range purge or rewind that rewrites a chunk deletes its summary and queues it again; purges
delete the summaries of what they purge (the session-table registry).

Each public function whose first parameter is ``store`` is a store method, bound into
:class:`shardstore.Store` and :class:`shardstore.AsyncStore` alike.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tqdm import tqdm

from ..core import jsoncodec, validate
from ..core.rows import record
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q, Tx
from ..encryption import turns as enc_turns
from ..encryption.envelope import MARK, Sealer, refuse_sealed
from ..encryption.places import SUMMARY_KIND, summary_position
from ..errors import InvalidInput
from ..history.ops import envelope_turn, session
from ..models import Turn

#: the longest summary stored, in characters (a summary stands in for ~8,000 tokens)
MAX_SUMMARY_CHARS = 200_000
#: attempts in a row that stored nothing (chunks changing under the worker) before a pass ends
MAX_IDLE = 3

Summarizer = Callable[[list[Turn]], Any]


@dataclass(frozen=True, slots=True)
class ChunkSummary:
    """The summary of one sealed chunk: the turns ``first_turn_seq..last_turn_seq``
    (inclusive) it covers, its ``text``, its length in the store's tokens, the ``model``
    that wrote it (the summarizer's ``model`` or ``name`` attribute, else its qualified
    name) and when."""

    chunk_seq: int
    first_turn_seq: int
    last_turn_seq: int
    text: str
    tokens: int
    model: str
    created_at: datetime


def summary_message(summary: ChunkSummary) -> dict[str, Any]:
    """The system message standing for one chunk summary in a context."""
    return summary_message_for(summary.first_turn_seq, summary.last_turn_seq, summary.text)


def summary_message_for(first_turn_seq: int, last_turn_seq: int, text: str) -> dict[str, Any]:
    """The system message standing for the summary ``text`` of turns ``first..last``."""
    return {
        "role": "system",
        "content": (
            f"Summary of turns {first_turn_seq}-{last_turn_seq} of this conversation:\n{text}"
        ),
    }


def summarizer_name(summarizer: Any) -> str:
    """What a summary records as its model: ``summarizer.model`` or ``summarizer.name``
    when it is a non-empty string, else the callable's qualified name."""
    for attr in ("model", "name"):
        value = getattr(summarizer, attr, None)
        if isinstance(value, str) and value.strip():
            return value[:200]
    name = getattr(summarizer, "__qualname__", None) or type(summarizer).__qualname__
    return str(name)[:200]


def summary_text(value: Any) -> str:
    """A summarizer's answer as it is stored: a non-empty string (surrounding whitespace
    dropped), no NUL or lone surrogate, at most :data:`MAX_SUMMARY_CHARS` characters;
    ``InvalidInput`` otherwise (and nothing is written)."""
    if not isinstance(value, str):
        raise InvalidInput(f"the summarizer must return a string, not {type(value).__name__}")
    return validate.text(value.strip(), "the summary", limit=MAX_SUMMARY_CHARS)


def open_summary(
    sealer: Sealer | None, session_id: uuid.UUID, summary: ChunkSummary
) -> ChunkSummary:
    """A stored summary with its text opened by a store's sealer (unchanged without one):
    bound to its session, chunk and turn range."""
    where = f"the summary of chunk {summary.chunk_seq} of session {session_id}"
    if sealer is None:
        if summary.text.startswith('{"' + MARK):  # cheap test first: summaries are prose
            try:
                stored = jsoncodec.loads(summary.text)
            except ValueError:
                stored = None
            refuse_sealed(stored, where)
        return summary
    try:
        sealed = jsoncodec.loads(summary.text)
    except ValueError:
        sealed = summary.text
    position = summary_position(summary.chunk_seq, summary.first_turn_seq, summary.last_turn_seq)
    text = sealer.open(sealed, SUMMARY_KIND, str(session_id), position, where)
    return dataclasses.replace(summary, text=text)


def queue_count_op(session_id: uuid.UUID | None, tenant: str | None = None) -> Op[int]:
    """Sealed chunks waiting for a summary (of one session, or one tenant's sessions, when
    given)."""
    (count,) = yield Q(
        query("summary_queue_count"), {"session": session_id, "tenant": tenant}, fetch="one"
    )
    return int(count)


def summarize_one_op(
    store: StoreState,
    summarizer: Any,
    model: str,
    session_id: uuid.UUID | None,
    tenant: str | None,
    tried: list[tuple[uuid.UUID, int]],
) -> Op[str | None]:
    """Summarise one claimed chunk in one transaction: 'stored', 'changed' (left queued),
    'gone' (its queue row dropped), or None when nothing is left to claim. A summarizer
    that raises (or returns something invalid) rolls the transaction back: nothing is
    written and the chunk stays queued."""
    yield Tx.BEGIN
    row = yield Q(
        query("summary_claim"),
        {
            "session": session_id,
            "tenant": tenant,
            "tried_sessions": [s for s, _ in tried],
            "tried_chunks": [c for _, c in tried],
        },
        fetch="one",
        named=True,
        prepare=False,
    )
    if row is None:
        yield Tx.COMMIT
        return None
    tried.append((row["session_id"], int(row["chunk_seq"])))
    key = (row["session_id"], row["chunk_seq"], row["chunk_start"])
    if row["chunk_text"] is None:  # the chunk is gone (purged, rewound, retired)
        (status,) = yield Q(
            query("summary_store"),
            (*key, -1, 0, row["chunk_start"], "-", 0, model, None, None),
            fetch="one",
        )
        yield Tx.COMMIT
        return str(status)
    turns = [
        envelope_turn(e, int(row["chunk_seq"]))
        for e in jsoncodec.loads_envelopes(row["chunk_text"])
    ]
    sealer = store.ctx.sealer
    turns = yield from enc_turns.open_turns_op(sealer, row["session_id"], turns)
    answer = yield Call(summarizer, (turns,))
    text = summary_text(answer)
    counter = store.ctx.counter
    tokens = counter.count(text)
    first = int(row["first_turn_seq"])
    last = first + int(row["turn_count"]) - 1
    # the message a context renders for it, counted once here so that context() need not
    message = summary_message_for(first, last, text)
    message_tokens = counter.count(jsoncodec.encode_json(message, "message"))
    if sealer is not None:
        # read under the session row's lock, held to this transaction's commit, so that a
        # data-key rotation never shreds the version this summary is sealed under
        data_key = yield from enc_turns.locked_session_key_op(sealer, row["session_id"])
        position = summary_position(int(row["chunk_seq"]), first, last)
        text = sealer.seal_text(data_key, SUMMARY_KIND, str(row["session_id"]), position, text)
    (status,) = yield Q(
        query("summary_store"),
        (
            *key,
            row["first_turn_seq"],
            row["turn_count"],
            row["chunk_end"],
            text,
            tokens,
            model,
            message_tokens,
            counter.name,
        ),
        fetch="one",
    )
    yield Tx.COMMIT
    return str(status)


def summarize(
    store: StoreState,
    summarizer: Summarizer,
    *,
    session_id: uuid.UUID | str | None = None,
    tenant_id: str | None = None,
    limit: int | None = None,
    progress: bool = False,
) -> Op[int]:
    """Summarise queued sealed chunks with ``summarizer`` and return how many summaries
    were stored. ``summarizer`` is your model: a callable (or coroutine function) taking
    the chunk's turns (a list of :class:`~shardstore.Turn`, oldest first) and returning the
    summary text; it runs in a worker thread under asyncio.

    Guarantees: the history is never changed; each chunk is one transaction that holds its
    queue row while the summarizer runs, so several workers never summarise the same
    chunk and a worker that dies (or a summarizer that raises) leaves nothing written and
    the chunk queued; a chunk that changed meanwhile (a fold, a range purge, a rewind) is
    not stored stale but stays queued; only sealed chunks with every turn folded are
    taken (the open chunk waits until it is sealed). With nothing queued it returns 0
    without calling the summarizer.

    Scope: ``session_id``, only that session's chunks; else ``tenant_id``, only that
    tenant's sessions; else the tenant the store is bound to (``rls.connect_tenant``, a
    tenant DSN); else, for an operator's store, every session in the database (the worker
    pass ``shardstore summarize`` runs). ``limit``: at most that many summaries;
    ``progress``: a bar on stderr. A summarizer that returns an empty or non-string answer
    raises ``InvalidInput``; its own exceptions propagate unchanged."""
    if not callable(summarizer):
        raise InvalidInput("summarizer must be a callable taking a list of turns")
    sid = validate.optional_session_id(session_id)
    tenant = validate.optional_text(tenant_id, "tenant_id")
    if sid is None and tenant is None:
        tenant = store.connector.tenant
    most = validate.optional_count(limit, "limit", high=validate.MAX_INT64)
    show = validate.flag(progress, "progress")
    model = summarizer_name(summarizer)
    queued = yield from queue_count_op(sid, tenant)
    todo = queued if most is None else min(queued, most)
    if todo == 0:
        return 0
    bar = tqdm(total=todo, unit="chunk", desc="summarising", disable=not show, leave=False)
    done = idle = 0
    tried: list[tuple[uuid.UUID, int]] = []
    try:
        while most is None or done < most:
            status = yield from summarize_one_op(store, summarizer, model, sid, tenant, tried)
            if status is None:
                break
            if status == "stored":
                done += 1
                idle = 0
                bar.update(1)
            elif status == "changed":
                idle += 1
                if idle == MAX_IDLE:
                    break
    finally:
        bar.close()
    return done


def summaries(store: StoreState, session_id: uuid.UUID | str) -> Op[list[ChunkSummary]]:
    """The stored summaries of a session, oldest chunk first (chunks not summarised yet
    are absent); ``SessionNotFound`` for an unknown session."""
    sid = validate.session_id(session_id)
    yield from session(store, sid)
    rows = yield Q(query("summary_list"), (sid,), named=True)
    return [open_summary(store.ctx.sealer, sid, record(ChunkSummary, r)) for r in rows]
