"""Checkpoints: resume an agent after a crash with zero context loss.

A checkpoint is the agent's state, its pending tool calls and results, and its *position*
in the history (``turn_seq``: the last turn it includes, -1 for none), never a copy of the
messages, so its stored size does not grow with the history. :func:`restore` gives back the
newest checkpoint and the history up to its position. ``append_turn(...,
checkpoint=state)`` (:mod:`shardstore.history.ops`) writes a turn and a checkpoint positioned at
it in one statement.

Each public function below whose first parameter is ``store`` is a store method, bound
once into :class:`shardstore.Store` and once into :class:`shardstore.AsyncStore`; its
docstring is the method's. Schema: docs/checkpoints.md, "How it works"; statements:
``shardstore/state/sql/checkpoints.sql``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..artifacts import links as artifact_links
from ..artifacts.model import ArtifactRef
from ..artifacts.ops import session_tenant_op
from ..core import jsoncodec, validate
from ..core.rows import record
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q, Tx, collect
from ..encryption import turns as enc_turns
from ..encryption.envelope import Sealer, is_sealed, refuse_sealed
from ..encryption.places import checkpoint_kind
from ..errors import CheckpointNotFound, InvalidInput, SessionNotFound, SessionPurged
from ..history import ops as history_ops
from ..history.pairing import explain_tail
from ..models import Turn

# idempotency keys are namespaced in the table: 'c:' for a checkpoint's own key, 't:' for
# one written with a turn (append_checkpoint_v1/v2), so the two kinds never collide
_CHECKPOINT_KEY = "c:"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint of a session: ``state``, ``tool_calls``, ``tool_results`` and
    ``metadata`` exactly as given, and its position ``turn_seq`` (the last turn of the
    history it includes; -1: none). ``sub_step`` orders checkpoints taken within one turn
    (e.g. before each tool call); ``parent_id`` names the checkpoint it followed, if given
    (that one may since have been removed by ``maintain(keep_checkpoints=...)``)."""

    checkpoint_id: uuid.UUID
    session_id: uuid.UUID
    turn_seq: int
    sub_step: int | None
    parent_id: uuid.UUID | None
    created_at: datetime
    state: dict[str, Any]
    tool_calls: Any = None
    tool_results: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Restored:
    """What :func:`restore` gives back: the checkpoint (None for a session without any)
    and the history up to its position, oldest first; ``artifacts``: the artifacts the
    checkpoint references (each required one is there to read); ``held_back``: with ``n``
    or ``max_tokens``, the turns at the window's start left out because a window must not
    open on them (tool results whose call is outside it, as ``tail_explained()`` reports),
    oldest first; empty otherwise."""

    checkpoint: Checkpoint | None
    turns: list[Turn]
    artifacts: list[ArtifactRef] = field(default_factory=list)
    held_back: list[Turn] = field(default_factory=list)


def _loads(text: str | None) -> Any:
    return None if text is None else jsoncodec.loads(text)


# what each sealed column of a checkpoint is bound to (with the session and checkpoint id)
_SEALED_PARTS = ("state", "tool_calls", "tool_results")


def opened_column(sealer: Sealer | None, row: Mapping[str, Any], part: str, sid: uuid.UUID) -> Any:
    """A checkpoint row's column ``part``, decoded: opened by ``sealer`` (a store with
    ``encryption=``; ``DecryptionFailed``/``KeyShredded``/``PlaintextRefused`` as the
    store's readers raise them), refused (``EncryptionRequired``) when it is sealed and the
    store has no sealer; None stays None."""
    value = _loads(row[part])
    if value is None or (sealer is None and not is_sealed(value)):
        return value
    where = f"the {part} of checkpoint {row['checkpoint_id']} of session {sid}"
    if sealer is None:
        refuse_sealed(value, where)  # raises: the value is sealed
    assert sealer is not None
    text = sealer.open(value, checkpoint_kind(part), str(sid), str(row["checkpoint_id"]), where)
    return jsoncodec.loads(text)


def _checkpoint(
    row: Mapping[str, Any], session_id: uuid.UUID, sealer: Sealer | None = None
) -> Checkpoint:
    return record(
        Checkpoint,
        row,
        session_id=session_id,
        state=opened_column(sealer, row, "state", session_id),
        tool_calls=opened_column(sealer, row, "tool_calls", session_id),
        tool_results=opened_column(sealer, row, "tool_results", session_id),
        metadata=jsoncodec.loads(row["metadata"]),
    )


def _checkpoint_id(value: Any, what: str) -> uuid.UUID:
    return validate.uuid_value(value, f"{what} (a checkpoint id)")


def _not_found(cid: uuid.UUID, sid: uuid.UUID) -> CheckpointNotFound:
    return CheckpointNotFound(f"checkpoint {cid} does not exist in session {sid}")


def _named(name: str, params: Any, fetch: Any = "all") -> Q:
    return Q(query(name), params, fetch=fetch, named=True)


