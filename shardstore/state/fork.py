"""Fork: a new session whose history is another session's turns 0..N, shared, not copied.

Each public function below whose first parameter is ``store`` is a store method, bound once
into :class:`shardstore.Store` and once into :class:`shardstore.AsyncStore`; its docstring is
the method's. Schema: docs/fork.md, "How it works" (the lineage columns of ``sessions``,
``fork_copies``; ``fork_v1``, ``fork_segments_v1``, copy-on-write); statements:
``shardstore/state/sql/fork.sql``. How reads follow a lineage is in :mod:`shardstore.history.ops`
(``segments_op``).
"""

from __future__ import annotations

import uuid
from typing import Any

from ..core import jsoncodec, validate
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q
from ..errors import (
    CheckpointNotFound,
    InvalidInput,
    SessionConflict,
    SessionNotFound,
    SessionPurged,
)


def _at(value: Any) -> int | None:
    """A fork point: None (the end), or an int from -1 (inherit nothing) up."""
    if value is None:
        return None
    if type(value) is not int or not -1 <= value <= validate.MAX_INT64:
        raise InvalidInput(
            "at_turn_seq must be an int >= -1 (-1: fork with an empty history), not "
            f"{validate.shown(value)}"
        )
    return value


def _metadata(value: Any) -> str:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InvalidInput(f"metadata must be a dict, not {type(value).__name__}")
    return jsoncodec.encode_json(value, "metadata")


def fork_op(
    session_id: Any,
    at_turn_seq: Any = None,
    checkpoint_id: Any = None,
    new_session_id: Any = None,
    metadata: Any = None,
) -> Op[uuid.UUID]:
    """Create the fork in one statement (``fork_v1``); see :func:`fork`."""
    sid = validate.session_id(session_id)
    at = _at(at_turn_seq)
    cid = None if checkpoint_id is None else validate.uuid_value(checkpoint_id, "checkpoint_id")
    if at is not None and cid is not None:
        raise InvalidInput("give at_turn_seq or checkpoint_id, not both")
    new = (
        uuid.uuid4()
        if new_session_id is None
        else validate.uuid_value(new_session_id, "new_session_id")
    )
    if new == sid:
        raise SessionConflict(f"new_session_id {new} is the session being forked")
    meta = _metadata(metadata)
    row = yield Q(query("fork"), (sid, at, cid, new, meta), fetch="one", named=True)
    status = row["status"]
    if status == "ok":
        return new
    if status == "not_found":
        raise SessionNotFound(f"session {sid} does not exist")
    if status == "purged":
        raise SessionPurged(f"session {sid} was purged")
    if status == "no_checkpoint":
        raise CheckpointNotFound(f"checkpoint {cid} does not exist in session {sid}")
    if status == "exists":
        owners = yield Q(query("session_owners"), (new,), fetch="one", named=True)
        if owners is not None and owners["purged"]:
            raise SessionPurged(
                f"session {new} (new_session_id) was purged; its id cannot be reused"
            )
        raise SessionConflict(f"session {new} (new_session_id) already exists")
    turns = int(row["turns"])
    raise InvalidInput(
        f"fork point {row['at']} is past the end: session {sid} has {turns} turns "
        f"(fork at -1 .. {turns - 1})"
    )


def fork(
    store: StoreState,
    session_id: uuid.UUID | str,
    *,
    at_turn_seq: int | None = None,
    checkpoint_id: uuid.UUID | str | None = None,
    new_session_id: uuid.UUID | str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Op[uuid.UUID]:
    """Fork a session and return the new session's id.

    The fork has the same tenant, subject and agent; its history is the parent's turns
    ``0 .. at_turn_seq`` inclusive (default: all of them now; ``checkpoint_id``: up to that
    checkpoint's position; ``-1``: none), shared, not copied: one row is written whatever
    the history's length. Its next turn gets ``turn_seq == at_turn_seq + 1`` (in a new
    chunk); appends go to the fork only and the parent goes on independently. ``tail``,
    ``tail_explained``, ``history``, ``chunks``, ``restore`` and session-scoped ``search``
    read the inherited turns and the fork's own as one history; forks of forks work.

    Rewinding or ``purge_range``-ing the parent below the fork point never changes the
    fork's history (the turns it would lose are copied into it first); a GDPR purge of the
    parent (``purge_session``/``purge_subject``/``purge_tenant``) erases the shared turns
    from the fork too; purging the fork leaves the parent alone. Retention by age
    (``purge_before``, ``maintain(retention=...)``) removes inherited turns by the time they
    were written, as it would copies. Idempotency keys: only the fork's own turns' keys
    count; a key used in the inherited prefix is not a duplicate in the fork.

    ``InvalidInput`` (nothing written) for a fork point below -1 or past the end, both
    ``at_turn_seq`` and ``checkpoint_id``, bad ids or metadata that is not a JSON object;
    ``SessionNotFound`` / ``SessionPurged`` for the parent (another tenant's session under
    Row-Level Security is not found); ``CheckpointNotFound`` for a checkpoint not in this
    session; ``SessionConflict`` for a ``new_session_id`` that exists."""
    return (yield from fork_op(session_id, at_turn_seq, checkpoint_id, new_session_id, metadata))
