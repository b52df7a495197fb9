"""The write side every importer shares: sessions opened for an import, messages checked
and encoded one by one (so an error names the source element), and batches appended.

Two append paths. :func:`append_op` is the ordinary one (``append_v2`` keeping nothing,
turns stamped at import time), for sources that keep no per-turn times (single-row tables,
LangGraph). :func:`append_exact_op` keeps each turn's ``created_at`` and ``turn_seq``
(``import_turns_v3``) for JSONL exports. Both apply the chunker's rules server-side.
:func:`append_op` writes the chunks a batch starts and seals straight into agent_history;
:func:`append_exact_op` does too, except the newest ones holding the session's newest
``default_tail_turns`` turns, which stay buffered as a fold leaves them. On Citus both buffer
the batch and fold what it sealed, keeping nothing. A chunk that was open before the batch
and is sealed by it is folded in the caller's transaction (an import runs a session in one
transaction, which a background folder on another connection could not see)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from partition_manager.plan import bounds_for

from ..core import jsoncodec, validate
from ..core.context import Context
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q
from ..encryption.envelope import is_sealed
from ..encryption.turns import seal_batch, sealed_sizes, session_scope
from ..errors import (
    Conflict,
    ImportRejected,
    InvalidInput,
    SessionConflict,
    SessionNotFound,
    SessionPurged,
)
from ..history.ops import create_session_op, ensure_partitions_op, fold_sealed_op
from .report import Progress


@dataclass(slots=True)
class Batch:
    """Encoded messages waiting for one append statement."""

    texts: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    times: list[datetime] = field(default_factory=list)
    appended: int = 0  # turns appended from this batch object so far (append_batch_op)
    written: int = 0  # ... and their stored bytes

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def bytes(self) -> int:
        """The stored JSON size of the batch's messages."""
        return sum(self.sizes)

    def add(
        self,
        ctx: Context,
        message: Any,
        where: str,
        key: str | None = None,
        claimed: Any = None,
        seal: Callable[[str], str] | None = None,
    ) -> None:
        """Check and encode ``message`` as an append would; ``ImportRejected`` naming
        ``where`` for a message shardstore cannot store as it is. ``claimed``: the token
        count an export recorded, kept when it is within 10% + 4 tokens of this store's own
        count (the same tokenizer counts a few tokens apart once JSONB has reordered the
        keys); anything else gets this store's count, so chunk budgets hold within their
        token margin whatever a file claims. An encrypted message (a sealed value, as an
        export of a store with ``encryption=`` carries it) is stored as it is, with the
        token count the file records for its plaintext. ``seal``: what seals a plaintext
        message's encoded text for its place (an import into a store with ``encryption=``),
        applied once it is counted; the cap applies to what is stored."""
        sealed = is_sealed(message)
        if sealed:  # encryption at rest: stored as it came, its plaintext's count kept
            if type(claimed) is not int or not 0 <= claimed <= validate.MAX_INT32:
                raise ImportRejected(f"{where}: an encrypted message needs its token count")
            text = json.dumps(message, separators=(",", ":"))
        else:
            try:
                text = jsoncodec.encode_message(message)
            except InvalidInput as exc:
                raise ImportRejected(f"{where}: {exc}") from None
        size = len(text.encode("utf-8"))
        limit = ctx.settings.chunk_max_bytes
        if size > limit:
            raise ImportRejected(
                f"{where}: the message is {size} bytes as JSON; the per-turn cap is {limit} "
                "bytes (chunk_max_bytes)"
            )
        self.texts.append(text)
        self.sizes.append(size)
        if sealed:
            tokens = claimed
        else:
            tokens = ctx.counter.count(text)
            if type(claimed) is int and abs(claimed - tokens) <= tokens // 10 + 4:
                tokens = max(claimed, 0)
            if seal is not None:
                text = seal(text)
                size = len(text.encode("utf-8"))
                if size > limit:
                    raise ImportRejected(
                        f"{where}: the message is {size} bytes once encrypted; the per-turn "
                        f"cap is {limit} bytes (chunk_max_bytes)"
                    )
                self.texts[-1] = text
                self.sizes[-1] = size
        self.tokens.append(tokens)
        self.keys.append(key)

    def clear(self) -> None:
        """Empty the batch after it was appended."""
        for column in (self.texts, self.tokens, self.sizes, self.keys, self.times):
            column.clear()


