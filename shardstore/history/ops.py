"""The conversation history: sessions, appends and reads, as operations
(:mod:`shardstore.core.steps`) and the store methods built from them.

Each public function below whose first parameter is ``store`` is a store method, bound once
into :class:`shardstore.Store` and once into :class:`shardstore.AsyncStore`; its docstring is
the method's. The ``*_op`` functions are the building blocks other features compose.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..artifacts import links as artifact_links
from ..artifacts import offload
from ..core import jsoncodec, validate
from ..core.context import Context
from ..core.rerun import rerun_on_deadlock, retrying
from ..core.rows import record
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Emit, Op, Q, StatementFailed, Try, Tx
from ..encryption import turns as enc_turns
from ..encryption.envelope import Sealer
from ..encryption.keystore import DataKey
from ..encryption.places import checkpoint_kind
from ..errors import (
    ConfigurationError,
    Conflict,
    InvalidInput,
    SessionConflict,
    SessionNotFound,
    SessionPurged,
    TurnTooLarge,
)
from ..models import AppendResult, Chunk, PartitionInfo, SessionInfo, Stats, Turn, new_turn
from ..settings import DEFAULT_PARTITION_INTERVAL
from .pairing import (
    HELD_OVER_MAX_TOKENS,
    TailWindow,
    explain_tail,
    may_follow_reasoning,
    trim_tail,
)

HISTORY_BATCH = 16  # folded chunks fetched per round trip by history(): ~640 kB at 10k tokens
_UNIQUE_VIOLATION = frozenset({"23505"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # tail_window sends times as microseconds since it


def _named(name: str, params: Any = None, fetch: Any = "all", **kw: Any) -> Q:
    return Q(query(name), params, fetch=fetch, named=True, **kw)


# ---------------------------------------------------------------- setup


def configure_op(partition_interval: timedelta | None) -> Op[tuple[timedelta, datetime]]:
    """Record the partition interval on first use; refuse to change it once partitions
    exist (their bounds would overlap). Returns the interval and origin in force.

    A database whose interval is recorded and not asked to change is only read: tenant
    roles may read the configuration but not write it (it is every tenant's), so their
    stores connect to a database the owner has set up."""
    wanted = partition_interval or DEFAULT_PARTITION_INTERVAL
    config = yield _named("config_get", fetch="one")
    if config is not None and (
        partition_interval is None
        or timedelta(seconds=config["interval_seconds"]) == partition_interval
    ):
        return timedelta(seconds=config["interval_seconds"]), config["origin"]
    yield Tx.BEGIN
    yield Q("LOCK TABLE shardstore.config IN EXCLUSIVE MODE", fetch="none")
    yield Q(query("config_init"), (wanted.total_seconds(),), fetch="none")
    config = yield _named("config_get", fetch="one")
    current = timedelta(seconds=config["interval_seconds"])
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
    return current, config["origin"]


def ensure_partitions_op(bounds: Iterable[datetime]) -> Op[list[str]]:
    """Make sure a partition exists for each of the given instants; returns their names."""
    names = []
    for at in bounds:
        (name,) = yield Q(query("ensure_partition"), (at,), fetch="one")
        names.append(name)
    return names


def parse_bound(bound: str) -> tuple[datetime, datetime]:
    """The range of a partition bound as Postgres prints it:
    ``FOR VALUES FROM ('2026-11-30 00:00:00+00') TO ('2026-12-07 00:00:00+00')``."""
    parts = bound.split("'")
    return datetime.fromisoformat(parts[1]), datetime.fromisoformat(parts[3])


# ---------------------------------------------------------------- sessions


def create_session_op(
    tenant_id: Any,
    subject_id: Any = None,
    agent_id: Any = None,
    session_id: Any = None,
    metadata: Any = None,
) -> Op[uuid.UUID]:
    """Create a session (idempotent when ``session_id`` is given); see
    :func:`create_session`."""
    tenant = validate.text(tenant_id, "tenant_id")
    subject = validate.optional_text(subject_id, "subject_id")
    agent = validate.optional_text(agent_id, "agent_id")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise InvalidInput("metadata must be a dict")
    meta_text = jsoncodec.encode_json(metadata, "metadata")
    sid = uuid.uuid4() if session_id is None else validate.session_id(session_id)
    row = yield Q(query("session_create"), (sid, tenant, subject, agent, meta_text), fetch="one")
    if row is not None:
        return sid
    owners = yield _named("session_owners", (sid,), fetch="one")
    if owners is None:  # raced with a purge-and-delete; treat as absent
        raise SessionNotFound(f"session {sid} vanished while being created; retry")
    if owners["purged"]:
        raise SessionPurged(f"session {sid} was purged; its id cannot be reused")
    found = (owners["tenant_id"], owners["subject_id"], owners["agent_id"])
    if found != (tenant, subject, agent):
        raise SessionConflict(f"session {sid} already exists with tenant/subject/agent {found!r}")
    return sid


def _head_op(sid: uuid.UUID, *, live: bool) -> Op[Mapping[str, Any]]:
    """The session row by name; SessionNotFound, and with ``live`` SessionPurged."""
    head = yield _named("session_get", (sid,), fetch="one")
    if head is None:
        raise SessionNotFound(f"session {sid} does not exist")
    if live and head["purged"]:
        raise SessionPurged(f"session {sid} was purged")
    return head  # type: ignore[no-any-return]


def create_session(
    store: StoreState,
    tenant_id: str,
    subject_id: str | None = None,
    agent_id: str | None = None,
    session_id: uuid.UUID | str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Op[uuid.UUID]:
    """Create a session and return its id. With ``session_id`` given the call is
    idempotent: repeating it returns the same id; different owners raise
    ``SessionConflict``; a purged id raises ``SessionPurged``."""
    return (yield from create_session_op(tenant_id, subject_id, agent_id, session_id, metadata))


def session(store: StoreState, session_id: uuid.UUID | str) -> Op[SessionInfo]:
    """A session's owners, metadata and counts; ``SessionNotFound`` if unknown."""
    head = yield from _head_op(validate.session_id(session_id), live=False)
    return record(SessionInfo, head, metadata=jsoncodec.loads(head["metadata"]))


def _cursor_op(before: Any) -> Op[tuple[datetime, uuid.UUID] | None]:
    """The keyset ``(created_at, session_id)`` a page continues after: a SessionInfo's own,
    or the named session's (``SessionNotFound`` if there is none)."""
    if before is None:
        return None
    if isinstance(before, SessionInfo):
        return (
            validate.instant(before.created_at, "before.created_at"),
            validate.session_id(before.session_id),
        )
    if not isinstance(before, uuid.UUID | str):
        raise InvalidInput(
            "before must be a SessionInfo (the last one of the previous page) or a session "
            f"id, not {validate.shown(before)}"
        )
    sid = validate.uuid_value(before, "before")
    row = yield _named("session_cursor", (sid,), fetch="one")
    if row is None:
        raise SessionNotFound(
            f"session {sid} (given as before=) does not exist",
            cli=f"session {sid} (given as --before) does not exist",
        )
    return row["created_at"], row["session_id"]


def sessions(
    store: StoreState,
    *,
    tenant_id: str | None = None,
    subject_id: str | None = None,
    agent_id: str | None = None,
    since: datetime | None = None,
    before: SessionInfo | uuid.UUID | str | None = None,
    limit: int | None = None,
    external_id: str | None = None,
) -> Op[list[SessionInfo]]:
    """Live sessions matching every filter given, newest first (by ``created_at``, then
    ``session_id``), each with its turn count and last activity (``last_turn_at``); at most
    ``limit`` (None: all). Purged sessions are never listed; under Row-Level Security a
    tenant's store lists only that tenant's sessions.

    ``since``: only sessions created at or after this timezone-aware time. Paging is by
    keyset: pass the last SessionInfo of a page (or its session id) as ``before`` to get
    the sessions listed after it; sessions created meanwhile never shift a page. One range
    scan of a partial index on live sessions (``sessions_list`` or its subject or agent
    variant) when ``tenant_id`` is given.

    ``external_id``: only sessions an adapter or importer made for this framework id (a
    LangGraph thread id, an Agents or LangChain session id: ``metadata["external_id"]``,
    :mod:`shardstore.integrations.ids`); no index, so give ``tenant_id`` too on a big
    database."""
    params: dict[str, Any] = {
        "tenant": validate.optional_text(tenant_id, "tenant_id"),
        "subject": validate.optional_text(subject_id, "subject_id"),
        "agent": validate.optional_text(agent_id, "agent_id"),
        "since": validate.optional_instant(since, "since"),
        "limit": validate.optional_count(limit, "limit"),
        "external": validate.optional_text(external_id, "external_id"),
    }
    cursor = yield from _cursor_op(before)
    params["before_at"], params["before_id"] = cursor if cursor is not None else (None, None)
    rows = yield _named("session_list", params, prepare=False)
    return [record(SessionInfo, r, metadata=jsoncodec.loads(r["metadata"])) for r in rows]


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
        clean_keys.append(
            validate.optional_text(key, "idempotency_key", limit=validate.MAX_KEY_CHARS)
        )
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
    sid = validate.session_id(session_id)
    if not messages:
        return AppendOutcome(sid, [], False)
    batch = prepare_turns(ctx, messages, keys)
    if ctx.sealer is not None:
        return (yield from _sealed_append_op(ctx, sid, batch, None))
    return (yield from _append_prepared_op(ctx, sid, batch))


def _append_write(q: Q, locked: bool) -> Op[Any]:
    """An append's statement. Alone it is rerun when picked as a deadlock's victim, and may
    recover from a unique violation (a concurrent retry of its key), both under a savepoint
    inside a transaction. ``locked``: inside a sealed append's transaction, which holds the
    session row from its head read on, so no concurrent append can race it for a key; sent
    bare, saving the savepoint's two round trips (a failure rolls the attempt back whole,
    and the sealed append repeats it)."""
    if locked:
        return (yield Q(q.sql, q.params, q.fetch, q.prepare, frozenset(), q.named))
    return (yield from rerun_on_deadlock(q))


def _chunking(ctx: Context) -> tuple[int, int, float, datetime]:
    """The arguments every append statement takes after its turns: the chunk budgets and the
    partitioning the seal of a chunk files it by."""
    return (
        ctx.settings.budget_tokens,
        ctx.settings.chunk_max_bytes,
        ctx.partition_interval.total_seconds(),
        ctx.partition_origin,
    )


def _append_prepared_op(
    ctx: Context, sid: uuid.UUID, batch: PreparedTurns, locked: bool = False
) -> Op[AppendOutcome]:
    chunking = _chunking(ctx)
    if len(batch.texts) == 1:
        # one statement whatever happens (append_one_v2: the open chunk's fast path, the
        # seal's statement, else append_v2); a unique violation is a concurrent retry of
        # the same key: rerun as a batch below
        first = (batch.texts[0], batch.tokens[0], batch.sizes[0], batch.keys[0])
        statement = Q(
            query("append_one"), (sid, *first, *chunking), fetch="one", recover=_UNIQUE_VIOLATION
        )
        one = yield from _append_write(statement, locked)
        if one is not None and not isinstance(one, StatementFailed):
            turn_seq, chunk_seq, tokens, duplicate, sealed = one
            result = AppendResult(int(turn_seq), int(chunk_seq), int(tokens), bool(duplicate))
            return AppendOutcome(sid, [result], bool(sealed))
    texts = "[" + ",".join(batch.texts) + "]"
    # the chunks holding the newest default_tail_turns turns stay buffered, as the fold after
    # a seal leaves them, so that a default tail() after a batch reads buffer rows
    # (docs/decisions/0020-batches-keep-the-tail-and-the-window-by-concatenation.md)
    keep = ctx.settings.default_tail_turns
    params = (sid, texts, batch.tokens, batch.sizes, batch.keys, *chunking, keep)
    rows = yield from _append_write(Q(query("append"), params, named=True), locked)
    results = [record(AppendResult, r) for r in rows]
    return AppendOutcome(sid, results, any(r["sealed"] for r in rows))


def encode_state(value: Any, what: str, limit: int) -> str:
    """A checkpoint's state (a dict) as the JSON text to store, encoded exactly as messages
    are (:mod:`shardstore.core.jsoncodec`); at most ``limit`` bytes."""
    if type(value) is not dict:
        raise InvalidInput(f"{what} must be a dict (a JSON object), not {type(value).__name__}")
    return encode_value(value, what, limit)


def encode_value(value: Any, what: str, limit: int) -> str:
    """Any JSON value as the text to store (state, tool calls, tool results, metadata);
    NaN, lone surrogates and NUL are handled as in messages; at most ``limit`` bytes."""
    text = jsoncodec.encode_json(value, what)
    size = len(text.encode("utf-8"))
    if size > limit:
        raise InvalidInput(f"{what} is {size} bytes as JSON; the cap is {limit} (chunk_max_bytes)")
    return text


def append_checkpoint_op(
    ctx: Context, session_id: Any, messages: Sequence[Any], keys: Sequence[Any], state: str
) -> Op[AppendOutcome]:
    """Append a batch and a checkpoint positioned at its last turn, in one statement
    (``append_checkpoint_v2`` for one turn, else ``append_checkpoint_v1``): both commit or
    neither does. ``state`` is the encoded
    checkpoint state (:func:`encode_state`). A retried batch (its last turn a duplicate)
    stores no second checkpoint: the results carry the first one's id."""
    sid = validate.session_id(session_id)
    if not messages:
        raise InvalidInput(
            "a checkpoint with the turns needs at least one message; use checkpoint() alone"
        )
    batch = prepare_turns(ctx, messages, keys)
    if ctx.sealer is not None:
        return (yield from _sealed_append_op(ctx, sid, batch, state))
    return (yield from _append_checkpoint_prepared_op(ctx, sid, batch, uuid.uuid4(), state))


def _append_checkpoint_prepared_op(
    ctx: Context,
    sid: uuid.UUID,
    batch: PreparedTurns,
    checkpoint_id: uuid.UUID,
    state: str,
    locked: bool = False,
) -> Op[AppendOutcome]:
    texts = "[" + ",".join(batch.texts) + "]"
    head = (sid, texts, batch.tokens, batch.sizes, batch.keys, ctx.settings.budget_tokens)
    chunking = (
        ctx.settings.chunk_max_bytes,
        ctx.partition_interval.total_seconds(),
        ctx.partition_origin,
    )
    tail = (checkpoint_id, state)
    rows: Any = None
    if len(batch.texts) == 1:
        # append_checkpoint_v2: scalars in, one plain row out; a unique violation is a
        # concurrent retry of the key, rerun below through append_checkpoint_v1's slow path
        one = (batch.texts[0], batch.tokens[0], batch.sizes[0], batch.keys[0])
        row = yield from _append_write(
            Q(
                query("append_checkpoint_one"),
                (sid, *one, ctx.settings.budget_tokens, *chunking, *tail),
                fetch="one",
                recover=_UNIQUE_VIOLATION,
            ),
            locked,
        )
        if row is not None and not isinstance(row, StatementFailed):
            turn_seq, chunk_seq, tokens, duplicate, sealed, checkpoint_id = row
            result = AppendResult(
                int(turn_seq), int(chunk_seq), int(tokens), bool(duplicate), checkpoint_id
            )
            return AppendOutcome(sid, [result], bool(sealed))
    if rows is None or isinstance(rows, StatementFailed):
        rows = yield from _append_write(
            Q(query("append_checkpoint"), (*head, *chunking, False, *tail), named=True), locked
        )
    results = [record(AppendResult, r) for r in rows]
    return AppendOutcome(sid, results, any(r["sealed"] for r in rows))


def _sealed_append_op(
    ctx: Context, sid: uuid.UUID, batch: PreparedTurns, state: str | None
) -> Op[AppendOutcome]:
    """An append (with a checkpoint when ``state`` is given) of a store connected with
    ``encryption=``: each turn sealed for the seq it gets, the checkpoint's state for its id
    (:mod:`shardstore.encryption.turns`); an attempt that a concurrent append overtook is
    rolled back whole and repeated, as is one picked as a deadlock's victim (``Conflict``:
    nothing of it was written).

    A store that appended to the session before kept its head (:func:`keep_head`): a batch
    without a checkpoint is then sealed from it and sent in one statement
    (``append_sealed_v1``), which refuses it, writing nothing, when the head moved since
    (another writer, a rewind); then, and for a first append, the head is read in the
    append's transaction, locked."""
    sealer = ctx.sealer
    assert sealer is not None
    if state is None:
        kept = enc_turns.kept_head(sealer, sid)
        if kept is not None:
            fast = yield from _sealed_from_kept_head_op(ctx, sealer, sid, batch, kept)
            if fast is not None:
                return fast
    for _attempt in range(enc_turns.SEALED_APPEND_ATTEMPTS):
        try:
            outcome: AppendOutcome = yield Try(_sealed_attempt_op(ctx, sid, batch, state))
        except (enc_turns.HeadMoved, Conflict):
            continue
        return outcome
    raise Conflict(
        f"session {sid} was appended to concurrently {enc_turns.SEALED_APPEND_ATTEMPTS} times "
        "while an encrypted append sealed its turns; nothing was written, retry the call"
    )


def _sealed_attempt_op(
    ctx: Context, sid: uuid.UUID, batch: PreparedTurns, state: str | None
) -> Op[AppendOutcome]:
    sealer = ctx.sealer
    assert sealer is not None
    yield Tx.BEGIN
    head = yield _named("sealed_append_head", {"sid": sid, "keys": batch.keys}, fetch="one")
    if head is None:
        raise SessionNotFound(f"session {sid} does not exist")
    if head["purged"]:
        raise SessionPurged(f"session {sid} was purged")
    key, sealed, expected = _sealed_batch(ctx, sealer, sid, head, batch)
    if state is None:
        outcome = yield from _append_prepared_op(ctx, sid, sealed, locked=True)
    else:
        checkpoint_id = uuid.uuid4()
        sealed_state = seal_checkpoint_state(sealer, key, sid, checkpoint_id, state)
        outcome = yield from _append_checkpoint_prepared_op(
            ctx, sid, sealed, checkpoint_id, sealed_state, locked=True
        )
    for result, seq in zip(outcome.results, expected, strict=True):
        if not result.duplicate and result.turn_seq != seq:
            raise enc_turns.HeadMoved
    yield Tx.COMMIT
    enc_turns.keep_head(sealer, sid, head, expected)
    return outcome


def _sealed_batch(
    ctx: Context, sealer: Sealer, sid: uuid.UUID, head: Mapping[str, Any], batch: PreparedTurns
) -> tuple[DataKey, PreparedTurns, list[int | None]]:
    """The batch sealed for the seqs and the epoch of ``head``: the data key, the sealed
    turns and the seq each is expected to get (None: a key the session knows)."""
    key = sealer.keys.key_for(enc_turns.session_scope(head["tenant_id"], head["subject_id"], sid))
    assert key is not None
    texts, expected = enc_turns.seal_batch(sealer, key, sid, head, batch.texts, batch.keys)
    sizes = enc_turns.sealed_sizes(texts, ctx.settings.chunk_max_bytes)
    return key, PreparedTurns(texts, batch.tokens, sizes, batch.keys), expected


# the kept head moved (SS412), or the one statement lost a deadlock or a race for a key: the
# append goes on through the locked head read
_KEPT_HEAD_FAILED = frozenset({"SS412", "40P01", "23505"})


def _sealed_from_kept_head_op(
    ctx: Context,
    sealer: Sealer,
    sid: uuid.UUID,
    batch: PreparedTurns,
    head: Mapping[str, Any],
) -> Op[AppendOutcome | None]:
    """The batch sealed from the kept ``head`` and appended in one statement; None (nothing
    written, the head forgotten) when the head moved."""
    _key, sealed, expected = _sealed_batch(ctx, sealer, sid, head, batch)
    chunking = _chunking(ctx)
    epoch = int(head["epoch"])
    if len(sealed.texts) == 1:
        one = (sealed.texts[0], sealed.tokens[0], sealed.sizes[0], sealed.keys[0])
        params = (sid, epoch, expected[0], *one, *chunking)
        row = yield Q(query("append_sealed_one"), params, fetch="one", recover=_KEPT_HEAD_FAILED)
        if isinstance(row, StatementFailed):
            enc_turns.forget_head(sealer, sid)
            return None
        turn_seq, chunk_seq, tokens, duplicate, closed = row
        enc_turns.keep_head(sealer, sid, head, expected)
        result = AppendResult(int(turn_seq), int(chunk_seq), int(tokens), bool(duplicate))
        return AppendOutcome(sid, [result], bool(closed))
    texts = "[" + ",".join(sealed.texts) + "]"
    batch_params = (sid, epoch, expected, texts, sealed.tokens, sealed.sizes, sealed.keys)
    rows = yield Q(
        query("append_sealed"),
        (*batch_params, *chunking, ctx.settings.default_tail_turns),
        named=True,
        recover=_KEPT_HEAD_FAILED,
    )
    if isinstance(rows, StatementFailed):
        enc_turns.forget_head(sealer, sid)
        return None
    results = [record(AppendResult, r) for r in rows]
    enc_turns.keep_head(sealer, sid, head, expected)
    return AppendOutcome(sid, results, any(r["sealed"] for r in rows))


def seal_checkpoint_state(
    sealer: Sealer, key: DataKey, sid: uuid.UUID, checkpoint_id: uuid.UUID, state: str
) -> str:
    """A checkpoint's encoded state sealed for that checkpoint of that session."""
    return sealer.seal_text(key, checkpoint_kind("state"), str(sid), str(checkpoint_id), state)


def fold_sealed_op(session_id: uuid.UUID, keep_turns: int = 0) -> Op[int]:
    """Fold a session's sealed chunks from the buffer into agent_history, except the newest
    ones holding any of its newest ``keep_turns`` turns (0: every sealed chunk): those stay
    buffered until a later fold, so that a tail of up to ``keep_turns`` turns reads buffer
    rows only, never a compressed chunk (docs/decisions/0006-folds-keep-the-tail-buffered.md).
    Returns the turns moved.

    With ``keep_turns``, the session's buffered turns that have no full-text windows get
    them in the same statement (``text_index_buffered_v1``; the kept chunks' turns, mostly),
    so that text search does not index them again on every call while they wait
    (docs/decisions/0010-text-index-for-buffered-turns.md)."""
    moved, _text_search = yield from _fold_sealed(session_id, keep_turns)
    return moved


def background_fold_op(session_id: uuid.UUID, keep_turns: int) -> Op[bool]:
    """The background folder's pass over a session: :func:`fold_sealed_op`'s statement.
    Returns whether the database indexes text (``text_config_v1()`` is set; True when
    ``keep_turns`` is 0 and the statement does not say), so that the folder stops asking
    for text passes (:data:`TEXT_INDEX_EVERY`) that would index nothing."""
    _moved, text_search = yield from _fold_sealed(session_id, keep_turns)
    return text_search


def _fold_sealed(session_id: uuid.UUID, keep_turns: int) -> Op[tuple[int, bool]]:
    if keep_turns:
        moved, _indexed, text_search = yield Q(
            query("fold_sealed_indexed"), (session_id, keep_turns, session_id), fetch="one"
        )
        return int(moved), bool(text_search)
    (moved,) = yield Q(query("fold_sealed"), (session_id, keep_turns), fetch="one")
    return int(moved), True


TEXT_INDEX_EVERY = 16
"""With a background folder, a session is handed to it every this many turns even without a
seal, so that its open chunk's turns get their full-text windows off the append path
and text search does not index them at every call
(docs/decisions/0010-text-index-for-buffered-turns.md); 0 turns that off. Not while the
folder's last pass found text search off (``configure_text_search(None)``): each seal's fold
tells it again, so a database switched back on gets its passes from the next seal on."""


def _indexing_due(results: Sequence[AppendResult]) -> bool:
    every = TEXT_INDEX_EVERY
    return every > 0 and any(not r.duplicate and r.turn_seq % every == every - 1 for r in results)


def _after_append_op(store: StoreState, outcome: AppendOutcome) -> Op[None]:
    """A sealed chunk goes to the store's background folder, or (on a caller's connection,
    or with ``background_fold=False``) is folded now, in the same transaction. Every
    :data:`TEXT_INDEX_EVERY` turns the background folder also gets the session without a
    seal (its fold then only indexes the buffer for text search); inline, nothing."""
    folder = store.background_folder
    if not outcome.sealed:
        if folder is not None and folder.text_search and _indexing_due(outcome.results):
            yield Call(folder.submit, (outcome.session_id,), inline=True)
        return
    if folder is not None:
        yield Call(folder.submit, (outcome.session_id,), inline=True)
    else:
        yield from fold_sealed_op(outcome.session_id, store.ctx.settings.default_tail_turns)


def _append_op(
    store: StoreState,
    session_id: Any,
    messages: list[Any],
    keys: list[Any],
    state: str | None = None,
    links: dict[uuid.UUID, bool] | None = None,
) -> Op[Any]:
    referenced = yield from offload.prepare_op(store, session_id, messages, state, links)
    if referenced is not None:
        # the append, the turns' references and the checkpoint's commit together
        yield Tx.BEGIN
        if state is None:
            outcome = yield from append_op(
                store.ctx, referenced.session_id, referenced.messages, keys
            )
        else:
            outcome = yield from append_checkpoint_op(
                store.ctx, referenced.session_id, referenced.messages, keys, state
            )
        yield from offload.reference_op(referenced, outcome.results)
        yield Tx.COMMIT
        yield from _after_append_op(store, outcome)
        return outcome.results
    if state is None:
        outcome = yield from append_op(store.ctx, session_id, messages, keys)
    else:
        outcome = yield from append_checkpoint_op(store.ctx, session_id, messages, keys, state)
    yield from _after_append_op(store, outcome)
    return outcome.results


def _state(store: StoreState, checkpoint: Any) -> str | None:
    if checkpoint is None:
        return None
    return encode_state(checkpoint, "checkpoint", store.ctx.settings.chunk_max_bytes)


def _links(checkpoint: Any) -> dict[uuid.UUID, bool] | None:
    """The artifacts a checkpoint state given to an append references (as for
    ``checkpoint()``: ``ArtifactRef.to_json()`` values and offload cards); ``InvalidInput``
    for a malformed one, before anything is written."""
    if checkpoint is None:
        return None
    if not artifact_links.has_marker(checkpoint):
        return None
    return artifact_links.wanted(checkpoint, None)


def append_turn(
    store: StoreState,
    session_id: uuid.UUID | str,
    message: dict[str, Any],
    idempotency_key: str | None = None,
    *,
    retry: bool = False,
    checkpoint: dict[str, Any] | None = None,
) -> Op[AppendResult]:
    """Append one message, durably, in one round trip and one commit.

    Returns where it landed. A repeat with the same ``idempotency_key`` stores nothing
    and returns the first result with ``duplicate=True``. Bad input raises an
    ``InvalidInput`` subclass and writes nothing. ``retry=True`` repeats the call through
    connection failures for up to 30 s (:mod:`shardstore.retry`); it needs a key.

    ``checkpoint``: a state dict; a checkpoint positioned at this turn is written in the
    same statement (the turn and the checkpoint commit together or not at all), and
    ``result.checkpoint_id`` names it. A repeat with the same key stores no second
    checkpoint and returns the first one's id (None if the first append had none).
    Artifact references in the state (``ArtifactRef.to_json()``, offload cards) are
    referenced by that checkpoint in the same transaction, as :meth:`checkpoint` does
    (``ArtifactNotFound``, nothing written, for one this tenant does not have)."""
    state = _state(store, checkpoint)
    links = _links(checkpoint)
    if validate.flag(retry, "retry"):
        validate.keys_for_retry([idempotency_key])
        results = yield from retrying(
            lambda: _append_op(store, session_id, [message], [idempotency_key], state, links)
        )
    else:
        results = yield from _append_op(
            store, session_id, [message], [idempotency_key], state, links
        )
    return results[0]  # type: ignore[no-any-return]


def append_turns(
    store: StoreState,
    session_id: uuid.UUID | str,
    messages: Sequence[dict[str, Any]],
    idempotency_keys: Sequence[str | None] | None = None,
    *,
    retry: bool = False,
    checkpoint: dict[str, Any] | None = None,
) -> Op[list[AppendResult]]:
    """Append several messages in one transaction: all are stored or none is.
    ``retry=True`` as for :meth:`append_turn` (every message needs a key).

    ``checkpoint``: a state dict; one checkpoint positioned after the last turn commits
    with the batch, and every result's ``checkpoint_id`` names it. Its idempotency comes
    from the last message's key, as for :meth:`append_turn`; its artifact references
    too."""
    batch, keys = validate.batch(messages, idempotency_keys)
    state = _state(store, checkpoint)
    links = _links(checkpoint)
    if validate.flag(retry, "retry"):
        validate.keys_for_retry(keys)
        results = yield from retrying(
            lambda: _append_op(store, session_id, batch, keys, state, links)
        )
    else:
        results = yield from _append_op(store, session_id, batch, keys, state, links)
    return results  # type: ignore[no-any-return]


def flush(store: StoreState, session_id: uuid.UUID | str) -> Op[int]:
    """Fold a session's buffered turns into its open chunk in ``agent_history`` (the
    chunk stays open for more turns). Returns how many turns moved."""
    sid = validate.session_id(session_id)
    (moved,) = yield from rerun_on_deadlock(Q(query("flush"), (sid,), fetch="one"))
    return int(moved)


# ---------------------------------------------------------------- lineage (forks)


@dataclass(frozen=True, slots=True)
class Segment:
    """Part of a session's history read from one session: its chunks ``chunk_lo <=
    chunk_seq < chunk_hi`` (None: no upper bound) and, of those, turns ``<= turn_hi``
    (None: all). A session that is not a fork is one segment of itself."""

    session_id: uuid.UUID
    chunk_lo: int
    chunk_hi: int | None
    turn_hi: int | None

    def holds(self, chunk_seq: int) -> bool:
        """Whether the chunk lies in this segment's range."""
        return chunk_seq >= self.chunk_lo and (self.chunk_hi is None or chunk_seq < self.chunk_hi)


def segments_op(sid: uuid.UUID, head: Mapping[str, Any]) -> Op[list[Segment]]:
    """The segments of a session's history, newest first (``fork_segments_v1``); no
    statement for a session that is not a fork."""
    if head.get("fork_parent") is None:
        return [Segment(sid, 0, None, None)]
    rows = yield _named("fork_segments", (sid,))
    return [record(Segment, r) for r in rows]


# ---------------------------------------------------------------- reads


def _turn(row: Mapping[str, Any]) -> Turn:
    return record(Turn, row, message=jsoncodec.loads(row["message"]))


def envelope_turn(envelope: dict[str, Any], chunk_seq: int) -> Turn:
    """A Turn from one stored envelope {"s", "t", "at", "k"?, "m"} (already decoded)."""
    return new_turn(
        envelope["s"],
        envelope["m"],
        envelope["t"],
        datetime.fromisoformat(envelope["at"]),
        chunk_seq,
        envelope.get("k"),
    )


def tail_op(ctx: Context, session_id: Any, n: Any = None, max_tokens: Any = None) -> Op[list[Turn]]:
    """Newest turns, oldest first, within n turns and max_tokens tokens."""
    sid = validate.session_id(session_id)
    n = validate.optional_count(n, "n")
    max_tokens = validate.optional_count(max_tokens, "max_tokens", high=validate.MAX_INT64)
    if n is None and max_tokens is None:
        n = ctx.settings.default_tail_turns
    if ctx.sealer is None:
        turns = yield from window_op(sid, n, max_tokens)
        turns = yield from enc_turns.open_turns_op(None, sid, turns)  # refuses sealed turns
    else:
        # the window and the rewind epochs its turns are checked against, in one statement
        text, epochs = yield Q(query("tail_window_sealed"), (sid, n, max_tokens), fetch="one")
        turns = yield from enc_turns.open_turns_op(
            ctx.sealer, sid, window_turns(text), enc_turns.epochs_of(epochs)
        )
    before = yield from before_window_op(sid, turns, ctx.sealer)
    return trim_tail(turns, before)


def window_op(sid: uuid.UUID, n: int | None, max_tokens: int | None) -> Op[list[Turn]]:
    """tail_v1's window, oldest first, untrimmed: at most ``n`` turns and ``max_tokens``
    tokens. One statement (``tail_window``: one JSON array of envelopes, parsed at once);
    the one read of the newest turns that tail(), tail_explained() and the adapters share."""
    (text,) = yield Q(query("tail_window"), (sid, n, max_tokens), fetch="one")
    return window_turns(text)


def window_turns(text: str | None) -> list[Turn]:
    """The turns of a window sent as tail_window's JSON array (newest first; None: no
    turns), oldest first."""
    if text is None:
        return []
    items = jsoncodec.loads_window(text)
    items.reverse()  # newest first as tail_v1 returns them; the window is oldest first
    return [
        new_turn(seq, message, tokens, _EPOCH + timedelta(microseconds=us), chunk_seq, key)
        for seq, chunk_seq, tokens, us, key, message in items
    ]


def before_window(turns: Sequence[Turn], before: str | None) -> dict[str, Any] | None:
    """What :func:`before_window_op` gives, from the message of the turn before the window
    read along with it (``before``)."""
    if before is None or not turns or not may_follow_reasoning(turns[0].message):
        return None
    message: dict[str, Any] = jsoncodec.loads(before)
    return message


def before_window_op(
    sid: uuid.UUID, turns: Sequence[Turn], sealer: Sealer | None = None
) -> Op[dict[str, Any] | None]:
    """The message of the turn just before a window, looked up (one more statement) only
    when the window's first item is a Responses item, which a ``reasoning`` item outside
    the window may precede (pairing.trim_tail); None otherwise. ``sealer``: the store's,
    which opens it."""
    if not turns or turns[0].turn_seq == 0 or not may_follow_reasoning(turns[0].message):
        return None
    rows = yield _named("tail_at", (sid, turns[0].turn_seq - 1, 1, None))
    if not rows:
        return None
    message: dict[str, Any] = jsoncodec.loads(rows[0]["message"])
    before = new_turn(turns[0].turn_seq - 1, message, 0, _EPOCH, 0, None)
    (opened,) = yield from enc_turns.open_turns_op(sealer, sid, [before])
    return opened.message


def tail(
    store: StoreState,
    session_id: uuid.UUID | str,
    n: int | None = None,
    max_tokens: int | None = None,
    *,
    expand: bool = False,
) -> Op[list[Turn]]:
    """The newest turns, oldest first: at most ``n`` turns and at most ``max_tokens``
    tokens (fewer rather than more; with neither given, ``default_tail_turns``). Never
    starts with a tool result whose tool call was cut off.

    ``expand=True``: offloaded strings (``connect(offload_over=...)``) are put back, each
    message exactly as appended; tokens stay those of the stored cards."""
    turns = yield from tail_op(store.ctx, session_id, n, max_tokens)
    return (yield from _expanded(store, turns, validate.flag(expand, "expand")))


def _expanded(store: StoreState, turns: list[Turn], expand: bool) -> Op[list[Turn]]:
    """The turns, with offloaded strings put back when ``expand``."""
    if not expand or not turns:
        return turns
    return (yield from offload.expand_op(store, turns))


def _opened(
    store: StoreState, sid: uuid.UUID, turns: list[Turn], expand: bool, sealed: bool = False
) -> Op[list[Turn]]:
    """Stored turns of session ``sid`` as a read returns them: opened (a store with
    ``encryption=``), then expanded when ``expand``; ``sealed``: as stored, sealed values
    left sealed (what an export carries)."""
    if not sealed:
        turns = yield from enc_turns.open_turns_op(store.ctx.sealer, sid, turns)
    return (yield from _expanded(store, turns, expand))


def tail_explained(
    store: StoreState,
    session_id: uuid.UUID | str,
    n: int | None = None,
    max_tokens: int | None = None,
) -> Op[TailWindow]:
    """:meth:`tail` with what it held back and why: ``window.turns`` are the turns
    ``tail()`` returns for the same arguments; ``window.held_back`` the leading tool results
    whose call is outside the window (``reason`` ``"orphan_tool_result"``), or the newest
    turn when it alone is over ``max_tokens`` and the window is empty (``reason``
    ``"over_max_tokens"``); empty, with ``reason`` None, when nothing was held back."""
    sid = validate.session_id(session_id)
    n = validate.optional_count(n, "n")
    max_tokens = validate.optional_count(max_tokens, "max_tokens", high=validate.MAX_INT64)
    if n is None and max_tokens is None:
        n = store.ctx.settings.default_tail_turns
    sealer = store.ctx.sealer
    yield Tx.BEGIN_SNAPSHOT
    window = yield from window_op(sid, n, max_tokens)
    window = yield from enc_turns.open_turns_op(sealer, sid, window)
    newest = [] if window else (yield from window_op(sid, 1, None))
    newest = yield from enc_turns.open_turns_op(sealer, sid, newest)
    before = yield from before_window_op(sid, window, sealer)
    yield Tx.COMMIT
    if newest:  # the session has turns, but not even its newest fits max_tokens
        return TailWindow([], newest, HELD_OVER_MAX_TOKENS)
    return explain_tail(window, before)


def history(
    store: StoreState,
    session_id: uuid.UUID | str,
    from_seq: int = 0,
    to_seq: int | None = None,
    *,
    expand: bool = False,
) -> Op[None]:
    """Every turn with ``from_seq <= turn_seq < to_seq``, in order, streamed one chunk
    at a time from one consistent snapshot (holds one connection while iterating).
    ``expand=True``: offloaded strings are put back, as for :meth:`tail`.

    Within a chunk the folded turns (in agent_history) precede the buffered ones; a sealed
    chunk may still sit wholly in the buffer until its fold."""
    sid = validate.session_id(session_id)
    lo = validate.position(from_seq, "from_seq")
    hi = None if to_seq is None else validate.position(to_seq, "to_seq")
    expand = validate.flag(expand, "expand")
    yield from _history_op(store, sid, lo, hi, expand, sealed=False)
    return None


def stored_history(store: StoreState, session_id: uuid.UUID) -> Op[None]:
    """:func:`history` of every turn as stored: encrypted messages stay sealed (an export
    carries ciphertext unless asked otherwise), offloaded strings stay references."""
    yield from _history_op(store, session_id, 0, None, False, sealed=True)
    return None


def _history_op(
    store: StoreState, sid: uuid.UUID, lo: int, hi: int | None, expand: bool, *, sealed: bool
) -> Op[None]:
    # one statement (history_range_v1) when the range lies in the newest HISTORY_BATCH
    # folded chunks of a session that is not a fork: the common "read the recent past"
    rows = yield _named("history_range", (sid, lo, hi, HISTORY_BATCH))
    if not rows or rows[0]["kind"] not in _GENERAL_PATH:
        yield from _emit_range_op(store, sid, rows, lo, hi, expand, sealed)
        return None
    yield Tx.BEGIN_SNAPSHOT
    head = yield from _head_op(sid, live=True)
    end = head["turn_count"] if hi is None else min(hi, head["turn_count"])
    if lo < end:
        segments = yield from segments_op(sid, head)
        for seg in reversed(segments):  # oldest first: turn_seq grows along a lineage
            seg_end = end if seg.turn_hi is None else min(end, seg.turn_hi + 1)
            if lo < seg_end:
                yield from _history_segment_op(store, seg, lo, seg_end, expand, sealed)
    yield Tx.COMMIT
    return None


_GENERAL_PATH = frozenset({"fork", "long"})
"""history_range_v1's marker rows: read the range the general way."""


def _emit_range_op(
    store: StoreState,
    sid: uuid.UUID,
    rows: Sequence[Mapping[str, Any]],
    lo: int,
    hi: int | None,
    expand: bool,
    sealed: bool,
) -> Op[None]:
    """Emit history_range_v1's rows as :func:`_history_segment_op` emits a segment: chunk
    by chunk in order, a chunk's folded turns (``lo <= turn_seq < hi``) before its
    buffered ones."""
    texts: dict[int, str] = {}
    by_chunk: dict[int, list[Turn]] = {}
    for row in rows:
        if row["kind"] == "chunk":
            texts[row["chunk_seq"]] = row["text"]
        else:
            by_chunk.setdefault(row["chunk_seq"], []).append(_turn(row))
    for chunk_seq in sorted(texts.keys() | by_chunk.keys()):
        text = texts.get(chunk_seq)
        if text is not None:
            turns = [
                envelope_turn(e, chunk_seq)
                for e in jsoncodec.loads_envelopes(text)
                if lo <= e["s"] and (hi is None or e["s"] < hi)
            ]
            if turns:
                yield Emit((yield from _opened(store, sid, turns, expand, sealed)))
        buffered = by_chunk.get(chunk_seq)
        if buffered:
            buffered.sort(key=lambda t: t.turn_seq)
            yield Emit((yield from _opened(store, sid, buffered, expand, sealed)))
    return None


def _history_segment_op(
    store: StoreState, seg: Segment, lo: int, end: int, expand: bool, sealed: bool
) -> Op[None]:
    """Emit one segment's turns with ``lo <= turn_seq < end``, chunk by chunk (offloaded
    strings put back when ``expand``)."""
    sid = seg.session_id
    located = yield Q(query("chunk_map_from"), (sid, sid, lo))
    buffered = yield _named("buffer_turns", (sid, lo, end))
    by_chunk: dict[int, list[Turn]] = {}
    for row in buffered:
        if seg.holds(row["chunk_seq"]):
            by_chunk.setdefault(row["chunk_seq"], []).append(_turn(row))
    folded = {chunk_seq: start for chunk_seq, start in located if seg.holds(chunk_seq)}
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
                    envelope_turn(e, chunk_seq)
                    for e in jsoncodec.loads_envelopes(text)
                    if lo <= e["s"] < end
                ]
                if turns:
                    yield Emit((yield from _opened(store, sid, turns, expand, sealed)))
        if chunk_seq in by_chunk:
            yield Emit((yield from _opened(store, sid, by_chunk[chunk_seq], expand, sealed)))


