"""Embedding and search operations (sans-IO: :mod:`shardstore.core.steps`) and the pure
functions they plan with."""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..core import jsoncodec, validate
from ..core.context import Context
from ..core.rows import record
from ..core.sql import query
from ..core.steps import Call, Op, Q, Tx
from ..encryption.envelope import Sealer, is_sealed
from ..encryption.turns import (
    Lineage,
    epochs_of,
    epochs_op,
    lineage_op,
    needs_epochs,
    needs_lineage,
    open_message,
    open_turns_op,
)
from ..errors import DecryptionFailed, EmbeddingModelMismatch, InvalidInput, KeyShredded
from ..history.ops import envelope_turn
from ..history.pairing import HIT_CONTEXT_TURNS, whole_window
from ..models import SearchHit
from .embedding import (
    DEFAULT_MODEL,
    Embedder,
    Window,
    declared_dimension,
    is_embedder,
    make_embedder,
    message_text,
    model_identity,
    model_safe,
    plan_windows,
    vector_literal,
)

T = TypeVar("T")
MAX_K = 1000
MAX_IDLE_BATCHES = 3
# hnsw.ef_search may not exceed 1000; a search asks for at most this many windows at once
MAX_CANDIDATES = 1000


@dataclass(frozen=True, slots=True)
class EmbeddingConfig:
    """The model recorded in the database for its vectors."""

    model: str
    dimension: int
    window_tokens: int


@dataclass(frozen=True, slots=True)
class EmbedBatch:
    """What one worker batch did: chunks claimed, stored, and left queued (changed or busy;
    embedded by a later batch)."""

    claimed: int
    stored: int
    left: int


# ------------------------------------------------------------------ configuration


def config_op() -> Op[EmbeddingConfig | None]:
    """The recorded embedding model, or None before the first embedding."""
    row = yield Q(query("vec_config_get"), fetch="one", named=True)
    return None if row is None else record(EmbeddingConfig, row)


def configure_op(
    model: str, dimension: int, window_tokens: int, reset: bool
) -> Op[EmbeddingConfig]:
    """Record the model (first use), check it (later uses: EmbeddingModelMismatch for
    another model), or switch to it dropping every vector (``reset``)."""
    row = yield Q(query("vec_configure"), (model, dimension, window_tokens, reset), fetch="one")
    data = json.loads(row[0])
    return EmbeddingConfig(data["model"], int(data["dimension"]), int(data["window_tokens"]))


def queue_count_op(session_id: uuid.UUID | None = None) -> Op[int]:
    """Units waiting to be embedded (of one session, when given): queued chunks and the
    chunks of buffered turns at or above their session's watermark."""
    row = yield Q(query("vec_pending_count"), {"session": session_id}, fetch="one")
    return int(row[0])


# ------------------------------------------------------------------ embedding


def chunk_windows(embedder: Embedder, chunk_text: str, window_tokens: int) -> list[Window]:
    """The windows of one stored chunk (``conversation_chunk`` as jsonb text)."""
    return envelope_windows(embedder, jsoncodec.loads_envelopes(chunk_text), window_tokens)


def envelope_windows(
    embedder: Embedder, envelopes: Sequence[Mapping[str, Any]], window_tokens: int
) -> list[Window]:
    """The windows of a chunk's turns, decoded (``{"s", "at", "m"}`` each)."""
    turns = [
        (int(e["s"]), datetime.fromisoformat(e["at"]), message_text(e["m"])) for e in envelopes
    ]
    return plan_windows(turns, window_tokens, embedder.token_counts, embedder.split)


#: a claimed unit that this worker must leave queued (sealed turns, and no key to open them)
LEAVE = "leave"