def open_session_op(
    where: str,
    tenant_id: str,
    subject_id: str | None,
    session_id: uuid.UUID,
    metadata: dict[str, Any],
    created_at: datetime | None = None,
) -> Op[tuple[int, bool]]:
    """Create the session (or find it, with the same owners); returns how many turns it
    holds already (where a re-run resumes) and whether it existed. ``created_at`` is the
    source's creation time, set while the session is empty. A session of other owners, a
    purged one or owners shardstore refuses raise ``ImportRejected`` naming ``where``."""
    existed = (yield Q(query("session_owners"), (session_id,), fetch="one")) is not None
    try:
        sid = yield from create_session_op(tenant_id, subject_id, None, session_id, metadata)
    except (InvalidInput, SessionConflict, SessionPurged) as exc:
        raise ImportRejected(f"{where}: {exc}") from None
    (turns,) = yield Q(query("import_session_turns"), (sid,), fetch="one")
    if created_at is not None and turns == 0:
        yield Q(query("import_session_created"), (created_at, sid), fetch="none")
    return int(turns), existed


def _chunking(ctx: Context) -> tuple[Any, ...]:
    return (
        ctx.settings.budget_tokens,
        ctx.settings.chunk_max_bytes,
        ctx.partition_interval.total_seconds(),
        ctx.partition_origin,
    )


def _array(texts: Sequence[str]) -> str:
    return "[" + ",".join(texts) + "]"


def append_op(ctx: Context, sid: uuid.UUID, batch: Batch) -> Op[None]:
    """Append the batch at the session's head (``append_v2``: one statement, stamped now)
    and fold what it sealed, in the caller's transaction. A store with ``encryption=``
    seals each turn for the seq it gets (:func:`_sealed_texts_op`), as an append does."""
    if not batch:
        return
    texts, sizes = batch.texts, batch.sizes
    expected: list[int | None] | None = None
    if ctx.sealer is not None:
        texts, sizes, expected = yield from _sealed_texts_op(ctx, sid, batch)
    # keeping nothing: the fold below runs in the import's transaction, where a kept chunk's
    # dead rows would be walked by every later fold of the session
    # (docs/decisions/0020-batches-keep-the-tail-and-the-window-by-concatenation.md)
    keep = 0
    params = (
        sid,
        _array(texts),
        batch.tokens,
        sizes,
        batch.keys,
        *_chunking(ctx),
        keep,
    )
    rows = yield Q(query("append"), params, named=True)
    if expected is not None:
        for row, seq in zip(rows, expected, strict=True):
            if seq is not None and int(row["turn_seq"]) != seq:  # never while the lock holds
                raise Conflict(
                    f"session {sid} was appended to while an encrypted import sealed its "
                    "turns; nothing of the session was written, run the import again"
                )
    if any(r["sealed"] for r in rows):
        yield from fold_sealed_op(sid)


def _sealed_texts_op(
    ctx: Context, sid: uuid.UUID, batch: Batch
) -> Op[tuple[list[str], list[int], list[int | None]]]:
    """The batch's texts sealed for the seqs the session's head gives them, their stored
    sizes, and those seqs (None for a turn whose idempotency key the session knows). The
    head statement locks the session row until the caller's transaction ends, so no other
    append moves the head before this batch's append."""
    sealer = ctx.sealer
    assert sealer is not None
    head = yield Q(query("sealed_append_head"), {"sid": sid, "keys": batch.keys}, named=True)
    if not head:
        raise SessionNotFound(f"session {sid} does not exist")
    owners = head[0]
    key = sealer.keys.key_for(session_scope(owners["tenant_id"], owners["subject_id"], sid))
    assert key is not None
    texts, expected = seal_batch(sealer, key, sid, owners, batch.texts, batch.keys)
    return texts, sealed_sizes(texts, ctx.settings.chunk_max_bytes, ImportRejected), expected


