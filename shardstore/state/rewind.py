"""Rewind: take a session back to an earlier turn (retry a reply, edit the last message).

Each public function below whose first parameter is ``store`` is a store method, bound
once into :class:`shardstore.Store` and once into :class:`shardstore.AsyncStore`; its
docstring is the method's. Schema: ``sql/functions/rewind_v3.sql`` (which calls
``rewind_turns``, ``fork_cow`` and ``artifacts_released_v1``); statement: ``sql/rewind.sql``.
"""

from __future__ import annotations

import uuid

from ..core import validate
from ..core.rerun import retrying
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q
from ..encryption import turns as enc_turns
from ..errors import Conflict, InvalidInput

_RETRIES = 5


def _rewind_op(session_id: uuid.UUID, to_turn_seq: int) -> Op[int]:
    row = yield Q(query("rewind"), (session_id, to_turn_seq), fetch="one", named=True)
    status = row["status"]
    if status == "past_end":
        turns = int(row["turns"])
        why = (
            f"is past the end: session {session_id} has {turns} turn{'s' if turns != 1 else ''}"
            f" (rewind to at most {turns})"
        )
        raise InvalidInput(f"to_turn_seq {to_turn_seq} {why}", cli=f"--to {to_turn_seq} {why}")
    if status == "purged_below":
        why = (
            f"is below turn {row['first']}, the first turn a range purge kept in session "
            f"{session_id}; rewind to {row['first']} or later"
        )
        raise InvalidInput(f"to_turn_seq {to_turn_seq} {why}", cli=f"--to {to_turn_seq} {why}")
    if status != "ok":
        raise InvalidInput(f"to_turn_seq must be >= 0, not {to_turn_seq}")
    return int(row["removed"])


def rewind(store: StoreState, session_id: uuid.UUID | str, to_turn_seq: int) -> Op[int]:
    """Remove the session's turns from ``to_turn_seq`` on (retry a reply, edit the last
    message) and return how many were removed, atomically, in one statement.

    Afterwards the session is exactly as if only turns ``0 .. to_turn_seq - 1`` had been
    appended: the next append gets ``turn_seq == to_turn_seq`` and continues the chunk that
    holds the last kept turn (chunk_seq stays gap-free); ``tail``, ``history``, ``chunks``,
    ``search`` and ``restore`` no longer see the removed turns. Also removed: their
    idempotency keys (released: a retry with one of them stores a new turn), their
    embedding vectors (a folded chunk holding the cut is rewritten and embedded again),
    checkpoints positioned at a removed turn (``restore()`` then resumes from the newest one
    left), fact versions whose source is a removed turn (deleted, not closed: the version
    they replaced stays closed), and rows of any registered table tied to the removed turns
    or to the deleted chunks.

    ``to_turn_seq`` equal to the turn count removes nothing and returns 0. ``InvalidInput``
    (nothing written) for a ``to_turn_seq`` that is negative, not an int, past the end, or
    below the first turn a range purge kept; ``SessionNotFound`` / ``SessionPurged`` for an
    unknown / purged session. Appends racing a rewind land either before it (and are
    removed) or after it (at ``to_turn_seq``)."""
    sid = validate.session_id(session_id)
    if type(to_turn_seq) is int and to_turn_seq < 0:
        raise InvalidInput(f"to_turn_seq must be >= 0 (rewind below 0), not {to_turn_seq}")
    to = validate.position(to_turn_seq, "to_turn_seq")
    # an encrypting store's kept head of the session is stale after a rewind (a new epoch)
    enc_turns.forget_head(store.ctx.sealer, sid)
    return (
        yield from retrying(
            lambda: _rewind_op(sid, to),
            retry_on=lambda exc: isinstance(exc, Conflict),
            attempts=_RETRIES,
            deadline=float("inf"),
            first_delay=0.02,
            max_delay=0.02 * 2 ** (_RETRIES - 2),
        )
    )