def open_units_op(
    sealer: Sealer | None, rows: Sequence[Mapping[str, Any]]
) -> Op[list[list[dict[str, Any]] | str | None]]:
    """Each claimed unit's turns, decoded, their sealed messages opened (with
    ``encryption=``: the worker embeds plaintext, client-side), None for a vanished chunk.
    A turn that does not open (its data key shredded, or altered) is left out: no vector is
    made of it. Without a sealer, a unit holding a sealed turn is :data:`LEAVE`: it stays
    queued for a worker connected with ``encryption=`` (never a vector of ciphertext, and
    never marked done without its vectors). With vectors of sealed turns switched off
    (:func:`shardstore.search.ops.configure_sealed_vectors`) sealed turns are left out,
    whoever embeds; the setting is read under a lock the switch waits for."""
    out: list[list[dict[str, Any]] | str | None] = []
    lineages: dict[uuid.UUID, Lineage] = {}
    # read after the units: an epoch only grows, so an honest turn opens, and one a rewind
    # removed since it was claimed does not (StaleEpoch) and gets no vector
    epochs: dict[uuid.UUID, list[int] | None] = {}
    sealed_on: bool | None = None  # read once, when a unit holds a sealed turn
    for r in rows:
        if r["chunk_text"] is None:
            out.append(None)
            continue
        envelopes = jsoncodec.loads_envelopes(r["chunk_text"])
        if not any(is_sealed(e["m"]) for e in envelopes):
            out.append(envelopes)
            continue
        if sealed_on is None:
            (sealed_on,) = yield Q(query("sealed_vectors_locked"), fetch="one")
        if not sealed_on:  # configure_sealed_vectors(False): no vector of a sealed turn
            out.append([e for e in envelopes if not is_sealed(e["m"])])
            continue
        if sealer is None:
            out.append(LEAVE)
            continue
        sid = r["session_id"]
        lineage = lineages.get(sid)
        if lineage is None and needs_lineage(sid, [e["m"] for e in envelopes]):
            lineage = yield from lineage_op(sid)
            lineages[sid] = lineage
        if sid not in epochs and needs_epochs(sid, [e["m"] for e in envelopes]):
            epochs[sid] = yield from epochs_op(sid)
        opened = []
        for e in envelopes:
            try:
                message = open_message(sealer, sid, int(e["s"]), e["m"], lineage, epochs.get(sid))
            except DecryptionFailed:  # KeyShredded included
                continue
            opened.append({**e, "m": message})
        out.append(opened)
    return out


def _embed_rows(
    embedder: Embedder,
    window_tokens: int,
    units: Sequence[Sequence[Mapping[str, Any]] | None],
) -> list[tuple[list[Window], list[str]]]:
    """Windows and their vectors (pgvector text) for each claimed unit: the windows of the
    turns it carries (those without vectors); [] for a vanished chunk or a watermark-only
    unit. One model call for the whole batch."""
    plans = [
        [] if envelopes is None else envelope_windows(embedder, envelopes, window_tokens)
        for envelopes in units
    ]
    flat = [w.text for plan in plans for w in plan]
    vectors = iter(embedder.embed(flat)) if flat else iter(())
    out = []
    for plan in plans:
        vecs = [next(vectors) for _ in plan]
        for v in vecs:
            if len(v) != embedder.dimension:
                raise EmbeddingModelMismatch(
                    f"the model returned {len(v)} dimensions, not {embedder.dimension}"
                )
        out.append((plan, [vector_literal(v) for v in vecs]))
    return out


def embed_batch_op(
    embedder: Embedder,
    window_tokens: int,
    batch: int,
    session_id: uuid.UUID | None = None,
    sealer: Sealer | None = None,
) -> Op[EmbedBatch]:
    """Embed up to ``batch`` units: queued chunks, then the chunks of buffered turns (the
    open chunk and sealed, unfolded ones). Only turns without vectors are embedded, so a
    turn embedded while buffered is not embedded again when its chunk is folded and
    queued. Queued chunks stay locked (FOR UPDATE SKIP LOCKED) and buffered sessions under
    a per-session advisory lock while the model runs, so concurrent workers never embed
    the same turn; vectors are written only for turns still there (vec_store_v2). Every
    chunk has its vector partition (chunk_vectors is hashed by tenant), so nothing waits
    for one to be made."""
    yield Tx.BEGIN
    ready = yield Q(query("vec_claim_units"), (session_id, batch), prepare=False, named=True)
    if not ready:
        yield Tx.COMMIT
        return EmbedBatch(0, 0, 0)
    opened = yield from open_units_op(sealer, ready)
    left_queued = sum(1 for unit in opened if unit == LEAVE)
    ready = [r for r, unit in zip(ready, opened, strict=True) if unit != LEAVE]
    units = [unit for unit in opened if not isinstance(unit, str)]
    if not ready:
        yield Tx.COMMIT
        return EmbedBatch(left_queued, 0, left_queued)
    embedded = yield Call(_embed_rows, (embedder, window_tokens, units))
    w_idx: list[int] = []
    w_turn: list[int] = []
    w_at: list[datetime] = []
    w_vec: list[str] = []
    for i, (plan, vecs) in enumerate(embedded, start=1):
        for window, vec in zip(plan, vecs, strict=True):
            w_idx.append(i)
            w_turn.append(window.first_seq)
            w_at.append(window.first_at)
            w_vec.append(vec)
    stored, left = yield Q(
        query("vec_store_units"),
        (
            [r["kind"] for r in ready],
            [r["session_id"] for r in ready],
            [r["chunk_seq"] for r in ready],
            [r["chunk_start"] for r in ready],
            [-1 if r["first_turn_seq"] is None else r["first_turn_seq"] for r in ready],
            [-1 if r["turn_count"] is None else r["turn_count"] for r in ready],
            [r["mark"] for r in ready],
            w_idx,
            w_turn,
            w_at,
            w_vec,
        ),
        fetch="one",
    )
    yield Tx.COMMIT
    return EmbedBatch(len(ready) + left_queued, int(stored), int(left) + left_queued)


