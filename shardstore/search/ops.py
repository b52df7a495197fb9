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
from ..core.sql import query as named_query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q
from ..errors import ConfigurationError
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


def configure_sealed_vectors(store: StoreState, enabled: bool) -> Op[int]:
    """Whether turns sealed under encryption at rest get vectors, for the whole database
    (every store and worker obeys it; on by default). Vectors are derived from the text and
    can be partly inverted, so a database that must not hold anything derived from
    encrypted text but keyed lexeme hashes switches them off (docs/security.md).

    ``False``: in one transaction, after the embedding batches in flight commit, every
    vector of a sealed turn is deleted; no worker embeds a sealed turn afterwards (they
    drain the queue of them). ``search(mode="vector")`` and ``"hybrid"`` with
    ``encryption=`` then rank by keyed text alone (exact words and codes are still found,
    paraphrases less so), and a vector query raises ``ConfigurationError``;
    ``context(recall=...)`` ranks by text. A backup taken afterwards holds no vector of
    encrypted text. ``True``: the sealed turns skipped meanwhile are queued again, and the
    next ``embed()`` or ``maintain()`` gives them vectors.

    Returns the number of vectors deleted (off) or of chunks and sessions queued again
    (on; 0 when it was on already). Killed midway it changes nothing; calling it again
    finishes it. Needs the schema owner's rights (a tenant role gets ``AccessDenied``).
    ``InvalidInput`` for anything but a bool, before anything changes."""
    on = validate.flag(enabled, "enabled")
    (changed,) = yield Q(named_query("sealed_vectors_set"), (on,), fetch="one")
    return int(changed)


def sealed_vectors(store: StoreState) -> Op[bool]:
    """Whether turns sealed under encryption at rest get vectors in this database
    (:func:`configure_sealed_vectors`; True by default)."""
    (on,) = yield Q(named_query("sealed_vectors_get"), fetch="one")
    return bool(on)


def sealed_vectors_op(ctx: Any) -> Op[bool]:
    """Whether this store's sealed turns have vectors to search: False with encryption on
    and :func:`configure_sealed_vectors` off; True otherwise (one statement only with
    encryption on)."""
    if ctx.sealer is None:
        return True
    (on,) = yield Q(named_query("sealed_vectors_get"), fetch="one")
    return bool(on)


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
    ``"hybrid"``: the text and vector rankings of turns fused by reciprocal rank fusion, a
    text hit weighted by the share of the query it holds (score: the fused score; only the
    text ranking, so weighted, while nothing was ever embedded). Text
    and hybrid take a text query; scopes and tenant isolation are the same in every mode.

    With ``encryption=`` every mode works over sealed turns: text search over keyed lexeme
    hashes that the store writes itself before it ranks (the server never stores a lexeme
    of a sealed turn), vectors that ``embed()`` computes from the opened turns, and hits
    opened before they are returned; a hit whose data key was shredded is left out
    (docs/decisions/0025-encrypted-search.md). With vectors of sealed turns switched off
    (:func:`configure_sealed_vectors`), ``"vector"`` and ``"hybrid"`` rank by text only. A
    tenant-wide text search reads the tenant's 2,000 most recently active sessions and
    hashes the query once per subject among them (and per session without one)."""
    chosen = validate.choice(mode, "mode", MODES)
    scope = search_scope(session_id, tenant_id, agent_id, since, until, k)
    hits: list[SearchHit]
    if chosen != "text" and not (yield from sealed_vectors_op(store.ctx)):
        # no vectors of encrypted data: the text ranking alone (a vector query has nothing
        # to be compared with)
        if chosen == "vector" and not isinstance(query, str):
            raise ConfigurationError(
                "vectors of encrypted turns are switched off for this database "
                "(configure_sealed_vectors(False)): search with a text query"
            )
        chosen = "text"
    if chosen == "text":
        hits = yield from search_text_op(store.ctx, scope, text_query(query))
    elif chosen == "hybrid":
        hits = yield from search_hybrid_op(store.ctx, store.vector_state, scope, text_query(query))
    else:
        hits = yield from search_query_op(store.ctx, store.vector_state, scope, query)
    return hits
