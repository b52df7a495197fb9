"""Every store operation, written once as a sans-IO generator.

An operation yields :class:`Q` (a statement; the executor sends back its result),
:class:`Tx` markers (open / close a transaction), :class:`Call` (local computation, run off
the event loop by the asyncio executor) and, for streaming reads, :class:`Emit` (items for
the caller). The sync and asyncio executors in :mod:`shardstore.executor`
drive the same generators, so the two APIs cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from . import jsoncodec
from .errors import (
    ConfigurationError,
    InvalidInput,
    SessionConflict,
    SessionNotFound,
    SessionPurged,
    TurnTooLarge,
)
from .models import AppendResult, Chunk, PartitionInfo, SessionInfo, Stats, Turn
from .plans import trim_tail
from .settings import DEFAULT_PARTITION_INTERVAL, Settings
from .sql import query
from .tokens import TokenCounter

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Q:
    """One statement. ``fetch`` says what the executor sends back: nothing, one row or all
    rows. ``prepare=False`` keeps a statement unprepared so that it is planned with its
    parameter values (partition pruning at plan time)."""

    sql: str
    params: Sequence[Any] | Mapping[str, Any] | None = None
    fetch: Literal["none", "one", "all"] = "all"
    prepare: bool | None = None
    # SQLSTATEs after which the operation wants a StatementFailed back instead of an error;
    # honoured only outside any transaction (autocommit), where nothing else is undone
    recover: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class StatementFailed:
    """Sent back for a Q whose error was in its ``recover`` set."""

    sqlstate: str


class Tx(enum.Enum):
    """Transaction markers. BEGIN nests as a savepoint inside a caller's transaction."""

    BEGIN = "begin"
    BEGIN_SNAPSHOT = "begin_snapshot"  # repeatable read, read only (when not nested)
    COMMIT = "commit"


@dataclass(frozen=True, slots=True)
class Emit:
    """Items produced by a streaming operation, handed to the caller as they come."""

    items: Sequence[Any]


@dataclass(frozen=True, slots=True)
class Call:
    """Local work between statements (e.g. running an embedding model): the sync executor
    calls it, the asyncio executor runs it in a thread so the event loop keeps going.
    Its return value is sent back to the operation."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


Step = Q | Tx | Emit | Call
Op = Generator[Step, Any, T]

MAX_ID_CHARS = 256
HISTORY_BATCH = 16  # folded chunks fetched per round trip by history(): ~640 kB at 10k tokens
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
_UNIQUE_VIOLATION = frozenset({"23505"})
MAX_KEY_CHARS = 512


@dataclass(frozen=True, slots=True)
class Context:
    """What operations need besides their arguments."""

    settings: Settings
    counter: TokenCounter
    # the database's partitioning (shardstore.config), known after configure_op
    partition_interval: timedelta = DEFAULT_PARTITION_INTERVAL
    partition_origin: datetime = datetime(2001, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------- argument checks


def session_uuid(value: Any) -> uuid.UUID:
    """A session id as a UUID; raises InvalidInput for anything else."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise InvalidInput(f"session_id must be a UUID (or its string form), not {value!r:.80}")


def _db_text(value: Any, what: str, *, limit: int, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, not {value!r:.80}")
    if len(value) > limit:
        raise InvalidInput(f"{what} is longer than {limit} characters")
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} must be valid Unicode (it holds a lone surrogate)") from None
    return value


def _positive(value: Any, what: str, limit: int = MAX_INT32) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 < value <= limit:
        raise InvalidInput(f"{what} must be an int from 1 to {limit}, not {value!r:.80}")
    return value