def checkpoint(
    store: StoreState,
    session_id: uuid.UUID | str,
    state: dict[str, Any],
    *,
    tool_calls: Any = None,
    tool_results: Any = None,
    sub_step: int | None = None,
    parent_id: uuid.UUID | str | None = None,
    idempotency_key: str | None = None,
    metadata: dict[str, Any] | None = None,
    artifacts: list[ArtifactRef] | None = None,
) -> Op[Checkpoint]:
    """Write a checkpoint positioned at the session's last committed turn (``turn_seq``
    -1 for a session without turns), in one round trip and one commit.

    ``state`` is a dict; ``tool_calls`` and ``tool_results`` any JSON values (or None);
    ``metadata`` a dict; all are stored exactly (the same encoding as messages) and never
    with a copy of the history, so the stored size does not depend on its length.
    ``sub_step``: an int >= 0 (or None); ``parent_id``: an existing checkpoint of this
    session, else ``CheckpointNotFound``. A repeat with the same ``idempotency_key`` stores
    nothing and returns the first checkpoint, as it was stored, even if this call's content
    differs (as appends do). ``SessionNotFound`` / ``SessionPurged`` for an unknown / purged
    session; bad input raises ``InvalidInput`` and writes nothing.

    ``artifacts`` (ArtifactRef list) and every reference found in ``state`` (an
    ``ArtifactRef.to_json()`` or an offload card) are referenced by the checkpoint in the
    same transaction; those with ``required_for_resume`` are kept for as long as the
    checkpoint exists. ``ArtifactNotFound`` (nothing written) if one is not stored."""
    sid = validate.session_id(session_id)
    limit = store.ctx.settings.chunk_max_bytes
    state_text = history_ops.encode_state(state, "state", limit)
    calls = (
        None if tool_calls is None else history_ops.encode_value(tool_calls, "tool_calls", limit)
    )
    results = (
        None
        if tool_results is None
        else history_ops.encode_value(tool_results, "tool_results", limit)
    )
    step = validate.optional_count(sub_step, "sub_step", low=0)
    parent = None if parent_id is None else _checkpoint_id(parent_id, "parent_id")
    key = validate.optional_text(idempotency_key, "idempotency_key", limit=validate.MAX_KEY_CHARS)
    if metadata is None:
        metadata = {}
    if type(metadata) is not dict:
        raise InvalidInput(f"metadata must be a dict, not {type(metadata).__name__}")
    meta = history_ops.encode_value(metadata, "metadata", limit)
    cid = uuid.uuid4()
    sealer = store.ctx.sealer
    links = artifact_links.wanted(state, artifacts)
    # sealed: the key is read under the session row's lock, held to the commit, so that a
    # data-key rotation never shreds the version this checkpoint is sealed under
    in_transaction = bool(links) or sealer is not None
    if in_transaction:
        yield Tx.BEGIN
    if sealer is not None:
        data_key = yield from enc_turns.locked_session_key_op(sealer, sid)
        state_text = sealer.seal_text(
            data_key, checkpoint_kind("state"), str(sid), str(cid), state_text
        )
        if calls is not None:
            calls = sealer.seal_text(
                data_key, checkpoint_kind("tool_calls"), str(sid), str(cid), calls
            )
        if results is not None:
            results = sealer.seal_text(
                data_key, checkpoint_kind("tool_results"), str(sid), str(cid), results
            )
    stored_key = None if key is None else _CHECKPOINT_KEY + key
    params = (sid, cid, stored_key, state_text, calls, results, step, parent, meta)
    if links:
        tenant = yield from session_tenant_op(sid)
    row = yield _named("checkpoint_write", params, fetch="one")
    if links and row["status"] == "created":
        yield from artifact_links.ref_checkpoint_op(tenant, sid, cid, links)
    if in_transaction:
        yield Tx.COMMIT
    if row["status"] == "no_parent":
        assert parent is not None
        raise _not_found(parent, sid)
    if row["status"] == "duplicate":
        return _checkpoint(row, sid, sealer)
    return Checkpoint(
        checkpoint_id=cid,
        session_id=sid,
        turn_seq=int(row["turn_seq"]),
        sub_step=step,
        parent_id=parent,
        created_at=row["created_at"],
        state=state,
        tool_calls=tool_calls,
        tool_results=tool_results,
        metadata=metadata,
    )