def chunks(
    store: StoreState, session_id: uuid.UUID | str, last: int | None = None
) -> Op[list[Chunk]]:
    """Chunk metadata oldest first (the ``last`` newest when given); the open chunk,
    if it holds turns, is the final entry with ``is_open=True``.

    A chunk's turns may be folded, buffered (open, or sealed and awaiting its fold) or
    both: the parts are summed."""
    sid = validate.session_id(session_id)
    last = validate.optional_count(last, "last")
    # one statement (chunk_list_v1) for a session that is not a fork
    rows = yield _named("chunk_list", (sid, last))
    if not rows or not rows[0]["fork"]:
        return [record(Chunk, r) for r in rows]
    yield Tx.BEGIN_SNAPSHOT
    head = yield from _head_op(sid, live=True)
    open_seq, open_turns = head["open_chunk_seq"], head["open_turns"]
    newest = open_seq if open_turns else open_seq - 1
    first = 0 if last is None else max(0, newest - last + 1)
    merged: dict[int, Chunk] = {}
    for seg in (yield from segments_op(sid, head)):
        upper = newest + 1 if seg.chunk_hi is None else min(newest + 1, seg.chunk_hi)
        if max(first, seg.chunk_lo) < upper:
            part = yield from _segment_chunks_op(seg, max(first, seg.chunk_lo), upper)
            merged.update(part)
    yield Tx.COMMIT
    ordered = [merged[seq] for seq in sorted(merged)]
    if ordered and open_turns and ordered[-1].chunk_seq == open_seq:
        ordered[-1] = dataclasses.replace(ordered[-1], is_open=True)
    return ordered


