"""Text windows stored as lexeme hashes (decision 0012): an upgrade converts every stored
window in place and keeps every ranking, exact and sampled, in a session and in a tenant; the
GIN index finds a lexeme's windows; the ranking still scores a query of many lexemes."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.schema import migrate
from shardstore.search import text as textsearch
from tests.search.test_vector_search import SMALL

LEXEME_MIGRATION = "text_lexeme_hashes"
QUERIES = [
    "harbour weather",
    "rye bread with caraway",
    "order QX-4471 refund",
    "zanzibar",
    "the train leaves from platform nine at seven",
]
WINDOWS = (
    "SELECT session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at"
    " FROM shardstore.turn_text ORDER BY 1, 2, 3"
)
FILLER = [
    "the weather in the harbour was grey and windy all morning",
    "we compared three laptop models and their battery life in detail",
    "she baked bread with rye flour and caraway seeds for the market",
    "the train to the mountains leaves at seven from platform nine",
    "a refund for the order was requested twice by the customer",
]


def _messages(seed: int, n: int) -> list[dict[str, Any]]:
    out = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{FILLER[(i + seed) % len(FILLER)]} ({i} {'w ' * (i % 5)})",
        }
        for i in range(n)
    ]
    out[7 + seed] = {"role": "user", "content": "refund for order QX-4471, please"}
    out[20 + seed] = {"role": "user", "content": "zanzibar " * 3}
    return out


def build_sessions(store: shardstore.Store) -> list[uuid.UUID]:
    """Three sessions of 60 turns in tenant acme: two flushed, the third with turns in the
    buffer (windowed on the fly) and one more buffered turn."""
    sids = [store.create_session("acme", agent_id="bot") for _ in range(3)]
    for k, sid in enumerate(sids):
        store.append_turns(sid, _messages(k, 60))
    store.flush(sids[0])
    store.flush(sids[1])
    store.append_turn(sids[2], {"role": "user", "content": "zanzibar harbour, buffered"})
    return sids


def _hit(hit: Any) -> tuple[Any, ...]:
    return (hit.session_id, hit.chunk_seq, [t.turn_seq for t in hit.turns], round(hit.score, 9))


def _rankings(store: shardstore.Store, sids: list[uuid.UUID]) -> list[Any]:
    out: list[Any] = []
    for query in QUERIES:
        for sid in sids:
            hits = store.search(query, session_id=sid, k=20, mode="text")
            out.append([_hit(h) for h in hits])
        hits = store.search(query, tenant_id="acme", k=20, mode="text")
        out.append([_hit(h) for h in hits])
    return out


def _both_rankings(store: shardstore.Store, sids: list[uuid.UUID]) -> list[Any]:
    """Rankings with every window scored, and with a small sample and cap (rare lexemes
    fetched through the GIN index, common ones estimated from the sample)."""
    exact = _rankings(store, sids)
    sample, cap = textsearch.TEXT_SAMPLE, textsearch.TEXT_CAP
    textsearch.TEXT_SAMPLE, textsearch.TEXT_CAP = 30, 12
    try:
        sampled = _rankings(store, sids)
    finally:
        textsearch.TEXT_SAMPLE, textsearch.TEXT_CAP = sample, cap
    return [exact, sampled]


RANK_ARGS = "uuid, text, text, timestamptz, timestamptz, text, integer, integer, integer"
#: the text search of this version calls text_rank_v2; the schema before the lexeme hashes
#: has only text_rank_v1, its ranking by the same arguments (text search reads no coverage)
RANK_SHIM = f"""
CREATE FUNCTION shardstore.text_rank_v2({RANK_ARGS})
 RETURNS TABLE(r_session_id uuid, r_chunk_seq bigint, r_turn_seq bigint,
               r_score double precision, r_cover double precision)
 LANGUAGE sql STABLE