def append_batch_op(ctx: Context, sid: uuid.UUID, batch: Batch, bar: Progress) -> Op[None]:
    """:func:`append_op`, then the batch counted (on ``bar``, and in its ``appended`` and
    ``written`` totals) and emptied."""
    yield from append_op(ctx, sid, batch)
    batch.appended += len(batch)
    batch.written += batch.bytes
    bar.done(len(batch))
    batch.clear()


class Partitions:
    """The partitions an import of past turns has made sure of, so that each is created
    (if missing) once, outside the session's transaction (:func:`premake_op`)."""

    def __init__(self) -> None:
        self.known: set[datetime] = set()


def partition_check(ctx: Context, at: datetime, where: str) -> None:
    """``ImportRejected`` naming ``where`` for a turn time that no partition of
    agent_history can hold (its partition's bounds fall outside the dates Python and the
    partition names can write, as 9999-12-31 does with weekly partitions)."""
    try:
        bounds_for(at, ctx.partition_interval, ctx.partition_origin)
    except (OverflowError, ValueError):
        raise ImportRejected(
            f"{where}: created_at {at.isoformat()} is outside the dates agent_history's "
            "partitions can hold"
        ) from None


def premake_op(store: StoreState, partitions: Partitions, times: Sequence[datetime]) -> Op[None]:
    """Make sure the partitions holding ``times`` exist, each created in a transaction of
    its own on another connection of the store's pool, before the session's transaction
    folds chunks into them. A partition created inside that transaction would stay locked
    until it commits: its ATTACH holds agent_history's SHARE UPDATE EXCLUSIVE lock, which
    every other partition creation needs (maintenance's premake, a live fold crossing into
    a new partition, another import) and two imports creating partitions in different
    orders deadlock (the ``scale`` benchmark, benchmarks/suites/scale.py, saw it). A store
    on a single connection has no other connection: its folds create partitions in the
    session's transaction."""
    if not store.connector.pooled:
        return
    ctx = store.ctx
    lowers = {bounds_for(t, ctx.partition_interval, ctx.partition_origin).lower for t in times}
    missing = sorted(lowers - partitions.known)
    if missing:
        yield Call(store._run, (ensure_partitions_op(missing),))
        partitions.known.update(missing)


_REFUSED = {
    "seq": "turn_seq {seq} does not continue the session (it holds {have} turns)",
    "time": "created_at {at} is earlier than the turn before it",
    "future": "created_at {at} lies in the future (more than 5 minutes after the server's clock)",
    "key": "idempotency key {key!r} is used by an earlier turn of the session",
}


def append_exact_op(
    ctx: Context, sid: uuid.UUID, first_seq: int, batch: Batch, where: Sequence[str]
) -> Op[None]:
    """Append the batch keeping its turn_seqs (from ``first_seq``, gap-free), created_at
    times and idempotency keys (``import_turns_v3``: the chunks the batch starts and seals
    go straight to agent_history, except the newest ones holding the session's newest
    ``default_tail_turns`` turns, which stay buffered as a fold leaves them, so that a tail
    after the import reads buffer rows; the sealed chunks outside that window, such as the
    one open before the batch, are folded in the same statement; on Citus,
    ``import_turns`` and a fold of what it sealed).
    ``ImportRejected`` naming ``where[i]`` of the turn the server refused; the caller's
    transaction then rolls back."""
    if not batch:
        return
    params = (
        sid,
        first_seq,
        _array(batch.texts),
        batch.tokens,
        batch.sizes,
        batch.keys,
        batch.times,
        *_chunking(ctx),
        ctx.settings.default_tail_turns,
    )
    row = yield Q(query("import_turns"), params, fetch="one", named=True)
    status, index = row["status"], row["index"]
    if status != "ok":
        (have,) = yield Q(query("import_session_turns"), (sid,), fetch="one")
        text = _REFUSED[status].format(
            seq=first_seq + index,
            have=have,
            at=batch.times[index].isoformat(),
            key=batch.keys[index],
        )
        raise ImportRejected(f"{where[index]}: {text}")
    if row["sealed"]:
        yield from fold_sealed_op(sid)
