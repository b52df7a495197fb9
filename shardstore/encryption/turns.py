"""Turns under encryption: sealing a batch at the positions the server will give it, and
opening the turns every read path returns.

The server assigns ``turn_seq``, and a turn's ciphertext is bound to it. A sealed append
therefore reads the session's head (tenant, subject, next ``turn_seq``, which of the batch's
idempotency keys it knows) inside the transaction of the append, seals each new turn for the
seq it will get, appends, and checks that every stored turn got the seq it was sealed for.
The head statement locks the session row as the append does, so no concurrent append or
rewind moves the head in between; should the check fail all the same, the whole attempt is
rolled back (nothing sealed for a wrong position is ever committed) and repeated.

A rewind frees positions, so a position alone does not tell a turn from the turn a rewind
removed there. Each rewind that removes turns starts a new *rewind epoch* of its session, in
its own transaction (``sessions.rewind_epochs``: the pairs ``(cut, epoch)`` of the rewinds
still standing). A turn is sealed for ``(turn_seq, epoch)``, the epoch being the newest one
(read, locked, by the head statement), and records it in clear as ``"e"`` (omitted for epoch
0, so turns sealed before epochs existed open unchanged). A reader expects the turn at seq
``s`` to carry :func:`epoch_at` ``(epochs, s)``: the epoch of the last standing cut at or
below ``s``. A later rewind with a cut at or below ``s`` removes the turn; one with a cut
above ``s`` leaves ``epoch_at(s)`` as it was; so an honest turn always carries it, and a
ciphertext saved before a rewind and written back at a position the rewind freed never does
(``DecryptionFailed``). Turns a fork inherited from an ancestor are judged by the fork
lineage instead (an ancestor's later rewind copies them into the fork first, so its epochs
say nothing about them).
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

from ..core import jsoncodec
from ..core.sql import query
from ..core.steps import Op, Q
from ..errors import (
    Conflict,
    DecryptionFailed,
    InvalidInput,
    SessionNotFound,
    SessionPurged,
    TurnTooLarge,
)
from ..models import Turn, new_turn
from .envelope import MARK, Sealer, is_sealed, refuse_sealed
from .keystore import DataKey, Scope
from .places import TURN_KIND

TURN = TURN_KIND
SEALED_APPEND_ATTEMPTS = 8


KEPT_HEADS = 4096
"""How many sessions' heads a store keeps after appending to them."""


def kept_head(sealer: Sealer, session_id: uuid.UUID) -> dict[str, Any] | None:
    """The head the store kept from its last append to the session, in the shape of the
    head statement's row (no idempotency keys known), or None."""
    kept = sealer.heads.get(session_id)
    if kept is None:
        return None
    tenant_id, subject_id, next_turn_seq, epoch = kept
    return {
        "tenant_id": tenant_id,
        "subject_id": subject_id,
        "next_turn_seq": next_turn_seq,
        "epoch": epoch,
        "known": (),
    }


def keep_head(
    sealer: Sealer, session_id: uuid.UUID, head: Mapping[str, Any], expected: Sequence[int | None]
) -> None:
    """Keep the session's head after an append sealed from ``head`` stored the turns
    ``expected`` says, so that the next append can seal without reading it (one statement,
    ``append_sealed_v1``, which refuses the append when the head moved meanwhile)."""
    stored = [seq for seq in expected if seq is not None]
    next_turn_seq = stored[-1] + 1 if stored else int(head["next_turn_seq"])
    heads = sealer.heads
    heads.pop(session_id, None)
    if len(heads) >= KEPT_HEADS:
        # another thread may change the dict between iter() and next()
        with suppress(StopIteration, RuntimeError):
            heads.pop(next(iter(heads)), None)  # the oldest kept
    heads[session_id] = (head["tenant_id"], head["subject_id"], next_turn_seq, int(head["epoch"]))


def forget_head(sealer: Sealer | None, session_id: uuid.UUID) -> None:
    """Drop the kept head of a session (it moved: a rewind, another writer)."""
    if sealer is not None:
        sealer.heads.pop(session_id, None)


class HeadMoved(Exception):
    """Internal: a concurrent append took a seq a turn was sealed for; the attempt is
    rolled back and repeated."""