AS $$ SELECT r.*, 1.0::float8 FROM shardstore.text_rank_v1($1, $2, $3, $4, $5, $6, $7, $8, $9) r $$
"""


@pytest.mark.slow
def test_an_upgrade_converts_every_window_and_keeps_every_ranking(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = migrate.all_migrations()
    cut = next(i for i, m in enumerate(full) if m.name == LEXEME_MIGRATION)
    # the baseline is read (and checked against the full set) once per process: read it
    # before the set is cut, as any earlier connect in the process would have
    migrate.baseline()
    monkeypatch.setattr(migrate, "all_migrations", lambda: full[:cut])
    old = shardstore.connect(empty_dsn, background_fold=False, **SMALL)
    try:
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            admin.execute(RANK_SHIM)
        sids = build_sessions(old)
        before = _both_rankings(old, sids)
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            assert admin.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = 'shardstore.turn_text'::regclass AND attname = 'tsv'"
            ).fetchone() == ("tsvector",)
            windows_before = admin.execute(WINDOWS).fetchall()
            lexemes_before = admin.execute(
                "SELECT tsvector_to_array(tsv) FROM shardstore.turn_text ORDER BY"
                " session_id, turn_seq, window_no"
            ).fetchall()
            admin.execute(f"DROP FUNCTION shardstore.text_rank_v2({RANK_ARGS})")
    finally:
        old.close()
    monkeypatch.undo()
    assert any(hits for ranking in before for hits in ranking)
    new = shardstore.connect(empty_dsn, background_fold=False, **SMALL)
    try:
        assert _both_rankings(new, sids) == before
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            assert admin.execute(WINDOWS).fetchall() == windows_before
            assert len(windows_before) > 100
            hashes = admin.execute(
                "SELECT tsv FROM shardstore.turn_text ORDER BY session_id, turn_seq, window_no"
            ).fetchall()
            for (lexemes,), (got,) in zip(lexemes_before, hashes, strict=True):
                (want,) = admin.execute(
                    "SELECT array(SELECT DISTINCT hashtext(l) FROM unnest(%s::text[]) AS l"
                    " ORDER BY 1)",
                    (lexemes,),
                ).fetchone()
                assert got == want and len(got) == len(lexemes)
            limits = admin.execute(
                "SELECT c.reloptions FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'shardstore.turn_text_tsv'::regclass"
            ).fetchall()
            assert len(limits) == 16 and all(r == (["gin_pending_list_limit=256"],) for r in limits)
        # new windows are written as hashes too, and found
        new.append_turn(sids[0], {"role": "user", "content": "a quokka at the harbour"})
        new.flush(sids[0])
        hits = new.search("quokka", session_id=sids[0], k=3, mode="text")
        assert [h.turns[-1].turn_seq for h in hits] == [60]
    finally:
        new.close()


def test_the_index_finds_a_lexemes_windows(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")
    store.append_turns(sid, _messages(0, 60))
    store.flush(sid)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET enable_seqscan = off")
        lexeme = (
            "SELECT session_id, turn_seq FROM shardstore.turn_text"
            " WHERE tsv @> ARRAY[hashtext('zanzibar')]"
        )
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + lexeme).fetchall())
        assert "Bitmap Index Scan on turn_text_h" in plan and "tsv_idx" in plan, plan
        rows = conn.execute(lexeme).fetchall()
    assert rows == [(sid, 20)]


def test_a_query_of_many_lexemes_is_ranked(store: shardstore.Store, dsn: str) -> None:
    """The masks are as long as the query has lexemes (no 64-lexeme limit): a question of
    ~100 distinct words still ranks the turn holding most of them first, and each turn's
    coverage is the share of the query's weight it holds (all of it for the turn holding
    every word; about a seventh for each turn holding a seventh of them)."""
    sid = store.create_session("acme")
    words = [f"word{i}x" for i in range(100)]
    sent = [{"role": "user", "content": " ".join(words[i::7])} for i in range(7)]
    sent.append({"role": "user", "content": " ".join(words)})
    store.append_turns(sid, sent)
    store.flush(sid)
    with psycopg.connect(dsn) as conn:
        ranked = conn.execute(
            "SELECT r_turn_seq, r_cover FROM shardstore.text_rank_v2(%s, NULL, NULL, NULL, NULL,"
            " %s, 20, 1000, 500)",
            (sid, " ".join(words)),
        ).fetchall()
    assert ranked[0] == (7, pytest.approx(1.0))
    assert sorted(r[0] for r in ranked) == list(range(8))
    for turn, cover in ranked[1:]:
        held = len(words[turn::7])
        assert cover == pytest.approx(held / len(words), rel=0.05), (turn, cover)