def _segment_chunks_op(seg: Segment, first: int, upper: int) -> Op[dict[int, Chunk]]:
    """The chunks ``first <= chunk_seq < upper`` of one segment, folded and buffered parts
    summed; an inherited chunk holding turns past the segment's bound is counted over the
    inherited turns only."""
    sid = seg.session_id
    located = [r for r in (yield Q(query("chunk_map_since"), (sid, first))) if r[0] < upper]
    buffered = yield _named("buffer_chunks", (sid, first))
    folded: dict[int, Chunk] = {}
    if located:
        rows = yield _named(
            "chunk_meta",
            (sid, [r[0] for r in located], sorted({r[1] for r in located})),
            prepare=False,
        )
        folded = {r["chunk_seq"]: record(Chunk, r) for r in rows}
    merged = {seq: c for seq, c in folded.items() if seq < upper}
    for row in buffered:
        part = record(Chunk, row, partition=None)
        if part.chunk_seq >= upper:
            continue
        done = merged.get(part.chunk_seq)
        merged[part.chunk_seq] = (
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
    if seg.turn_hi is not None:
        for seq, chunk in list(merged.items()):
            if chunk.last_turn_seq <= seg.turn_hi:
                continue
            starts = [r[1] for r in located if r[0] == seq]
            params = {
                "sid": sid,
                "seq": seq,
                "upto": seg.turn_hi,
                "start": starts[0] if starts else None,
            }
            row = yield _named("fork_chunk_part", params, fetch="one")
            if not row or not row["turn_count"]:
                del merged[seq]
                continue
            merged[seq] = dataclasses.replace(
                chunk,
                first_turn_seq=row["first_turn_seq"],
                turn_count=row["turn_count"],
                token_count=row["token_count"],
                byte_count=row["byte_count"],
                chunk_end=row["chunk_end"],
            )
    return merged


def stats(store: StoreState) -> Op[Stats]:
    """Counts of sessions, turns, chunks and buffered turns; every partition with its
    bounds, chunk rows and bytes on disk."""
    yield Tx.BEGIN_SNAPSHOT
    totals = yield _named("stats_sessions", fetch="one")
    (buffered,) = yield Q(query("stats_buffer"), fetch="one")
    config = yield _named("config_get", fetch="one")
    parts = yield _named("stats_partitions")
    counts = dict((yield Q(query("stats_partition_rows"))))
    yield Tx.COMMIT
    partitions = []
    for part in parts:
        lower, upper = parse_bound(part["bound"])
        partitions.append(
            PartitionInfo(
                name=part["name"],
                lower=lower,
                upper=upper,
                rows=int(counts.get(part["name"], 0)),
                bytes=int(part["bytes"]),
            )
        )
    return Stats(
        sessions=int(totals["sessions"]),
        turns=int(totals["turns"]),
        chunks=sum(p.rows for p in partitions),
        buffered_turns=int(buffered),
        partitions=partitions,
        partition_interval_seconds=float(config["interval_seconds"]) if config else 0.0,
    )