def session_scope(tenant_id: str, subject_id: str | None, session_id: uuid.UUID) -> Scope:
    """Whose key a session's turns are sealed with: its subject's, else its own."""
    if subject_id is not None:
        return Scope("subject", tenant_id, subject_id)
    return Scope("session", tenant_id, str(session_id))


def turn_position(turn_seq: int, epoch: int) -> str:
    """The position a turn's ciphertext is bound to: its seq, and its rewind epoch when not
    0 (an integer seq never contains ``@``, so no two pairs meet)."""
    return str(turn_seq) if epoch == 0 else f"{turn_seq}@{epoch}"


Epochs = Sequence[int]
"""A session's ``rewind_epochs``: pairs ``(cut, epoch)``, flat, cuts and epochs ascending."""


def epoch_at(epochs: Epochs | None, turn_seq: int) -> int:
    """The rewind epoch the turn at ``turn_seq`` was written in: the epoch of the last
    standing rewind whose cut is at or below it; 0 when none is."""
    if not epochs:
        return 0
    cuts = epochs[0::2]
    i = bisect_right(cuts, turn_seq)
    return 0 if i == 0 else int(epochs[2 * i - 1])


def recorded_epoch(message: Mapping[str, Any], where: str) -> int:
    """The epoch a sealed turn says it was written in (``"e"``, 0 when absent)."""
    epoch = message.get("e", 0)
    if type(epoch) is not int or epoch < 0 or (epoch == 0 and "e" in message):
        raise DecryptionFailed(f"{where}: the sealed turn's epoch is malformed")
    return epoch


def sealed_sizes(
    texts: Sequence[str], limit: int, refuse: type[InvalidInput] = TurnTooLarge
) -> list[int]:
    """The stored size in bytes of each sealed turn; ``refuse`` (an :class:`InvalidInput`,
    ``TurnTooLarge`` unless given) for the first over ``limit`` (``chunk_max_bytes``): the
    envelope (nonce, tag, base64, its fields) makes a message under the cap in clear
    larger, so the cap is checked again once sealed."""
    sizes = [len(text.encode("utf-8")) for text in texts]
    for i, size in enumerate(sizes):
        if size > limit:
            raise refuse(
                f"message {i} is {size} bytes once encrypted; the per-turn cap is {limit} "
                "bytes (chunk_max_bytes). Store large tool outputs elsewhere and reference them."
            )
    return sizes


def seal_batch(
    sealer: Sealer,
    key: DataKey,
    session_id: uuid.UUID,
    head: Mapping[str, Any],
    texts: Sequence[str],
    keys: Sequence[str | None],
) -> tuple[list[str], list[int | None]]:
    """The batch's texts sealed for the seqs the server will give them in the session's
    current rewind epoch (``head["epoch"]``), and those seqs (None for a turn whose key the
    session knows: the server stores nothing for it)."""
    known = set(head["known"] or ())
    seq = int(head["next_turn_seq"])
    epoch = int(head["epoch"])
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
        position = turn_position(seq, epoch)
        sealed.append(
            sealer.seal_text(key, TURN, origin, position, text, with_origin=True, epoch=epoch)
        )
        seq += 1
    return sealed, expected


Lineage = Mapping[str, Sequence[tuple[int | None, int | None]]]
"""Sessions whose sealed turns a session may read -> the turn ranges (inclusive, None:
unbounded) it may read from each."""


class StaleEpoch(DecryptionFailed):
    """Internal: a turn of the session's own carries an epoch older than the one its
    position has now: written back from before a rewind, or removed by a rewind that
    committed between the read of the turn and the read of the epochs."""


