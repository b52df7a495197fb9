"""Turns under encryption: sealing a batch at the positions the server will give it, and
opening the turns every read path returns.

The server assigns ``turn_seq``, and a turn's ciphertext is bound to it. A sealed append
therefore reads the session's head (tenant, subject, next ``turn_seq``, which of the batch's
idempotency keys it knows) inside the transaction of the append, seals each new turn for the
seq it will get, appends, and checks that every stored turn got the seq it was sealed for.
The head statement locks the session row as the append does, so no concurrent append or
rewind moves the head in between; should the check fail all the same, the whole attempt is
rolled back (nothing sealed for a wrong position is ever committed) and repeated.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import jsoncodec
from ..core.sql import query
from ..core.steps import Op, Q
from ..errors import DecryptionFailed, SessionNotFound, SessionPurged
from ..models import Turn, new_turn
from .envelope import MARK, Sealer, is_sealed, refuse_sealed
from .keystore import DataKey, Scope

TURN = "turn"
SEALED_APPEND_ATTEMPTS = 8


class HeadMoved(Exception):
    """Internal: a concurrent append took a seq a turn was sealed for; the attempt is
    rolled back and repeated."""


def session_scope(tenant_id: str, subject_id: str | None, session_id: uuid.UUID) -> Scope:
    """Whose key a session's turns are sealed with: its subject's, else its own."""
    if subject_id is not None:
        return Scope("subject", tenant_id, subject_id)
    return Scope("session", tenant_id, str(session_id))


def seal_batch(
    sealer: Sealer,
    key: DataKey,
    session_id: uuid.UUID,
    head: Mapping[str, Any],
    texts: Sequence[str],
    keys: Sequence[str | None],
) -> tuple[list[str], list[int | None]]:
    """The batch's texts sealed for the seqs the server will give them, and those seqs
    (None for a turn whose key the session knows: the server stores nothing for it)."""
    known = set(head["known"] or ())
    seq = int(head["next_turn_seq"])
    origin = str(session_id)
    sealed: list[str] = []
    expected: list[int | None] = []
    for text, key_name in zip(texts, keys, strict=True):
        if key_name is not None and key_name in known:
            expected.append(None)
            # never stored (the server reports the first turn); sealed all the same, so
            # that no plaintext leaves the client
            sealed.append(sealer.seal_text(key, TURN, origin, "duplicate", text, with_origin=True))
            continue
        if key_name is not None:
            known.add(key_name)
        expected.append(seq)
        sealed.append(sealer.seal_text(key, TURN, origin, str(seq), text, with_origin=True))
        seq += 1
    return sealed, expected


Lineage = Mapping[str, Sequence[tuple[int | None, int | None]]]
"""Sessions whose sealed turns a session may read -> the turn ranges (inclusive, None:
unbounded) it may read from each."""


def open_message(
    sealer: Sealer,
    session_id: uuid.UUID,
    turn_seq: int,
    message: Any,
    lineage: Lineage | None,
) -> dict[str, Any]:
    """The plaintext message of the turn at ``turn_seq`` read through ``session_id``. A
    turn sealed by another session is accepted only from the session's fork lineage, within
    the turns it inherited (``lineage``)."""
    where = f"turn {turn_seq} of session {session_id}"
    origin = message.get("o") if is_sealed(message) else str(session_id)
    if origin != str(session_id):
        ranges = lineage.get(origin, ()) if lineage is not None and type(origin) is str else ()
        if not any(
            (lo is None or lo <= turn_seq) and (hi is None or turn_seq <= hi) for lo, hi in ranges
        ):
            raise DecryptionFailed(
                f"{where} was sealed for another session or position of its fork lineage; "
                "nothing of it is returned"
            )
    text = sealer.open(message, TURN, origin, str(turn_seq), where)
    opened: dict[str, Any] = jsoncodec.loads(text)
    return opened


def needs_lineage(session_id: uuid.UUID, messages: Sequence[Any]) -> bool:
    """Whether some sealed message names another session as its writer (a fork's
    inherited turns, or a copied row): the lineage must be read to judge it."""
    own = str(session_id)
    return any(is_sealed(m) and m.get("o") != own for m in messages)


def lineage_op(session_id: uuid.UUID) -> Op[Lineage]:
    """The sessions whose sealed turns a session may read, with the turns of each: its fork
    chain, and the origins of turns a copy-on-write moved into that chain's storage."""
    rows = yield Q(query("sealed_origins"), {"sid": session_id}, named=True)
    lineage: dict[str, list[tuple[int | None, int | None]]] = {}
    for row in rows:
        lo = None if row["lo"] is None else int(row["lo"])
        hi = None if row["hi"] is None else int(row["hi"])
        lineage.setdefault(str(row["origin"]), []).append((lo, hi))
    return lineage


def open_turns_op(
    sealer: Sealer | None, session_id: uuid.UUID, turns: list[Turn]
) -> Op[list[Turn]]:
    """The turns with their messages opened; one statement more only when a turn was sealed
    by another session. Without a sealer (a store connected without ``encryption=``) the
    turns are returned as they are, but a sealed one is refused (``EncryptionRequired``)."""
    if sealer is None:
        for t in turns:
            if type(t.message) is dict and MARK in t.message:
                refuse_sealed(t.message, f"turn {t.turn_seq} of session {session_id}")
        return turns
    if not turns:
        return turns
    lineage = None
    if needs_lineage(session_id, [t.message for t in turns]):
        lineage = yield from lineage_op(session_id)
    return [
        new_turn(
            t.turn_seq,
            open_message(sealer, session_id, t.turn_seq, t.message, lineage),
            t.tokens,
            t.created_at,
            t.chunk_seq,
            t.idempotency_key,
        )
        for t in turns
    ]


def session_key_op(sealer: Sealer, session_id: uuid.UUID) -> Op[DataKey]:
    """The data key a session's values are sealed with (created on first use); one
    statement (its owners). ``SessionNotFound`` / ``SessionPurged`` as for writes."""
    owners = yield Q(query("session_owners"), (session_id,), fetch="one", named=True)
    if owners is None:
        raise SessionNotFound(f"session {session_id} does not exist")
    if owners["purged"]:
        raise SessionPurged(f"session {session_id} was purged")
    key = sealer.keys.key_for(session_scope(owners["tenant_id"], owners["subject_id"], session_id))
    assert key is not None
    return key
