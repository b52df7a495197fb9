"""Frozen value types returned by the public API."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an appended turn landed. ``duplicate`` is True when the idempotency key had
    already been used: nothing was stored and the first append's result is returned.
    ``checkpoint_id``: the checkpoint written with the turn (``append_turn(...,
    checkpoint=...)``; every result of such a batch names its one checkpoint), else None."""

    turn_seq: int
    chunk_seq: int
    tokens: int
    duplicate: bool
    checkpoint_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """One stored message. ``message`` is the dict exactly as it was appended."""

    turn_seq: int
    message: dict[str, Any]
    tokens: int
    created_at: datetime
    chunk_seq: int
    idempotency_key: str | None = None


# A read builds a Turn per stored turn (20 per tail(), thousands per history page); the frozen
# dataclass's __init__ sets each field through object.__setattr__, ~0.9 us a Turn here, and
# assigning the slots directly takes half that. The field list is checked once, at import,
# so a new field cannot be left unset.
_TURN_FIELDS = ("turn_seq", "message", "tokens", "created_at", "chunk_seq", "idempotency_key")
if tuple(f.name for f in fields(Turn)) != _TURN_FIELDS:  # pragma: no cover - a code change
    raise RuntimeError("models.new_turn does not set every field of Turn")
_set_seq, _set_message, _set_tokens, _set_at, _set_chunk, _set_key = (
    getattr(Turn, name).__set__ for name in _TURN_FIELDS
)
_new = object.__new__


def new_turn(
    turn_seq: int,
    message: dict[str, Any],
    tokens: int,
    created_at: datetime,
    chunk_seq: int,
    idempotency_key: str | None,
) -> Turn:
    """``Turn(turn_seq, message, tokens, created_at, chunk_seq, idempotency_key)``, equal
    and identical in type, built without the dataclass __init__ (for the read paths)."""
    turn: Turn = _new(Turn)
    _set_seq(turn, turn_seq)
    _set_message(turn, message)
    _set_tokens(turn, tokens)
    _set_at(turn, created_at)
    _set_chunk(turn, chunk_seq)
    _set_key(turn, idempotency_key)
    return turn


@dataclass(frozen=True, slots=True)
class Chunk:
    """Metadata of one chunk of a session's history.

    ``is_open`` marks the newest chunk that still accepts turns (partly or wholly in the
    write buffer); every other chunk is sealed and takes no more turns. ``partition`` names
    the ``agent_history`` partition holding a chunk's folded turns; None while all its turns
    are still in the write buffer (the open chunk, a sealed chunk whose fold has not run, or
    one of the newest sealed chunks, which folds keep there for ``tail()``).
    """

    chunk_seq: int
    first_turn_seq: int
    turn_count: int
    token_count: int
    byte_count: int
    chunk_start: datetime
    chunk_end: datetime
    is_open: bool = False
    partition: str | None = None

    @property
    def last_turn_seq(self) -> int:
        """The turn_seq of the chunk's newest turn."""
        return self.first_turn_seq + self.turn_count - 1


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session's owners and its write head. ``turn_count``: the write head, the number of
    turns ever appended less those rewound (the next turn gets this turn_seq);
    ``first_turn_seq``: the first turn the session still holds (0 unless ``purge_range``
    removed the turns before it); ``stored_turns``: how many it holds. ``last_turn_at``:
    the time of its last append (None before the first): its last activity, which a rewind
    or a range purge keeps."""

    session_id: uuid.UUID
    tenant_id: str
    subject_id: str | None
    agent_id: str | None
    metadata: dict[str, Any]
    created_at: datetime
    turn_count: int
    chunk_count: int
    purged: bool
    last_turn_at: datetime | None = None
    first_turn_seq: int = 0

    @property
    def stored_turns(self) -> int:
        """Turns the session holds: ``turn_count - first_turn_seq`` (0 when purged)."""
        return 0 if self.purged else max(0, self.turn_count - self.first_turn_seq)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of ``agent_history``: its bounds, chunk rows and total size on disk."""

    name: str
    lower: datetime
    upper: datetime
    rows: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Stats:
    """Store-wide counts. ``turns``: turns appended to the sessions (a fork counts its own,
    not those it shares with its parent); ``buffered_turns`` are turns not yet folded into
    a chunk row."""

    sessions: int
    turns: int
    chunks: int
    buffered_turns: int
    partitions: list[PartitionInfo] = field(default_factory=list)
    partition_interval_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One chunk found by :meth:`shardstore.Store.search`. ``score`` is the cosine
    similarity of its best-matching window to the query (1 = same direction); ``turns``
    are the turns of that window, oldest first, not the whole chunk."""

    session_id: uuid.UUID
    chunk_seq: int
    score: float
    turns: list[Turn] = field(default_factory=list)