def open_message(
    sealer: Sealer,
    session_id: uuid.UUID,
    turn_seq: int,
    message: Any,
    lineage: Lineage | None,
    epochs: Epochs | None = None,
    memo: dict[str, DataKey] | None = None,
    own: str | None = None,
) -> dict[str, Any]:
    """The plaintext message of the turn at ``turn_seq`` read through ``session_id``. A
    turn sealed by another session is accepted only from the session's fork lineage, within
    the turns it inherited (``lineage``); one sealed by the session itself only in the
    rewind epoch of its position (``epochs``, the session's ``rewind_epochs``). ``memo``
    and ``own`` (``str(session_id)``) spare a read of many turns repeated work."""
    own = str(session_id) if own is None else own
    where = f"turn {turn_seq} of session {own}"
    sealed = is_sealed(message)
    origin = message.get("o") if sealed else own
    epoch = recorded_epoch(message, where) if sealed else 0
    if not sealed:
        pass  # refused as plaintext by Sealer.open below
    elif origin == own:
        expected = epoch_at(epochs, turn_seq)
        if epoch < expected:
            raise StaleEpoch(
                f"{where} was sealed before a rewind of the session that removed the turn "
                "then at its position; nothing of it is returned"
            )
        if epoch > expected:
            raise DecryptionFailed(
                f"{where} claims a rewind epoch its session never reached; nothing of it is "
                "returned"
            )
    else:
        ranges = lineage.get(origin, ()) if lineage is not None and type(origin) is str else ()
        if not any(
            (lo is None or lo <= turn_seq) and (hi is None or turn_seq <= hi) for lo, hi in ranges
        ):
            raise DecryptionFailed(
                f"{where} was sealed for another session or position of its fork lineage; "
                "nothing of it is returned"
            )
    text = sealer.open(message, TURN, origin, turn_position(turn_seq, epoch), where, memo=memo)
    opened: dict[str, Any] = jsoncodec.loads(text)
    return opened


def needs_epochs(session_id: uuid.UUID, messages: Sequence[Any]) -> bool:
    """Whether some sealed message names the session itself as its writer: its position's
    rewind epoch must be read to judge it."""
    own = str(session_id)
    return any(is_sealed(m) and m.get("o") == own for m in messages)


def epochs_of(column: Sequence[int] | None) -> list[int] | None:
    """A ``rewind_epochs`` column as read, for the readers' checks (None: never rewound)."""
    return None if column is None else [int(v) for v in column]


def epochs_op(session_id: uuid.UUID) -> Op[list[int] | None]:
    """The session's ``rewind_epochs`` (None: never rewound, or no such session)."""
    row = yield Q(query("sealed_epochs"), (session_id,), fetch="one")
    return None if row is None else epochs_of(row[0])


def _still_stored_op(session_id: uuid.UUID, turn: Turn) -> Op[bool]:
    """Whether the session still stores exactly ``turn``'s sealed message at its seq."""
    rows = yield Q(query("tail_at"), (session_id, turn.turn_seq, 1, None), named=True)
    if not rows or int(rows[0]["turn_seq"]) != turn.turn_seq:
        return False
    stored = jsoncodec.loads(rows[0]["message"])
    return bool(stored == turn.message)


def needs_lineage(session_id: uuid.UUID, messages: Sequence[Any]) -> bool:
    """Whether some sealed message names another session as its writer (a fork's
    inherited turns, or a copied row): the lineage must be read to judge it."""
    own = str(session_id)
    return any(is_sealed(m) and m.get("o") != own for m in messages)


def lineage_op(session_id: uuid.UUID) -> Op[Lineage]:
    """The sessions whose sealed turns a session may read, with the turns of each: its fork
    chain (up to each ancestor's bound), and the origins of turns a copy-on-write moved into
    that chain's storage. One statement for the chain, then one per session of it, so that
    each reads one session (one shard on Citus)."""
    segments = yield Q(query("fork_segments"), (session_id,), named=True)
    lineage: dict[str, list[tuple[int | None, int | None]]] = {}
    for segment in segments:
        hi = segment["turn_hi"]
        lineage.setdefault(str(segment["session_id"]), []).append(
            (None, None if hi is None else int(hi))
        )
    for segment in segments:
        rows = yield Q(query("sealed_copies"), (segment["session_id"],), named=True)
        for row in rows:
            lo = None if row["lo"] is None else int(row["lo"])
            hi = None if row["hi"] is None else int(row["hi"])
            lineage.setdefault(str(row["origin"]), []).append((lo, hi))
    return lineage


EPOCHS_UNREAD: Any = object()
"""``open_turns_op(epochs=)``'s default: the epochs are read when needed."""


