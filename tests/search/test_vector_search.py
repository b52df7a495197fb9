"""Embedding worker and search, with a small deterministic embedder (tests/embedders.py).
The real model is exercised in tests/search/test_minilm.py."""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.core.sql import query
from shardstore.search.embedding import message_text, plan_windows
from shardstore.search.vectors import best_per_chunk, chunk_windows, partition_floor
from tests.embedders import HashEmbedder

StoreFactory = Callable[..., shardstore.Store]
SMALL = {"chunk_tokens": 300}  # ~250-token chunks: many chunks from few turns

FILLER = [
    "the weather in the harbour was grey and windy all morning",
    "we compared three laptop models and their battery life in detail",
    "she baked bread with rye flour and caraway seeds for the market",
    "the train to the mountains leaves at seven from platform nine",
    "our garden tomatoes suffered from blight after the long rain",
    "he practised the violin concerto slowly with a metronome",
]


def filler(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{FILLER[i % 6]} ({i})"}


def fill(store: shardstore.Store, sid: uuid.UUID, n: int, start: int = 0) -> None:
    store.append_turns(sid, [filler(start + i) for i in range(n)])
    store.flush(sid)
    store.drain_folds()


def counts(dsn: str) -> tuple[int, int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query("vec_counts")).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])


def folded_chunks(dsn: str, sid: uuid.UUID | None = None) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.agent_history"
            " WHERE %s::uuid IS NULL OR session_id = %s",
            (sid, sid),
        ).fetchone()
        assert row is not None
        return int(row[0])


# ------------------------------------------------------------------ windows (pure)


def word_counts(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def word_split(text: str, n: int) -> list[str]:
    words = text.split()
    return [" ".join(words[i : i + n]) for i in range(0, len(words), n)] or [text]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30),
    budget=st.integers(min_value=1, max_value=25),
)
def test_windows_hold_one_turn_each_split_to_the_budget(sizes: list[int], budget: int) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    turns = [(seq, at + timedelta(seconds=seq), " ".join(["w"] * n)) for seq, n in enumerate(sizes)]
    windows = plan_windows(turns, budget, word_counts, word_split)
    for w in windows:
        assert w.text.strip()
        assert w.first_seq == w.last_seq
        assert w.first_at == w.last_at == turns[w.first_seq][1]
        assert word_counts([w.text])[0] <= budget
    # every turn, in order, whole: its pieces add up to the turn
    assert [w.first_seq for w in windows] == sorted(w.first_seq for w in windows)
    for seq, n in enumerate(sizes):
        pieces = [w for w in windows if w.first_seq == seq]
        assert sum(word_counts([w.text])[0] for w in pieces) == n
        assert len(pieces) == (1 if n <= budget else -(-n // budget))


def test_message_text_keeps_what_carries_meaning() -> None:
    assert message_text({"role": "user", "content": "hi"}) == "user: hi"
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}]}
    assert message_text(parts) == "user: a"
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"function": {"name": "lookup", "arguments": '{"q": "refund"}'}}],
    }
    assert "lookup" in message_text(call) and "refund" in message_text(call)
    assert message_text({"role": "tool", "name": "grep", "content": "x"}) == "tool grep: x"


def test_best_per_chunk_keeps_the_first_window_of_each_chunk() -> None:
    columns = ("session_id", "chunk_seq", "chunk_start", "first_turn_seq", "last_turn_seq", "dist")
    rows = [
        dict(zip(columns, row, strict=True))
        for row in [
            ("a", 1, 0, 0, 0, 0.1),
            ("a", 1, 0, 5, 5, 0.2),
            ("b", 1, 0, 0, 0, 0.3),
            ("a", 2, 0, 9, 9, 0.4),
        ]
    ]
    assert [r["dist"] for r in best_per_chunk(rows, 2)] == [0.1, 0.3]
    assert len(best_per_chunk(rows, 10)) == 3


