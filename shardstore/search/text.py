"""Full-text and hybrid search: operations (sans-IO) and the pure fusion rule.

Text search reads ``shardstore.turn_text`` (each turn window's lexemes as sorted hashes,
docs/decisions/0012-text-windows-as-lexeme-hashes.md says why; written by ``fold_chunk`` as
it folds the turns, and for buffered turns by :mod:`shardstore.search.text_index`) and indexes the
buffered turns that have none yet on the fly, so every appended turn is found without any
worker having run. Hybrid search fuses the text ranking with the vector ranking by reciprocal
rank fusion (:func:`fuse`), turn by turn, a text hit weighted by the share of the query it
holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import validate
from ..core.context import Context
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q, StatementFailed
from ..errors import ConfigurationError, InvalidInput
from ..models import SearchHit
from .embedding import model_safe, vector_literal
from .keyed import keyed_ranking_op
from .vectors import (
    MAX_CANDIDATES,
    Ranked,
    SearchScope,
    VectorState,
    _params,
    config_op,
    first_per_key,
    hits_op,
    prepare_op,
    tenant_windows_op,
)

MODES = ("vector", "text", "hybrid")
#: reciprocal rank fusion's constant: a turn ranked r adds weight / (10 + r). Cormack et al.
#: (2009) fused many runs with 60; with two rankings, 60 makes a ranking's first and its
#: twentieth place nearly equal (1/61 against 1/80), so a text hit that shares a common word
#: with the query and is anywhere in the vector ranking beat the vector ranking's first
#: (docs/decisions/0029-hybrid-search-weighs-text-hits-by-coverage.md)
RRF_K = 10
#: a text hit's weight in the fusion is TEXT_WEIGHT * cover ** 3: a turn holding all of the
#: query's weight (an exact id or code, what vectors miss) counts twice a vector hit of the
#: same rank, one holding ~79% of it as much, one holding half a quarter
TEXT_WEIGHT = 2.0
#: the longest text query accepted, in characters
MAX_QUERY_CHARS = 10_000
#: the scope's newest indexed windows a text ranking samples: a scope no larger is scored
#: exactly; in a larger one, a lexeme common in it gives candidates only from the sample
TEXT_SAMPLE = 1000
#: a lexeme held by more folded windows than this (or estimated so from the sample) counts
#: as common: its windows are not all scored, and its document frequency is estimated
TEXT_CAP = 500


def text_query(value: Any) -> str:
    """A text query as the search needs it: a non-empty string without NUL, at most
    :data:`MAX_QUERY_CHARS` characters."""
    if not isinstance(value, str):
        raise InvalidInput("text and hybrid search need the query as a string")
    if not value.strip():
        raise InvalidInput("the search query is empty")
    return validate.text(value, "the search query", limit=MAX_QUERY_CHARS)


def depth(k: int) -> int:
    """How many turns each ranking contributes to a fusion of the best ``k`` chunks."""
    return min(MAX_CANDIDATES, max(50, 8 * k))


def _ranked(row: Mapping[str, Any], score: float, cover: float | None = None) -> Ranked:
    return Ranked(
        row["session_id"],
        int(row["chunk_seq"]),
        int(row["first_turn_seq"]),
        int(row["last_turn_seq"]),
        score,
        cover,
    )


def text_ranking_op(
    ctx: Context, scope: SearchScope, text: str, n: int, index: bool = True
) -> Op[list[Ranked]]:
    """The ``n`` best-matching turns of the scope for ``text``, best first (folded and
    buffered turns alike, a session's fork lineage included; ``session_id`` is the turn's
    owner). The work is bounded: at most :data:`TEXT_SAMPLE` windows plus
    :data:`TEXT_CAP` per rare query lexeme are scored (``text_rank_v2``; docs/search.md,
    "How full-text search works"). A store connected with ``encryption=`` ranks its keyed
    windows instead (:func:`shardstore.search.keyed.keyed_ranking_op`), indexing its sealed
    turns first unless ``index`` is false (a caller inside a read-only snapshot)."""
    params = _params(ctx, scope, "", n)
    params.update(q=text, sample=TEXT_SAMPLE, cap=TEXT_CAP)
    if ctx.sealer is not None:  # sealed turns: keyed windows (shardstore.search.keyed)
        keyed: list[Ranked] = yield from keyed_ranking_op(ctx.sealer, scope, text, n, params, index)
        return keyed
    rows = yield Q(query("text_search"), params, prepare=False, named=True)
    return [_ranked(r, float(r["score"]), float(r["cover"])) for r in rows]


def vector_ranking_op(ctx: Context, scope: SearchScope, vector: str, n: int) -> Op[list[Ranked]]:
    """The ``n`` nearest turn windows to ``vector`` (one per turn), best first: exact for a
    session, :func:`vector_ops.tenant_windows_op` for a tenant (exact for a tenant with few
    vectors, else its leaf's HNSW index)."""
    params = _params(ctx, scope, vector, n)
    if scope.session_id is not None:
        rows = yield Q(query("vec_windows_exact"), params, prepare=False, named=True)
    else:
        rows = yield from tenant_windows_op(ctx, scope, vector, n)
    best: list[Ranked] = []
    seen: set[tuple[uuid.UUID, int]] = set()
    for row in rows:  # a long turn has several windows: its best one ranks it
        key = (row["session_id"], int(row["first_turn_seq"]))
        if key not in seen:
            seen.add(key)
            best.append(_ranked(row, 1.0 - float(row["dist"])))
    return best


def query_vector_op(state: VectorState, text: str) -> Op[str | None]:
    """The query embedded with the store's model, or None when nothing was ever embedded
    (the vector ranking is then empty and the model is not loaded)."""
    recorded = yield from config_op()
    if recorded is None:
        return None
    embedder, _ = yield from prepare_op(state)
    vectors = yield Call(embedder.embed, ([model_safe(text)],))
    return vector_literal(vectors[0])


def best_chunks(ranked: Sequence[Ranked], k: int) -> list[Ranked]:
    """The best entry of each chunk, in ranking order, at most ``k``."""
    return first_per_key(ranked, lambda entry: (entry.session_id, entry.chunk_seq), k)


def fusion_weight(entry: Ranked) -> float:
    """How much ``entry`` counts in a fusion: 1 for a hit without a coverage (a vector
    hit), :data:`TEXT_WEIGHT` times its coverage cubed for a text hit."""
    if entry.cover is None:
        return 1.0
    return TEXT_WEIGHT * min(max(entry.cover, 0.0), 1.0) ** 3


def fuse(rankings: Sequence[Sequence[Ranked]], k: int = RRF_K) -> list[Ranked]:
    """Weighted reciprocal rank fusion of rankings of turns (each best first): a turn's
    score is the sum over the rankings that hold it of ``fusion_weight(entry) / (k +
    rank)`` (rank from 1; a turn counted once per ranking, at its best rank, with that
    entry's weight). Best first; ties by session id, then turn. A turn keeps the window of
    the ranking that ranked it best."""
    score: dict[tuple[uuid.UUID, int], float] = {}
    where: dict[tuple[uuid.UUID, int], tuple[int, Ranked]] = {}
    for ranking in rankings:
        seen: set[tuple[uuid.UUID, int]] = set()
        rank = 0
        for entry in ranking:
            key = (entry.session_id, entry.first_turn_seq)
            if key in seen:
                continue
            seen.add(key)
            rank += 1
            score[key] = score.get(key, 0.0) + fusion_weight(entry) / (k + rank)
            if key not in where or rank < where[key][0]:
                where[key] = (rank, entry)
    ordered = sorted(score, key=lambda key: (-score[key], str(key[0]), key[1]))
    out = []
    for key in ordered:
        entry = where[key][1]
        out.append(
            Ranked(
                entry.session_id,
                entry.chunk_seq,
                entry.first_turn_seq,
                entry.last_turn_seq,
                score[key],
            )
        )
    return out


def search_text_op(ctx: Context, scope: SearchScope, text: str) -> Op[list[SearchHit]]:
    """The ``k`` chunks whose best turn matches ``text`` best (full-text), best first, each
    with that turn; score: the turn's BM25-style score. Raises ``ConfigurationError`` when
    text indexing is off for the database (so no hits are never mistaken for no matches)."""
    ranked = yield from text_ranking_op(ctx, scope, text, depth(scope.k))
    if not ranked and (yield from text_language_op()) is None:
        off = "full-text search is off for this database: "
        raise ConfigurationError(
            off + "store.configure_text_search('english') turns it on (and indexes what is stored)",
            cli=off + "'shardstore text-search --language english' turns it on (and indexes "
            "what is stored)",
        )
    hits: list[SearchHit] = yield from hits_op(
        best_chunks(ranked, scope.k), scope.session_id, ctx.sealer
    )
    return hits


def hybrid_ranking_op(
    ctx: Context,
    state: VectorState,
    scope: SearchScope,
    text: str,
    vector: str | None,
    index: bool = True,
) -> Op[list[Ranked]]:
    """The text and vector rankings of the scope fused (:func:`fuse`), best first; the
    vector ranking is empty when ``vector`` is None (nothing embedded yet). ``index``: as
    for :func:`text_ranking_op`."""
    n = depth(scope.k)
    lexical = yield from text_ranking_op(ctx, scope, text, n, index)
    semantic: list[Ranked] = []
    if vector is not None:
        semantic = yield from vector_ranking_op(ctx, scope, vector, n)
    return fuse([semantic, lexical])


def search_hybrid_op(
    ctx: Context, state: VectorState, scope: SearchScope, text: str
) -> Op[list[SearchHit]]:
    """The ``k`` chunks whose best turn ranks best by the weighted reciprocal rank fusion of
    the text and vector rankings (:func:`fuse`), best first; score: the fused score."""
    vector = yield from query_vector_op(state, text)
    fused = yield from hybrid_ranking_op(ctx, state, scope, text, vector)
    hits: list[SearchHit] = yield from hits_op(
        best_chunks(fused, scope.k), scope.session_id, ctx.sealer
    )
    return hits


# undefined_object (no such configuration), invalid_text_representation, invalid_name
_BAD_CONFIG = frozenset({"42704", "22P02", "42602"})


def configure_text_search(store: StoreState, language: str | None) -> Op[int]:
    """Switch the language of full-text search (a PostgreSQL text search configuration:
    ``"english"``, the default, ``"german"``, ``"simple"``...) and rebuild every stored
    turn's index in one transaction: searches see the old index until it commits, then the
    new one; turns appended later are indexed in the new language. Folds, text passes and
    imports that start meanwhile wait for the change and index in the new language (no
    window of the old one survives it); searches do not wait. Returns the number of
    text windows written. An unknown configuration raises ``InvalidInput`` and changes
    nothing. Needs the schema owner's rights (tenant roles may not).

    ``None`` switches text indexing off: every stored window is deleted (the disk goes
    back; ``VACUUM`` returns it to the system), no turn is indexed afterwards,
    ``search(mode="text")`` raises ``ConfigurationError``, and hybrid search and
    ``context(recall=...)`` rank by vectors alone. A language turns it on again and indexes
    every folded turn."""
    if language is not None and (
        not isinstance(language, str) or not language or "\x00" in language
    ):
        raise InvalidInput(
            "language must be the name of a text search configuration, or None for off"
        )
    # regconfig reads digits as an OID and "-" as OID 0 (the server then fails with an
    # internal "cache lookup failed"), and lone surrogates cannot be sent: not names
    if language is not None and (
        language.strip().isdigit() or language.strip() == "-" or _unencodable(language)
    ):
        raise InvalidInput(f"no text search configuration named {validate.shown(language)}")
    row = yield Q(query("text_configure"), (language,), fetch="one", recover=_BAD_CONFIG)
    if isinstance(row, StatementFailed):
        raise InvalidInput(f"no text search configuration named {language!r}")
    return int(row[0])


def _unencodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def text_language_op() -> Op[str | None]:
    """The database's text search configuration, or None when text indexing is off."""
    row = yield Q(query("text_config_get"), (), fetch="one")
    return None if row is None or row[0] is None else str(row[0])


def text_search_language(store: StoreState) -> Op[str | None]:
    """The text search configuration turns are indexed with (``"english"`` unless switched
    with :meth:`configure_text_search`), or None when full-text indexing is off."""
    return text_language_op()