# ------------------------------------------------------------------ search


@dataclass(frozen=True, slots=True)
class SearchScope:
    """Validated search arguments."""

    session_id: uuid.UUID | None
    tenant_id: str | None
    agent_id: str | None
    since: datetime | None
    until: datetime | None
    k: int


def search_scope(
    session_id: Any, tenant_id: Any, agent_id: Any, since: Any, until: Any, k: Any
) -> SearchScope:
    """Check search arguments: a session or a tenant is required (a search never spans
    tenants), times must be timezone-aware, 1 <= k <= 1000."""
    sid = validate.optional_session_id(session_id)
    tenant = validate.optional_text(tenant_id, "tenant_id")
    agent = validate.optional_text(agent_id, "agent_id")
    if sid is None and tenant is None:
        raise InvalidInput("search needs session_id or tenant_id: a search never spans tenants")
    start = validate.optional_instant(since, "since")
    end = validate.optional_instant(until, "until")
    return SearchScope(sid, tenant, agent, start, end, validate.count(k, "k", high=MAX_K))


def partition_floor(at: datetime, interval: timedelta, origin: datetime) -> datetime:
    """The lower bound of the partition holding ``at`` (date_bin's rule)."""
    return origin + ((at - origin) // interval) * interval


def best_per_chunk(rows: Sequence[Mapping[str, Any]], k: int) -> list[Mapping[str, Any]]:
    """The best window of each chunk, best first, at most ``k`` chunks. ``rows`` are named
    windows (session_id, chunk_seq, chunk_start, first_turn_seq, last_turn_seq, dist) sorted
    by distance."""
    return first_per_key(rows, lambda row: (row["session_id"], row["chunk_seq"]), k)


def first_per_key(items: Iterable[T], key: Callable[[T], Hashable], k: int) -> list[T]:
    """The first item of each key, in the order given, at most ``k`` of them."""
    seen: set[Hashable] = set()
    first: list[T] = []
    for item in items:
        found = key(item)
        if found not in seen:
            seen.add(found)
            first.append(item)
            if len(first) == k:
                break
    return first


def _params(ctx: Context, scope: SearchScope, vector: str, limit: int) -> dict[str, Any]:
    floor = (
        None
        if scope.since is None
        else partition_floor(scope.since, ctx.partition_interval, ctx.partition_origin)
    )
    return {
        "q": vector,
        "session": scope.session_id,
        "tenant": scope.tenant_id,
        "agent": scope.agent_id,
        "since": scope.since,
        "until": scope.until,
        "since_floor": floor,
        "n": limit,
    }


@dataclass(frozen=True, slots=True)
class Ranked:
    """One turn window of a ranking: where it is and its score in that ranking; ``cover``,
    for a text hit, the share of the query's weight (its lexemes' idf) the turn holds, 0 to
    1 (None in other rankings)."""

    session_id: uuid.UUID
    chunk_seq: int
    first_turn_seq: int
    last_turn_seq: int
    score: float
    cover: float | None = None


def hits_op(
    ranked: Sequence[Ranked], session_id: uuid.UUID | None, sealer: Sealer | None = None
) -> Op[list[SearchHit]]:
    """Search hits for ranked turn windows (vector, text or fused): each with its window's
    turns, widened back over tool results to their call and over an item to its reasoning
    item (within the chunk, folded or buffered). The turns are read from the window's
    owner, its chunk's row found through chunk_map (whatever start a vector row was stored
    under); with ``session_id`` (a session scope) the hits carry it, so a fork's hit on an
    inherited turn is the fork's (its chunk_seq is the same in the fork's view).

    With ``sealer`` (a store connected with ``encryption=``) every turn is opened before it
    is returned: a hit with a turn whose data key was shredded is dropped (its subject was
    erased; nothing of it is returned), a turn that does not authenticate or is plaintext
    where a sealed one belongs raises ``DecryptionFailed`` / ``PlaintextRefused``. Without
    one, a sealed turn raises ``EncryptionRequired``."""
    if not ranked:
        return []
    index = list(range(len(ranked)))
    sessions = [r.session_id for r in ranked]
    chunks = [r.chunk_seq for r in ranked]
    lows = [max(0, r.first_turn_seq - HIT_CONTEXT_TURNS) for r in ranked]
    highs = [r.last_turn_seq for r in ranked]
    # one snapshot for both reads: a fold between them would move turns out of the buffer
    # after the folded part was read, and the hit would lose them
    yield Tx.BEGIN_SNAPSHOT
    folded = yield Q(query("vec_hit_turns"), (index, sessions, chunks, lows, highs), prepare=False)
    buffered = yield Q(
        query("vec_hit_buffer"), (index, sessions, chunks, lows, highs), prepare=False
    )
    epochs: dict[uuid.UUID, list[int] | None] = {}
    if sealer is not None:
        rows = yield Q(query("vec_hit_epochs"), (list(set(sessions)),), prepare=False)
        epochs = {sid: epochs_of(e) for sid, e in rows}
    yield Tx.COMMIT
    texts = hit_texts(folded, buffered)
    hits = []
    for i, entry in enumerate(ranked):
        text = texts.get(i)
        context = (
            [envelope_turn(e, entry.chunk_seq) for e in jsoncodec.loads_envelopes(text)]
            if text
            else []
        )
        try:
            context = yield from open_turns_op(
                sealer, entry.session_id, context, epochs.get(entry.session_id)
            )
        except KeyShredded:
            continue
        first = next(
            (j for j, t in enumerate(context) if t.turn_seq >= entry.first_turn_seq), len(context)
        )
        owner = entry.session_id if session_id is None else session_id
        hits.append(SearchHit(owner, entry.chunk_seq, entry.score, whole_window(context, first)))
    return hits


# pgvector's default hnsw.max_scan_tuples: an iterative scan ends after this many tuples
DEFAULT_MAX_SCAN_TUPLES = 20_000
MAX_SCAN_TUPLES = 2**31 - 1
# shares below this are taken as this (ef_search and the scan are at their limits anyway)
MIN_SHARE = 1e-9


@dataclass(frozen=True, slots=True)
class AnnSettings:
    """hnsw.ef_search and hnsw.max_scan_tuples of one tenant search through HNSW."""

    ef_search: int
    max_scan_tuples: int


def ann_settings(
    base_ef: int, limit: int, leaf_rows: float | None, share: float | None, min_rows: int
) -> AnnSettings:
    """Scale the HNSW scan to the tenant's share of its leaf. The scan's candidate list
    holds rows of every tenant in the leaf, so a tenant owning ``share`` of it has about
    ``ef_search * share`` of its own among them: ef_search is ``base_ef / share`` (at most
    1000, pgvector's limit), and the iterative scan may read ``4 * limit / share`` tuples
    (at least pgvector's default) before it gives up finding ``limit`` rows of the tenant.
    ``share`` is the statistics' frequency of the tenant in its leaf; without one, the
    tenant holds at least ``min_rows`` of ``leaf_rows`` (its counted rows), a lower bound;
    without either, the unscaled defaults."""
    if (share is None or not share > 0) and leaf_rows is not None and leaf_rows > 0:
        share = min_rows / leaf_rows
    if share is None or not share > 0:
        return AnnSettings(max(base_ef, 1), DEFAULT_MAX_SCAN_TUPLES)
    share = max(MIN_SHARE, min(1.0, share))
    ef = min(MAX_CANDIDATES, math.ceil(base_ef / share))
    scan = min(MAX_SCAN_TUPLES, max(DEFAULT_MAX_SCAN_TUPLES, math.ceil(4 * limit / share)))
    return AnnSettings(ef, scan)


@dataclass(frozen=True, slots=True)
class TenantPath:
    """How a tenant search reads: ``exact`` (few vectors in the window), else HNSW with the
    leaf's statistics (:func:`ann_settings`)."""

    exact: bool
    leaf_rows: float | None = None
    share: float | None = None


def tenant_path_op(ctx: Context, scope: SearchScope) -> Op[TenantPath]:
    """Exact when at most ``vector_exact_rows`` of the tenant's vectors lie in the time
    window (counted up to one past that), else HNSW with its leaf's statistics; read once
    per search, whatever number of windows it then asks for."""
    params = _params(ctx, scope, "", 0)
    cap = ctx.settings.vector_exact_rows
    if cap > 0:
        (count,) = yield Q(
            query("vec_tenant_rows"), {**params, "cap": cap + 1}, prepare=False, fetch="one"
        )
        if int(count) <= cap:
            return TenantPath(exact=True)
    leaf = yield Q(query("vec_tenant_leaf"), (scope.tenant_id,), fetch="one")
    leaf_rows, share = (None, None) if leaf is None else leaf
    return TenantPath(exact=False, leaf_rows=leaf_rows, share=share)


def tenant_windows_op(
    ctx: Context, scope: SearchScope, vector: str, limit: int, path: TenantPath | None = None
) -> Op[list[Mapping[str, Any]]]:
    """The ``limit`` nearest windows of a tenant (``scope.tenant_id``; agent, since and
    until applied), nearest first. The tenant's vectors are in one hash leaf: on the exact
    path (:func:`tenant_path_op`, read here unless ``path`` is given) every one is compared;
    else the leaf's HNSW index is scanned (iterative, strict order) with ef_search and
    max_scan_tuples scaled to the tenant's share of the leaf (:func:`ann_settings`)."""
    if path is None:
        path = yield from tenant_path_op(ctx, scope)
    params = _params(ctx, scope, vector, limit)
    if path.exact:
        rows = yield Q(query("vec_search_tenant_exact"), params, prepare=False, named=True)
        return list(rows)
    cap = ctx.settings.vector_exact_rows
    ann = ann_settings(ctx.settings.hnsw_ef_search, limit, path.leaf_rows, path.share, cap + 1)
    yield Tx.BEGIN
    yield Q(
        query("vec_search_settings"), (max(ann.ef_search, limit), ann.max_scan_tuples), fetch="one"
    )
    rows = yield Q(query("vec_search_ann"), params, prepare=False, named=True)
    yield Tx.COMMIT
    return list(rows)


def search_op(ctx: Context, scope: SearchScope, vector: str) -> Op[list[SearchHit]]:
    """Nearest chunks to ``vector``, best window per chunk. Session scope: every window of
    the session is compared (exact). Tenant scope: :func:`tenant_windows_op` (exact for a
    tenant with few vectors, else its leaf's HNSW index), asked for more windows until
    ``k`` distinct chunks are found or the tenant has no more."""
    k = scope.k
    if scope.session_id is not None:
        rows = yield Q(
            query("vec_search_exact"), _params(ctx, scope, vector, k), prepare=False, named=True
        )
        best = list(rows)
    else:
        limit = min(MAX_CANDIDATES, max(ctx.settings.hnsw_ef_search, 4 * k))
        path = yield from tenant_path_op(ctx, scope)
        while True:
            windows = yield from tenant_windows_op(ctx, scope, vector, limit, path)
            best = best_per_chunk(windows, k)
            if len(best) == k or len(windows) < limit or limit >= MAX_CANDIDATES:
                break
            limit = min(MAX_CANDIDATES, limit * 4)
    ranked = [
        Ranked(
            r["session_id"],
            int(r["chunk_seq"]),
            int(r["first_turn_seq"]),
            int(r["last_turn_seq"]),
            1.0 - float(r["dist"]),
        )
        for r in best
    ]
    hits: list[SearchHit] = yield from hits_op(ranked, scope.session_id, ctx.sealer)
    return hits


# ------------------------------------------------------------------ store-level flows


class VectorState:
    """A store's embedding model, resolved and checked against the database once."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec  # connect(embedding_model=...): None, a name, a path or an Embedder
        self.ready: tuple[Embedder, EmbeddingConfig] | None = None


def _model_facts(embedder: Embedder) -> tuple[int, int]:
    return embedder.dimension, embedder.window_tokens


def check_model_op(spec: Any) -> Op[None]:
    """At connect: refuse a model other than the one the database's vectors come from,
    judged by name (and dimension where known) without loading the model."""
    if spec is None:
        return None
    recorded = yield from config_op()
    if recorded is None:
        return None
    name = spec.name if is_embedder(spec) else os.fspath(spec)
    dim = declared_dimension(spec)
    if model_identity(name) != model_identity(recorded.model) or (
        dim is not None and dim != recorded.dimension
    ):
        holds = (
            f"this database holds vectors of {recorded.model} ({recorded.dimension} "
            f"dimensions), not {name}: vectors of two models cannot be mixed. "
        )
        reembed = f"re-embed everything with the new model: shardstore reembed --model {name}"
        raise EmbeddingModelMismatch(
            f"{holds}Open it with embedding_model={recorded.model!r}, or {reembed}",
            cli=f"{holds}Leave --model out (the database's model is the default), or {reembed}",
        )
    return None


def prepare_op(
    state: VectorState, model: Any = None, reset: bool = False
) -> Op[tuple[Embedder, EmbeddingConfig]]:
    """The store's embedder, loaded and checked against (or recorded in) the database.
    ``model`` with ``reset`` switches the database to another model (drops all vectors)."""
    if state.ready is not None and not reset:
        return state.ready
    recorded = yield from config_op()
    spec = model if model is not None else state.spec
    if spec is None:
        spec = recorded.model if recorded is not None else DEFAULT_MODEL
    embedder = make_embedder(spec)
    dimension, window = yield Call(_model_facts, (embedder,))
    config = yield from configure_op(embedder.name, dimension, window, reset)
    state.spec = embedder
    state.ready = (embedder, config)
    return state.ready


def maintenance_backlog_op(state: VectorState) -> Op[int]:
    """How many chunks a maintenance run should embed: those queued now (a run must end
    even while writers keep queueing more), or 0 when no model is given or recorded.
    Never loads the model."""
    if state.spec is None:
        recorded = yield from config_op()
        if recorded is None:
            return 0
    count = yield from queue_count_op()
    return count


@dataclass(frozen=True, slots=True)
class EmbedRun:
    """What one :func:`embed_run_op` did: chunks stored, how long it took (model loading
    included), and why it stopped before the queue was empty: ``"limit"`` (``limit``
    chunks stored), ``"time"`` (the deadline came) or None (nothing left it could take)."""

    stored: int
    seconds: float
    stopped_by: str | None


# with a deadline, the first batch is this small, later ones are sized to the time left
FIRST_TIMED_BATCH = 4


def embed_run_op(
    state: VectorState,
    limit: int | None,
    batch: int,
    progress: Any,
    session_id: uuid.UUID | None = None,
    seconds: float | None = None,
    sealer: Sealer | None = None,
) -> Op[EmbedRun]:
    """Embed queued chunks (of one session, when given), ``batch`` per transaction, until
    none is left, ``limit`` chunks were stored, ``seconds`` have passed, or three batches
    in a row could store nothing (their chunks keep changing or are held by folds and
    purges; a later call takes them).

    The queue is counted first: with nothing queued (or ``limit`` 0) the model is never
    constructed or loaded. With ``seconds``, no batch starts once the time is up, and each
    batch is sized (from the time per chunk measured so far) to end by then, so the run
    overshoots by at most about one chunk's embedding time; the model's loading counts
    towards the time. ``progress`` (a tqdm-like bar or None) gets the total and updates."""
    clock = time.monotonic()
    deadline = None if seconds is None else clock + seconds
    queued = yield from queue_count_op(session_id)
    todo = queued if limit is None else min(queued, limit)
    if progress is not None:
        progress.total = todo
        progress.refresh()
    if todo == 0:
        return EmbedRun(0, time.monotonic() - clock, "limit" if queued else None)
    embedder, config = yield from prepare_op(state)
    done = 0
    idle = 0  # batches in a row that stored nothing (chunks changing or held by a fold)
    busy = 0.0  # seconds spent in batches that stored something
    stopped: str | None = None
    while True:
        if limit is not None and done >= limit:
            stopped = "limit"
            break
        size = batch if limit is None else min(batch, limit - done)
        if deadline is not None:
            left = deadline - time.monotonic()
            per_chunk = busy / done if done else None
            if left <= 0 or (per_chunk is not None and left < per_chunk):
                stopped = "time"
                break
            fit = FIRST_TIMED_BATCH if per_chunk is None else int(left / max(per_chunk, 1e-6))
            size = max(1, min(size, fit))
        started = time.monotonic()
        result = yield from embed_batch_op(embedder, config.window_tokens, size, session_id, sealer)
        if result.stored:
            busy += time.monotonic() - started
        done += result.stored
        if progress is not None:
            progress.update(result.stored)
        idle = idle + 1 if result.stored == 0 else 0
        if result.claimed == 0 or idle == MAX_IDLE_BATCHES:
            break
    return EmbedRun(done, time.monotonic() - clock, stopped)


def embed_op(
    state: VectorState,
    limit: int | None,
    batch: int,
    progress: Any,
    session_id: uuid.UUID | None = None,
) -> Op[int]:
    """:func:`embed_run_op` without a time limit; returns chunks stored (0, without
    loading the model, when nothing is queued)."""
    run = yield from embed_run_op(state, limit, batch, progress, session_id)
    return run.stored


def search_query_op(
    ctx: Context, state: VectorState, scope: SearchScope, text_or_vector: Any
) -> Op[list[SearchHit]]:
    """Embed the query (a string) or check it (a vector), then :func:`search_op`. Only a
    text query loads the model; a vector is checked against the recorded dimension (or,
    before anything was embedded, the store's model's declared one)."""
    if isinstance(text_or_vector, str):
        if not text_or_vector.strip():
            raise InvalidInput("the search query is empty")
        embedder, _ = yield from prepare_op(state)
        vectors = yield Call(embedder.embed, ([model_safe(text_or_vector)],))
        vector = vectors[0]
    else:
        vector = _as_vector(text_or_vector)
        recorded = yield from config_op()
        if recorded is None:  # nothing was ever embedded: check against the store's model
            declared = None if state.spec is None else declared_dimension(state.spec)
            if declared is not None and len(vector) != declared:
                raise InvalidInput(
                    f"the query vector has {len(vector)} dimensions; this store's embedding "
                    f"model has {declared}"
                )
            return []
        if len(vector) != recorded.dimension:
            raise InvalidInput(
                f"the query vector has {len(vector)} dimensions; the stored vectors have "
                f"{recorded.dimension} ({recorded.model})"
            )
    hits = yield from search_op(ctx, scope, vector_literal(vector))
    return hits


def _as_vector(value: Any) -> list[float]:
    try:
        vector = [float(x) for x in value]
    except (TypeError, ValueError):
        raise InvalidInput("query must be a string or a sequence of numbers") from None
    if not vector or isinstance(value, dict | bytes | bytearray):
        raise InvalidInput("query must be a string or a non-empty sequence of numbers")
    if not all(math.isfinite(x) for x in vector):
        raise InvalidInput("the query vector holds a non-finite number")
    return vector


def hit_texts(folded: Any, buffered: Any) -> dict[int, str]:
    """Each hit's turns as one JSON array text: its chunk's folded turns (an array per hit)
    then the newer ones still in the buffer (one envelope per row), in turn order; a
    chunk's folded part always precedes its buffered part."""
    parts: dict[int, list[str]] = {}
    for i, text in folded:
        if text is not None:
            inner = text.strip()[1:-1].strip()
            if inner:
                parts.setdefault(i, []).append(inner)
    for i, _seq, envelope in sorted(buffered, key=lambda row: (row[0], row[1])):
        parts.setdefault(i, []).append(envelope)
    return {i: "[" + ",".join(items) + "]" for i, items in parts.items()}