def test_partition_floor_matches_date_bin() -> None:
    origin = datetime(2001, 1, 1, tzinfo=UTC)
    week = timedelta(days=7)
    at = datetime(2026, 11, 30, 15, 0, tzinfo=UTC)  # a Monday
    assert partition_floor(at, week, origin) == datetime(2026, 11, 30, tzinfo=UTC)
    assert partition_floor(at - timedelta(hours=16), week, origin) == datetime(
        2026, 11, 23, tzinfo=UTC
    )


# ------------------------------------------------------------------ the worker


def test_embed_embeds_each_folded_chunk_once_and_again_only_when_it_changes(
    make_store: StoreFactory, dsn: str
) -> None:
    emb = HashEmbedder()
    store = make_store(embedding_model=emb, **SMALL)
    sid = store.create_session("acme")
    fill(store, sid, 120)
    chunks = folded_chunks(dsn)
    assert chunks > 5
    assert store.embed() == chunks
    vectors, embedded_chunks, queued = counts(dsn)
    assert (embedded_chunks, queued) == (chunks, 0)
    assert vectors >= chunks
    assert store.embed() == 0
    # a flush changes only the open chunk: only it is embedded again
    store.append_turn(sid, filler(999))
    store.flush(sid)
    assert store.embed() == 1
    assert counts(dsn)[1] == chunks


def test_windows_stored_match_the_chunks(make_store: StoreFactory, dsn: str) -> None:
    emb = HashEmbedder(window_tokens=20)
    store = make_store(embedding_model=emb, **SMALL)
    sid = store.create_session("acme")
    fill(store, sid, 60)
    store.embed()
    with psycopg.connect(dsn) as conn:
        chunks = conn.execute(
            "SELECT chunk_seq, conversation_chunk::text FROM shardstore.agent_history"
        ).fetchall()
        for chunk_seq, text in chunks:
            expected = [(w.first_seq, w.last_seq) for w in chunk_windows(emb, text, 20)]
            stored = conn.execute(
                "SELECT first_turn_seq, last_turn_seq FROM shardstore.chunk_vectors"
                " WHERE session_id = %s AND chunk_seq = %s ORDER BY window_no",
                (sid, chunk_seq),
            ).fetchall()
            assert stored == expected


@pytest.mark.slow
def test_concurrent_workers_never_embed_a_chunk_twice(make_store: StoreFactory, dsn: str) -> None:
    writer = make_store(**SMALL)
    for _ in range(4):
        fill(writer, writer.create_session("acme"), 80)
    chunks = folded_chunks(dsn)
    embedders = [HashEmbedder() for _ in range(3)]
    stores = [make_store(embedding_model=e, **SMALL) for e in embedders]
    results: list[int] = []
    barrier = threading.Barrier(len(stores))

    def work(store: shardstore.Store) -> None:
        barrier.wait()
        results.append(store.embed(batch_size=2))

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == chunks  # a chunk embedded twice would count twice
    assert counts(dsn)[1:] == (chunks, 0)


def test_a_dead_worker_leaves_nothing_locked(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(embedding_model=HashEmbedder(), **SMALL)
    fill(store, store.create_session("acme"), 60)
    chunks = folded_chunks(dsn)
    dying = psycopg.connect(dsn)
    # a worker records the model before it claims (the claim reads chunk_vectors, which a
    # first configure locks)
    dying.execute(query("vec_configure"), ("test/hash-words", 256, 32, False))
    dying.commit()
    dying.execute(query("vec_claim_units"), (None, 1000)).fetchall()  # holds every queue row
    assert store.embed() == 0  # SKIP LOCKED: nothing to take while the other worker holds them
    pid = dying.info.backend_pid
    dying.pgconn.finish()  # the worker dies without COMMIT or ROLLBACK
    # the server ends the backend (and drops its locks) shortly after the client is gone
    with psycopg.connect(dsn, autocommit=True) as watch:
        for _ in range(200):
            if watch.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)", (pid,)
            ).fetchone() == (True,):
                break
            time.sleep(0.05)
    assert store.embed() == chunks


class ChangingEmbedder(HashEmbedder):
    """Appends to the session (and flushes) while the first batch is being embedded."""

    def __init__(self, on_first: Callable[[], None]) -> None:
        super().__init__()
        self.on_first: Callable[[], None] | None = on_first

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.on_first is not None:
            hook, self.on_first = self.on_first, None
            hook()
        return super().embed(texts)