def restore(
    store: StoreState,
    session_id: uuid.UUID | str,
    checkpoint_id: uuid.UUID | str | None = None,
    *,
    n: int | None = None,
    max_tokens: int | None = None,
) -> Op[Restored]:
    """The newest checkpoint (or the one named) and the history up to its position, from
    one consistent snapshot: after a crash, exactly what was committed.

    Without ``n`` and ``max_tokens``, every turn up to the checkpoint's ``turn_seq``; with
    them, the newest turns up to it within ``n`` turns and ``max_tokens`` tokens, never
    starting with a tool result whose call was cut off (as :meth:`tail`; those it leaves
    out are ``held_back``). A session
    without checkpoints gives ``Restored(checkpoint=None, turns=<its history>)``.
    ``CheckpointNotFound`` for a checkpoint not in this session; ``SessionNotFound`` /
    ``SessionPurged`` as for reads."""
    sid = validate.session_id(session_id)
    cid = None if checkpoint_id is None else _checkpoint_id(checkpoint_id, "checkpoint_id")
    n = validate.optional_count(n, "n")
    max_tokens = validate.optional_count(max_tokens, "max_tokens", high=validate.MAX_INT64)
    if n is None and max_tokens is None:  # the whole history: streamed chunk by chunk
        return (yield from _restore_snapshot_op(store, sid, cid, n, max_tokens))
    # the common case, one statement: the head, the checkpoint and the window at once
    row = yield _named("restore_window", (sid, cid, n, max_tokens), fetch="one")
    if not row["found"]:
        assert cid is not None
        raise _not_found(cid, sid)
    if row["has_artifacts"]:  # its artifacts are read in the same snapshot as the rest
        return (yield from _restore_snapshot_op(store, sid, cid, n, max_tokens))
    sealer = store.ctx.sealer
    found = None if row["checkpoint_id"] is None else _checkpoint(row, sid, sealer)
    window = history_ops.window_turns(row["window"])
    if sealer is None:
        explained = explain_tail(window, history_ops.before_window(window, row["before"]))
        return Restored(found, explained.turns, [], explained.held_back)
    # the epochs come from the window's own snapshot: no statement of their own
    epochs = enc_turns.epochs_of(row["rewind_epochs"])
    window = yield from enc_turns.open_turns_op(sealer, sid, window, epochs)
    before = yield from history_ops.before_window_op(sid, window, sealer)
    explained = explain_tail(window, before)
    return Restored(found, explained.turns, [], explained.held_back)


def _restore_snapshot_op(
    store: StoreState, sid: uuid.UUID, cid: uuid.UUID | None, n: int | None, max_tokens: int | None
) -> Op[Restored]:
    """:func:`restore` in a repeatable-read transaction of several statements: for the
    whole history (streamed) and for a checkpoint with artifacts."""
    yield Tx.BEGIN_SNAPSHOT
    head = yield from history_ops._head_op(sid, live=True)
    if cid is None:
        row = yield _named("checkpoint_newest", (sid,), fetch="one")
    else:
        row = yield _named("checkpoint_get", (sid, cid), fetch="one")
        if row is None:
            raise _not_found(cid, sid)
    sealer = store.ctx.sealer
    found = None if row is None else _checkpoint(row, sid, sealer)
    upto = int(head["turn_count"]) - 1 if found is None else found.turn_seq
    turns: list[Turn]
    held: list[Turn] = []
    if n is None and max_tokens is None:
        turns = yield from collect(history_ops.history(store, sid, 0, upto + 1))
    else:
        rows = yield _named("tail_at", (sid, upto, n, max_tokens))
        window = [record(Turn, r, message=jsoncodec.loads(r["message"])) for r in reversed(rows)]
        window = yield from enc_turns.open_turns_op(sealer, sid, window)
        before = yield from history_ops.before_window_op(sid, window, sealer)
        explained = explain_tail(window, before)
        turns, held = explained.turns, explained.held_back
    refs: list[ArtifactRef] = []
    if found is not None:
        refs = yield from artifact_links.checkpoint_refs_op(store, sid, found.checkpoint_id)
    yield Tx.COMMIT
    return Restored(found, turns, refs, held)


def checkpoints(
    store: StoreState,
    session_id: uuid.UUID | str,
    *,
    limit: int | None = None,
    before: uuid.UUID | str | datetime | None = None,
) -> Op[list[Checkpoint]]:
    """A session's checkpoints, newest first: at most ``limit``; with ``before``, only
    those older than it (a checkpoint id, exclusive: the next page; or a timezone-aware
    datetime: created before it). ``CheckpointNotFound`` for a ``before`` id not in this
    session."""
    sid = validate.session_id(session_id)
    limit = validate.optional_count(limit, "limit")
    before_at = None
    before_id = None
    if isinstance(before, datetime):
        before_at = validate.instant(before, "before")
    elif before is not None:
        before_id = _checkpoint_id(before, "before")
    params = {"sid": sid, "before_id": before_id, "before_at": before_at, "limit": limit}
    rows = yield _named("checkpoint_page", params)
    if not rows:
        raise SessionNotFound(f"session {sid} does not exist")
    if rows[0]["purged"]:
        raise SessionPurged(f"session {sid} was purged")
    if not rows[0]["anchor_found"]:
        assert before_id is not None
        raise _not_found(before_id, sid)
    return [_checkpoint(r, sid, store.ctx.sealer) for r in rows if r["checkpoint_id"] is not None]


# ---------------------------------------------------------------- maintenance

KEEP_BATCH = 500  # sessions per statement of keep_op


def keep_op(keep: int) -> Op[int]:
    """Delete all but the newest ``keep`` checkpoints of every session, a batch of
    sessions per statement; returns how many were deleted."""
    deleted = 0
    after: uuid.UUID | None = None
    while True:
        row = yield _named("checkpoints_keep", (keep, after, KEEP_BATCH), fetch="one")
        deleted += int(row["deleted"])
        if int(row["sessions"]) < KEEP_BATCH:
            return deleted
        after = row["last"]