def _non_negative(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_INT64:
        raise InvalidInput(f"{what} must be a non-negative int (bigint), not {value!r:.80}")
    return value


# ---------------------------------------------------------------- setup


def configure_op(partition_interval: timedelta | None) -> Op[tuple[timedelta, datetime]]:
    """Record the partition interval on first use; refuse to change it once partitions
    exist (their bounds would overlap). Returns the interval and origin in force."""
    wanted = partition_interval or DEFAULT_PARTITION_INTERVAL
    yield Tx.BEGIN
    yield Q("LOCK TABLE shardstore.config IN EXCLUSIVE MODE", fetch="none")
    yield Q(query("config_init"), (wanted.total_seconds(),), fetch="none")
    row = yield Q(query("config_get"), fetch="one")
    current = timedelta(seconds=row[0])
    if partition_interval is not None and current != partition_interval:
        (partitions,) = yield Q(query("partition_count"), fetch="one")
        if partitions:
            raise ConfigurationError(
                f"this database partitions agent_history every {current}, not "
                f"{partition_interval}; the interval cannot change once partitions exist. "
                "Connect without partition_interval to use the recorded one."
            )
        yield Q(query("config_set_interval"), (partition_interval.total_seconds(),), fetch="none")
        current = partition_interval
    yield Tx.COMMIT
    return current, row[1]


def ensure_partitions_op(bounds: Iterable[datetime]) -> Op[list[str]]:
    """Make sure a partition exists for each of the given instants; returns their names."""
    names = []
    for at in bounds:
        (name,) = yield Q(query("ensure_partition"), (at,), fetch="one")
        names.append(name)
    return names


# ---------------------------------------------------------------- sessions


def create_session_op(
    tenant_id: Any,
    subject_id: Any = None,
    agent_id: Any = None,
    session_id: Any = None,
    metadata: Any = None,
) -> Op[uuid.UUID]:
    tenant = _db_text(tenant_id, "tenant_id", limit=MAX_ID_CHARS, optional=False)
    subject = _db_text(subject_id, "subject_id", limit=MAX_ID_CHARS, optional=True)
    agent = _db_text(agent_id, "agent_id", limit=MAX_ID_CHARS, optional=True)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise InvalidInput("metadata must be a dict")
    meta_text = jsoncodec.encode_json(metadata, "metadata")
    sid = uuid.uuid4() if session_id is None else session_uuid(session_id)
    row = yield Q(query("session_create"), (sid, tenant, subject, agent, meta_text), fetch="one")
    if row is not None:
        return sid
    owners = yield Q(query("session_owners"), (sid,), fetch="one")
    if owners is None:  # raced with a purge-and-delete; treat as absent
        raise SessionNotFound(f"session {sid} vanished while being created; retry")
    if owners[3]:
        raise SessionPurged(f"session {sid} was purged; its id cannot be reused")
    if tuple(owners[:3]) != (tenant, subject, agent):
        raise SessionConflict(
            f"session {sid} already exists with tenant/subject/agent {tuple(owners[:3])!r}"
        )
    return sid


def session_info_op(session_id: Any) -> Op[SessionInfo]:
    sid = session_uuid(session_id)
    row = yield Q(query("session_get"), (sid,), fetch="one")
    if row is None:
        raise SessionNotFound(f"session {sid} does not exist")
    return SessionInfo(
        session_id=row[0],
        tenant_id=row[1],
        subject_id=row[2],
        agent_id=row[3],
        metadata=jsoncodec.loads(row[4]),
        created_at=row[5],
        turn_count=row[6],
        chunk_count=row[7],
        purged=row[8],
    )


# ---------------------------------------------------------------- writes


@dataclass(frozen=True, slots=True)
class PreparedTurns:
    """Messages validated, encoded and counted client-side, ready for one append call."""

    texts: list[str]
    tokens: list[int]
    sizes: list[int]
    keys: list[str | None]


def prepare_turns(ctx: Context, messages: Sequence[Any], keys: Sequence[Any]) -> PreparedTurns:
    """Validate, encode and count a batch; raises before anything reaches the server."""
    limit = ctx.settings.chunk_max_bytes
    texts, tokens, sizes, clean_keys = [], [], [], []
    for i, (message, key) in enumerate(zip(messages, keys, strict=True)):
        text = jsoncodec.encode_message(message)
        size = len(text.encode("utf-8"))
        if size > limit:
            raise TurnTooLarge(
                f"message {i} is {size} bytes; the per-turn cap is {limit} bytes "
                "(chunk_max_bytes). Store large tool outputs elsewhere and reference them."
            )
        texts.append(text)
        sizes.append(size)
        tokens.append(ctx.counter.count(text))
        clean_keys.append(_db_text(key, "idempotency_key", limit=MAX_KEY_CHARS, optional=True))
    return PreparedTurns(texts, tokens, sizes, clean_keys)


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """Results of one append call; ``sealed`` says a chunk was closed and awaits its fold."""

    session_id: uuid.UUID
    results: list[AppendResult]
    sealed: bool


def append_op(
    ctx: Context, session_id: Any, messages: Sequence[Any], keys: Sequence[Any]
) -> Op[AppendOutcome]:
    """Append a batch atomically, in one statement (one round trip, one commit)."""
    sid = session_uuid(session_id)
    if not messages:
        return AppendOutcome(sid, [], False)
    batch = prepare_turns(ctx, messages, keys)
    if len(batch.texts) == 1:
        # the common case in one statement; None when the general path must decide
        fast = yield Q(
            query("append_one"),
            (
                sid,
                batch.texts[0],
                batch.tokens[0],
                batch.sizes[0],
                batch.keys[0],
                ctx.settings.budget_tokens,
                ctx.settings.chunk_max_bytes,
                ctx.partition_interval.total_seconds(),
                ctx.partition_origin,
            ),
            fetch="one",
            recover=_UNIQUE_VIOLATION,
        )
        if fast is not None and not isinstance(fast, StatementFailed):
            result = AppendResult(int(fast[0]), int(fast[1]), batch.tokens[0], False)
            return AppendOutcome(sid, [result], False)
    rows = yield Q(
        query("append"),
        (
            sid,
            "[" + ",".join(batch.texts) + "]",
            batch.tokens,
            batch.sizes,
            batch.keys,
            ctx.settings.budget_tokens,
            ctx.settings.chunk_max_bytes,
            ctx.partition_interval.total_seconds(),
            ctx.partition_origin,
        ),
    )
    return AppendOutcome(sid, [AppendResult.from_row(r) for r in rows], any(r[4] for r in rows))


def fold_sealed_op(session_id: uuid.UUID) -> Op[int]:
    """Fold a session's sealed chunks from the buffer into agent_history."""
    (moved,) = yield Q(query("fold_sealed"), (session_id,), fetch="one")
    return int(moved)


def flush_op(session_id: Any) -> Op[int]:
    sid = session_uuid(session_id)
    (moved,) = yield Q(query("flush"), (sid,), fetch="one")
    return int(moved)


# ---------------------------------------------------------------- reads


def _turn(row: Sequence[Any], chunk_seq: int | None = None) -> Turn:
    return Turn(
        turn_seq=row[0],
        chunk_seq=row[1] if chunk_seq is None else chunk_seq,
        tokens=row[2],
        created_at=row[3],
        idempotency_key=row[4],
        message=jsoncodec.loads(row[5]),
    )


def tail_op(ctx: Context, session_id: Any, n: Any = None, max_tokens: Any = None) -> Op[list[Turn]]:
    """Newest turns, oldest first, within n turns and max_tokens tokens."""
    sid = session_uuid(session_id)
    n = _positive(n, "n")
    max_tokens = _positive(max_tokens, "max_tokens", MAX_INT64)
    if n is None and max_tokens is None:
        n = ctx.settings.default_tail_turns
    rows = yield Q(query("tail"), (sid, n, max_tokens))
    turns = [_turn(r) for r in reversed(rows)]
    return trim_tail(turns)


def history_op(session_id: Any, from_seq: Any = 0, to_seq: Any = None) -> Op[None]:
    """Stream turns [from_seq, to_seq) in order, one chunk at a time, from one snapshot.

    Within a chunk the folded turns (in agent_history) precede the buffered ones; a sealed
    chunk may still sit wholly in the buffer until its fold."""
    sid = session_uuid(session_id)
    lo = _non_negative(from_seq, "from_seq")
    hi = None if to_seq is None else _non_negative(to_seq, "to_seq")
    yield Tx.BEGIN_SNAPSHOT
    head = yield Q(query("session_get"), (sid,), fetch="one")
    if head is None:
        raise SessionNotFound(f"session {sid} does not exist")
    if head[8]:
        raise SessionPurged(f"session {sid} was purged")
    end = head[6] if hi is None else min(hi, head[6])
    if lo < end:
        located = yield Q(query("chunk_map_from"), (sid, sid, lo))
        buffered = yield Q(query("buffer_turns"), (sid, lo, end))
        by_chunk: dict[int, list[Turn]] = {}
        for row in buffered:
            by_chunk.setdefault(row[1], []).append(_turn(row))
        folded = {chunk_seq: start for chunk_seq, start in located}
        texts: dict[int, str] = {}
        ordered = sorted(folded.keys() | by_chunk.keys())
        pending = [seq for seq in ordered if seq in folded]
        for chunk_seq in ordered:
            if chunk_seq in folded:
                if chunk_seq not in texts:
                    # the next few folded chunks in one round trip
                    batch, pending = pending[:HISTORY_BATCH], pending[HISTORY_BATCH:]
                    rows = yield Q(
                        query("chunk_texts"),
                        (sid, batch, sorted({folded[seq] for seq in batch})),
                        prepare=False,
                    )
                    texts.update((seq, text) for seq, text in rows)
                    pending = [seq for seq in pending if seq not in texts]
                text = texts.pop(chunk_seq, None)
                if text is not None:
                    turns = [
                        _envelope_turn(e, chunk_seq)
                        for e in jsoncodec.loads_envelopes(text)
                        if lo <= e["s"] < end
                    ]
                    if turns:
                        yield Emit(turns)
            if chunk_seq in by_chunk:
                yield Emit(by_chunk[chunk_seq])
    yield Tx.COMMIT
    return None


def _envelope_turn(envelope: dict[str, Any], chunk_seq: int) -> Turn:
    """A Turn from one stored envelope {"s", "t", "at", "k"?, "m"} (already decoded)."""
    return Turn(
        turn_seq=envelope["s"],
        chunk_seq=chunk_seq,
        tokens=envelope["t"],
        created_at=datetime.fromisoformat(envelope["at"]),
        idempotency_key=envelope.get("k"),
        message=envelope["m"],
    )


def chunks_op(session_id: Any, last: Any = None) -> Op[list[Chunk]]:
    """Chunk metadata, oldest first (the ``last`` newest when given). A chunk's turns may be
    folded, buffered (open, or sealed and awaiting its fold) or both: the parts are summed."""
    sid = session_uuid(session_id)
    last = _positive(last, "last")
    yield Tx.BEGIN_SNAPSHOT
    head = yield Q(query("session_get"), (sid,), fetch="one")
    if head is None:
        raise SessionNotFound(f"session {sid} does not exist")
    if head[8]:
        raise SessionPurged(f"session {sid} was purged")
    open_seq, open_turns = head[9], head[11]
    newest = open_seq if open_turns else open_seq - 1
    first = 0 if last is None else max(0, newest - last + 1)
    located = yield Q(query("chunk_map_since"), (sid, first))
    buffered = yield Q(query("buffer_chunks"), (sid, first))
    folded: dict[int, Chunk] = {}
    if located:
        rows = yield Q(
            query("chunk_meta"),
            (sid, [r[0] for r in located], sorted({r[1] for r in located})),
            prepare=False,
        )
        folded = {
            r[0]: Chunk(
                chunk_seq=r[0],
                first_turn_seq=r[1],
                turn_count=r[2],
                token_count=r[3],
                byte_count=r[4],
                chunk_start=r[5],
                chunk_end=r[6],
                partition=r[7],
            )
            for r in rows
        }
    yield Tx.COMMIT
    chunks = {seq: c for seq, c in folded.items() if seq <= newest}
    for seq, first_turn, count, tokens, size, start, end in buffered:
        if seq > newest:
            continue
        part = Chunk(
            chunk_seq=seq,
            first_turn_seq=first_turn,
            turn_count=int(count),
            token_count=int(tokens),
            byte_count=int(size),
            chunk_start=start,
            chunk_end=end,
        )
        done = chunks.get(seq)
        chunks[seq] = (
            part
            if done is None
            else dataclasses.replace(
                done,
                turn_count=done.turn_count + part.turn_count,
                token_count=done.token_count + part.token_count,
                byte_count=done.byte_count + part.byte_count,
                chunk_end=part.chunk_end,
            )
        )
    ordered = [chunks[seq] for seq in sorted(chunks)]
    if ordered and open_turns and ordered[-1].chunk_seq == open_seq:
        ordered[-1] = dataclasses.replace(ordered[-1], is_open=True)
    return ordered


def stats_op() -> Op[Stats]:
    """Store-wide counts and per-partition row counts and sizes."""
    yield Tx.BEGIN_SNAPSHOT
    sessions, turns = yield Q(query("stats_sessions"), fetch="one")
    (buffered,) = yield Q(query("stats_buffer"), fetch="one")
    interval = yield Q(query("config_get"), fetch="one")
    parts = yield Q(query("stats_partitions"))
    counts = dict((yield Q(query("stats_partition_rows"))))
    yield Tx.COMMIT
    partitions = []
    for name, bound, size in parts:
        lower, upper = parse_bound(bound)
        partitions.append(
            PartitionInfo(
                name=name,
                lower=lower,
                upper=upper,
                rows=int(counts.get(name, 0)),
                bytes=int(size),
            )
        )
    return Stats(
        sessions=int(sessions),
        turns=int(turns),
        chunks=sum(p.rows for p in partitions),
        buffered_turns=int(buffered),
        partitions=partitions,
        partition_interval_seconds=float(interval[0]) if interval else 0.0,
    )


def parse_bound(bound: str) -> tuple[datetime, datetime]:
    # "FOR VALUES FROM ('2026-11-30 00:00:00+00') TO ('2026-12-07 00:00:00+00')"
    parts = bound.split("'")
    return datetime.fromisoformat(parts[1]), datetime.fromisoformat(parts[3])