def test_a_chunk_changed_while_embedding_is_not_written_stale(
    make_store: StoreFactory, dsn: str
) -> None:
    other = make_store(**SMALL)
    sid = other.create_session("acme")
    other.append_turns(sid, [filler(i) for i in range(3)])
    other.flush(sid)  # one open chunk, folded

    def change() -> None:
        other.append_turn(sid, {"role": "user", "content": "zebra xylophone quartz"})
        other.flush(sid)

    store = make_store(embedding_model=ChangingEmbedder(change), **SMALL)
    assert store.embed() == 1  # the first attempt is left queued; the second stores
    hits = store.search("zebra xylophone quartz", session_id=sid, k=1)
    assert hits and "zebra" in hits[0].turns[-1].message["content"]
    assert counts(dsn)[2] == 0


# ------------------------------------------------------------------ search


def exact_model(
    store: shardstore.Store, emb: HashEmbedder, dsn: str, sid: uuid.UUID, query_text: str, k: int
) -> list[tuple[int, float]]:
    """Search as a plain Python model: every window of every chunk, best per chunk."""
    q = emb.embed([query_text])[0]
    best: dict[int, float] = {}
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT chunk_seq, conversation_chunk::text FROM shardstore.agent_history"
            " WHERE session_id = %s",
            (sid,),
        ).fetchall()
    for chunk_seq, text in rows:
        windows = chunk_windows(emb, text, emb.window_tokens)
        for vec in emb.embed([w.text for w in windows]):
            score = sum(a * b for a, b in zip(q, vec, strict=True))
            best[chunk_seq] = max(best.get(chunk_seq, -2.0), score)
    return sorted(best.items(), key=lambda kv: -kv[1])[:k]


@pytest.mark.parametrize("query_text", ["rye bread caraway", "violin metronome concerto", "train"])
def test_session_search_is_exact(make_store: StoreFactory, dsn: str, query_text: str) -> None:
    emb = HashEmbedder()
    store = make_store(embedding_model=emb, **SMALL)
    sid = store.create_session("acme")
    fill(store, sid, 150)
    store.embed()
    hits = store.search(query_text, session_id=sid, k=5)
    model = dict(exact_model(store, emb, dsn, sid, query_text, 10_000))
    kth = sorted(model.values(), reverse=True)[4]
    assert len(hits) == 5
    # halfvec stores 16-bit floats: scores agree to ~1e-3, so ties may swap places
    for hit in hits:
        assert math.isclose(hit.score, model[hit.chunk_seq], abs_tol=5e-3)
        assert hit.score >= kth - 5e-3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_hits_carry_the_best_window_turns_not_the_whole_chunk(make_store: StoreFactory) -> None:
    store = make_store(embedding_model=HashEmbedder(window_tokens=24), **SMALL)
    sid = store.create_session("acme")
    msgs = [filler(i) for i in range(40)]
    msgs[17] = {"role": "user", "content": "my refund reference is QX4471 for the duplicate charge"}
    store.append_turns(sid, msgs)
    store.flush(sid)
    store.drain_folds()
    store.embed()
    hit = store.search("refund reference QX4471", session_id=sid, k=1)[0]
    seqs = [t.turn_seq for t in hit.turns]
    assert 17 in seqs
    assert len(seqs) < store.chunks(sid)[hit.chunk_seq].turn_count
    assert hit.turns[seqs.index(17)].message == msgs[17]