def open_turns_op(
    sealer: Sealer | None,
    session_id: uuid.UUID,
    turns: list[Turn],
    epochs: Epochs | None = EPOCHS_UNREAD,
) -> Op[list[Turn]]:
    """The turns with their messages opened: one statement more (the session's rewind
    epochs) when a turn was sealed by the session itself, one more when one was sealed by
    another session (the fork lineage). A turn whose epoch a rewind has passed is refused
    (``DecryptionFailed``) when still stored so, and gives ``Conflict`` (retryable) when a
    rewind removed it while it was read. Without a sealer (a store connected without
    ``encryption=``) the turns are returned as they are, but a sealed one is refused
    (``EncryptionRequired``). ``epochs``: the session's ``rewind_epochs`` when the read
    that gave ``turns`` read them in its own snapshot (tail's one statement)."""
    if sealer is None:
        for t in turns:
            if type(t.message) is dict and MARK in t.message:
                refuse_sealed(t.message, f"turn {t.turn_seq} of session {session_id}")
        return turns
    if not turns:
        return turns
    messages = [t.message for t in turns]
    lineage = None
    if needs_lineage(session_id, messages):
        lineage = yield from lineage_op(session_id)
    if epochs is EPOCHS_UNREAD:
        epochs = None
        if needs_epochs(session_id, messages):
            # read after the turns: an epoch only grows, so an honest turn's epoch is at
            # most the one read here, and below it only when a rewind removed the turn in
            # between
            epochs = yield from epochs_op(session_id)
    opened: list[Turn] = []
    memo: dict[str, DataKey] = {}
    own = str(session_id)
    for t in turns:
        try:
            message = open_message(
                sealer, session_id, t.turn_seq, t.message, lineage, epochs, memo, own
            )
        except StaleEpoch as exc:
            if (yield from _still_stored_op(session_id, t)):
                # stored now with an epoch its position no longer has: a replay
                raise DecryptionFailed(str(exc)) from None
            raise Conflict(
                f"session {session_id} was rewound while its turns were read; nothing was "
                "returned, read again"
            ) from None
        opened.append(
            new_turn(t.turn_seq, message, t.tokens, t.created_at, t.chunk_seq, t.idempotency_key)
        )
    return opened


def session_key_op(sealer: Sealer, session_id: uuid.UUID) -> Op[DataKey]:
    """The data key a session's values are sealed with (created on first use); one
    statement (its owners). ``SessionNotFound`` / ``SessionPurged`` as for writes."""
    return (yield from _owners_key_op(sealer, session_id, "session_owners"))


def _owners_key_op(sealer: Sealer, session_id: uuid.UUID, statement: str) -> Op[DataKey]:
    """The session's data key, from its owners as ``statement`` reads them (one row of
    tenant_id, subject_id, purged; none when the session does not exist)."""
    owners = yield Q(query(statement), (session_id,), fetch="one", named=True)
    if owners is None:
        raise SessionNotFound(f"session {session_id} does not exist")
    if owners["purged"]:
        raise SessionPurged(f"session {session_id} was purged")
    key = sealer.keys.key_for(session_scope(owners["tenant_id"], owners["subject_id"], session_id))
    assert key is not None
    return key


def locked_session_key_op(sealer: Sealer, session_id: uuid.UUID) -> Op[DataKey]:
    """The data key a session's values are sealed with, read after locking the session row
    ``FOR KEY SHARE`` (one statement). Call it inside the transaction that writes what it
    seals, so the lock holds to that commit: a data-key rotation's final check locks the row
    ``FOR UPDATE``, so the value either commits before that check (which then finds and
    re-seals it) or is sealed under the version the rotation made current; it is never left
    under a version the rotation shreds. ``SessionNotFound`` / ``SessionPurged`` as for
    writes."""
    return (yield from _owners_key_op(sealer, session_id, "sealed_writer_session"))


def locked_subject_key_op(sealer: Sealer, tenant: str, subject: str) -> Op[DataKey]:
    """A subject's data key, read after taking the subject's fact lock shared (one
    statement). Call it inside the transaction that writes what it seals: the rotation of the
    subject's key takes that lock exclusively for its final check, so the value either commits
    before that check or is sealed under the version the rotation made current."""
    yield Q(query("sealed_writer_subject"), {"tenant": tenant, "subject": subject}, fetch="none")
    key = sealer.keys.key_for(Scope("subject", tenant, subject))
    assert key is not None
    return key