@pytest.mark.slow
def test_tenant_search_never_returns_another_tenants_chunks(make_store: StoreFactory) -> None:
    store = make_store(embedding_model=HashEmbedder(), **SMALL)
    mine = [store.create_session("acme", agent_id=f"a{i % 2}") for i in range(3)]
    theirs = [store.create_session("globex") for _ in range(3)]
    for sid in mine + theirs:
        fill(store, sid, 40)
    secret = {"role": "user", "content": "the vault combination is 31 17 42 walrus"}
    store.append_turn(theirs[0], secret)
    store.flush(theirs[0])
    store.embed()
    hits = store.search("vault combination walrus", tenant_id="acme", k=50)
    assert hits and {h.session_id for h in hits} <= set(mine)
    assert not any("walrus" in str(t.message) for h in hits for t in h.turns)
    found = store.search("vault combination walrus", tenant_id="globex", k=1)
    assert found[0].session_id == theirs[0]
    # agent scope
    a0 = store.search("weather harbour", tenant_id="acme", agent_id="a0", k=50)
    assert a0 and {h.session_id for h in a0} <= {mine[0], mine[2]}
    # session scope inside a tenant: another tenant's session finds nothing
    assert store.search("walrus", session_id=theirs[0], tenant_id="acme") == []


@pytest.mark.slow
def test_tenant_search_returns_k_distinct_chunks_under_a_selective_filter(
    make_store: StoreFactory,
) -> None:
    store = make_store(embedding_model=HashEmbedder(), **SMALL)
    small = store.create_session("tiny")
    fill(store, small, 200)
    for _ in range(6):
        fill(store, store.create_session("big"), 120)
    store.embed()
    hits = store.search("weather harbour laptop", tenant_id="tiny", k=8)
    assert len(hits) == 8
    assert len({h.chunk_seq for h in hits}) == 8
    assert all(h.session_id == small for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_time_bounds_and_vector_queries(make_store: StoreFactory) -> None:
    emb = HashEmbedder()
    store = make_store(embedding_model=emb, **SMALL)
    sid = store.create_session("acme")
    fill(store, sid, 80)
    store.embed()
    now = datetime.now(UTC)
    assert store.search("weather", tenant_id="acme", since=now + timedelta(hours=1)) == []
    assert store.search("weather", tenant_id="acme", until=now - timedelta(days=30)) == []
    assert store.search("weather", session_id=sid, since=now - timedelta(hours=1))
    by_text = store.search("rye bread", tenant_id="acme", k=3)
    by_vector = store.search(emb.embed(["rye bread"])[0], tenant_id="acme", k=3)
    assert [(h.chunk_seq, round(h.score, 4)) for h in by_text] == [
        (h.chunk_seq, round(h.score, 4)) for h in by_vector
    ]


def test_bad_search_arguments_are_refused(make_store: StoreFactory) -> None:
    store = make_store(embedding_model=HashEmbedder())
    sid = store.create_session("acme")
    bad: list[dict[str, Any]] = [
        {},  # neither session nor tenant
        {"tenant_id": "acme", "k": 0},
        {"tenant_id": "acme", "k": 1001},
        {"tenant_id": "acme", "k": True},
        {"tenant_id": ""},
        {"tenant_id": "acme", "since": datetime(2026, 1, 1)},  # naive
        {"session_id": "not-a-uuid"},
    ]
    for kwargs in bad:
        with pytest.raises(shardstore.InvalidInput):
            store.search("x", **kwargs)
    for query_value in ["", "   ", [], [1.0, float("nan")], {"a": 1}, object()]:
        with pytest.raises(shardstore.InvalidInput):
            store.search(query_value, session_id=sid)  # type: ignore[arg-type]
    store.embed()  # nothing queued: loads and records nothing; the store's model has 256
    with pytest.raises(shardstore.InvalidInput, match="dimensions"):
        store.search([0.1] * 3, session_id=sid)


@pytest.mark.slow
def test_another_model_is_refused_until_reembed(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(embedding_model=HashEmbedder(dimension=64, name="test/model-a"), **SMALL)
    sid = store.create_session("acme")
    fill(store, sid, 60)
    chunks = store.embed()
    with pytest.raises(shardstore.EmbeddingModelMismatch, match="shardstore reembed"):
        make_store(embedding_model=HashEmbedder(dimension=32, name="test/model-b"))
    with pytest.raises(shardstore.EmbeddingModelMismatch, match="reembed"):
        make_store(embedding_model="all-MiniLM-L6-v2")  # known 384 dims, another name
    # the same model under another path is the same model
    make_store(embedding_model=HashEmbedder(dimension=64, name="/models/model-a"))
    # a store opened without a model uses the recorded one for vector queries
    plain = make_store()
    assert plain.search([1.0] + [0.0] * 63, session_id=sid, k=1)  # model-a: 64 dimensions
    assert plain.reembed(HashEmbedder(dimension=32, name="test/model-b")) == chunks
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT model, dimension FROM shardstore.embedding_config").fetchone()
        assert row == ("test/model-b", 32)
        dims = conn.execute(
            "SELECT DISTINCT vector_dims(embedding::vector) FROM shardstore.chunk_vectors"
        ).fetchall()
        assert dims == [(32,)]


def test_search_without_sentence_transformers_says_what_to_install(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails
    store = make_store(embedding_model="all-MiniLM-L6-v2")
    sid = store.create_session("acme")
    assert store.embed() == 0  # nothing to embed yet: the model is not needed
    store.append_turn(sid, {"role": "user", "content": "hello"})  # everything else works
    assert store.tail(sid)[0].message["content"] == "hello"
    with pytest.raises(
        shardstore.MissingDependency, match=r"pip install 'shardstore\[embeddings\]'"
    ):
        store.search("hello", session_id=sid)
    with pytest.raises(shardstore.MissingDependency):
        store.embed()  # the buffered turn waits for the model
    report = store.maintain(flush_idle=timedelta(0))  # folds the turn: one chunk queued
    assert report.healthy and report.chunks_embedded is None
    assert report.embedding_skipped and "pip install" in report.embedding_skipped
    assert report.embedding_backlog == 1
    with pytest.raises(shardstore.MissingDependency):
        store.embed()


@pytest.mark.slow
def test_maintain_folds_idle_sessions_and_embeds_them(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(embedding_model=HashEmbedder(), **SMALL)
    sid = store.create_session("acme")
    store.append_turns(sid, [filler(i) for i in range(5)])  # buffered only
    report = store.maintain(flush_idle=timedelta(0))
    assert report.chunks_embedded is not None and report.chunks_embedded >= 1
    assert store.search("weather harbour", session_id=sid, k=1)
    assert counts(dsn)[2] == 0
    assert make_store().maintain(embed=False).chunks_embedded is None


@pytest.mark.slow
def test_purges_remove_vectors(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(embedding_model=HashEmbedder(), **SMALL)
    gone = store.create_session("acme", subject_id="user:1")
    kept = store.create_session("acme", subject_id="user:2")
    cut = store.create_session("acme", subject_id="user:3")
    for sid in (gone, kept, cut):
        fill(store, sid, 80)
    store.append_turn(cut, {"role": "user", "content": "zebra xylophone quartz early"})
    fill(store, cut, 80, start=200)
    store.embed()
    store.purge_session(gone)
    with psycopg.connect(dsn) as conn:
        for table in ("chunk_vectors", "embed_queue"):
            n = conn.execute(
                f"SELECT count(*) FROM shardstore.{table} WHERE session_id = %s", (gone,)
            ).fetchone()
            assert n == (0,)
    assert store.search("weather", session_id=kept)
    # a range purge drops the vectors of the purged turns; the cut chunk is embedded again
    store.purge_range(cut, before_turn_seq=81)
    store.embed()
    hits = store.search("zebra xylophone quartz", session_id=cut, k=20)
    assert all(t.turn_seq >= 81 for h in hits for t in h.turns)
    with psycopg.connect(dsn) as conn:
        low = conn.execute(
            "SELECT count(*) FROM shardstore.chunk_vectors"
            " WHERE session_id = %s AND first_turn_seq < 81",
            (cut,),
        ).fetchone()
        assert low == (0,)


def test_async_embed_and_search(dsn: str) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn, embedding_model=HashEmbedder(), **SMALL)
        try:
            sid = await store.create_session("acme")
            await store.append_turns(sid, [filler(i) for i in range(60)])
            await store.flush(sid)
            await store.drain_folds()
            assert await store.embed() > 0
            hits = await store.search("rye bread caraway", tenant_id="acme", k=2)
            assert len(hits) == 2 and all(h.session_id == sid for h in hits)
            assert "rye" in str(hits[0].turns)
        finally:
            await store.close()

    asyncio.run(main())
