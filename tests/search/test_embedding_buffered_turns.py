"""Buffered turns are embedded and searchable (issue 14): a turn still in the write buffer
(the open chunk, sealed chunks not folded yet) is embedded by ``embed()`` / ``maintain``,
found by session and tenant search, not embedded again when its chunk is folded or
flushed, and its vectors go with every erasure (rewind, range purge, GDPR purges,
retention). A hypothesis test holds the store to an in-memory model of which turns are
searchable; a crash test kills the embedding process mid-pass."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.search.embedding import message_text, plan_windows
from tests.embedders import HashEmbedder

StoreFactory = Callable[..., shardstore.Store]
SMALL = {"chunk_tokens": 300}
ROOT = Path(__file__).resolve().parents[2]


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


def words(tag: str, n: int = 4) -> str:
    """A text of n words no other turn shares (so its exact search is unambiguous)."""
    return " ".join(f"{tag}x{i}" for i in range(n))


def found(store: shardstore.Store, sid: uuid.UUID, message: dict[str, Any]) -> set[int]:
    """turn_seqs of the session search hits' turns whose message is ``message``, for the
    message's own text as the query."""
    hits = store.search(message_text(message), session_id=sid, k=100)
    return {t.turn_seq for h in hits for t in h.turns if t.message == message}


def windows_of(embedder: HashEmbedder, messages: list[dict[str, Any]]) -> int:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    turns = [(i, at, message_text(m)) for i, m in enumerate(messages)]
    return len(plan_windows(turns, embedder.window_tokens, embedder.token_counts, embedder.split))


def vector_rows(dsn: str, sid: uuid.UUID | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT session_id, chunk_seq, chunk_start, first_turn_seq, window_no"
            "  FROM shardstore.chunk_vectors WHERE %s::uuid IS NULL OR session_id = %s"
            " ORDER BY 1, 2, 4, 5",
            (sid, sid),
        ).fetchall()


def orphans(dsn: str) -> list[tuple[Any, ...]]:
    """Vector rows whose turn is neither in its chunk (folded) nor buffered in that chunk."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            """
            SELECT v.session_id, v.chunk_seq, v.chunk_start, v.first_turn_seq
              FROM shardstore.chunk_vectors v
             WHERE NOT EXISTS (SELECT 1 FROM shardstore.agent_history h,
                                      jsonb_array_elements(h.conversation_chunk) e
                                WHERE h.session_id = v.session_id AND h.chunk_seq = v.chunk_seq
                                  AND h.chunk_start = v.chunk_start
                                  AND (e->>'s')::bigint = v.first_turn_seq)
               AND NOT EXISTS (SELECT 1 FROM shardstore.turn_buffer b
                                WHERE b.session_id = v.session_id AND b.chunk_seq = v.chunk_seq
                                  AND b.turn_seq = v.first_turn_seq)
            """
        ).fetchall()


def duplicates(dsn: str) -> list[tuple[Any, ...]]:
    """Turns with windows under two chunk keys (a buffered turn stored under one start and
    embedded again under its fold's). Copies within one key show in the row totals."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            """
            SELECT session_id, first_turn_seq, count(DISTINCT (chunk_seq, chunk_start))
              FROM shardstore.chunk_vectors GROUP BY 1, 2
            HAVING count(DISTINCT (chunk_seq, chunk_start)) > 1
            """
        ).fetchall()


# ------------------------------------------------------------------ behaviour


def test_a_fresh_three_turn_session_is_found_after_embed(make_store: StoreFactory) -> None:
    store = make_store(embedding_model=HashEmbedder())
    sid = store.create_session("acme")
    messages = [msg(words(f"fresh{i}")) for i in range(3)]
    store.append_turns(sid, messages)
    assert store.embed() == 1  # one unit: the open chunk's buffered turns
    for seq, m in enumerate(messages):
        assert found(store, sid, m) == {seq}
    hits = store.search(message_text(messages[1]), tenant_id="acme", k=1)
    assert [t.turn_seq for t in hits[0].turns][-1] == 1
    assert hits[0].session_id == sid and hits[0].score > 0.99
    assert store.search(message_text(messages[1]), tenant_id="other", k=5) == []


@pytest.mark.slow
def test_fold_and_flush_never_embed_a_turn_again(make_store: StoreFactory, dsn: str) -> None:
    embedder = HashEmbedder(window_tokens=8)
    store = make_store(embedding_model=embedder, **SMALL)
    sid = store.create_session("acme")
    # short turns and long ones (several windows each)
    messages = [msg(words(f"t{i}", 3 if i % 3 else 20)) for i in range(30)]
    expected = 0
    for part in (messages[:4], messages[4:12], messages[12:]):
        store.append_turns(sid, part)
        store.embed()
        expected += windows_of(embedder, part)
        assert embedder.texts_embedded == expected
    store.flush(sid)
    store.drain_folds()
    assert store.embed() > 0  # the folds queued their chunks: taken, nothing to embed
    assert embedder.texts_embedded == expected  # each window exactly once overall
    assert len(vector_rows(dsn, sid)) == expected
    assert orphans(dsn) == [] and duplicates(dsn) == []
    for seq in (0, 5, 13, 29):
        assert found(store, sid, messages[seq]) == {seq}


@pytest.mark.slow
def test_a_sealed_unfolded_chunk_is_embedded_under_its_fold_start(
    make_store: StoreFactory, dsn: str
) -> None:
    embedder = HashEmbedder()
    store = make_store(embedding_model=embedder, **SMALL)
    sid = store.create_session("acme")
    messages = [msg(words(f"s{i}", 30)) for i in range(40)]
    # append_v2 as the client calls it, one turn per call, with no fold after it (a writer
    # that died before folding): the sealed chunks stay in the buffer (a batch that starts
    # and seals a chunk writes it straight to agent_history since the disk migration, so
    # one call per turn is what leaves sealed chunks buffered)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for m in messages:
            conn.execute(
                "SELECT count(*) FROM shardstore.append_v2(%s, %s::jsonb, %s, %s, %s, 250,"
                " 16777216, (SELECT partition_interval FROM shardstore.config),"
                " (SELECT partition_origin FROM shardstore.config), 0)",
                (sid, json.dumps([m]), [40], [len(json.dumps(m))], [None]),
            )
        sealed = conn.execute(
            "SELECT count(DISTINCT b.chunk_seq) FROM shardstore.turn_buffer b"
            " JOIN shardstore.sessions s USING (session_id) WHERE b.chunk_seq < s.open_chunk_seq"
        ).fetchone()
    assert sealed is not None and sealed[0] >= 2
    store.embed()
    before = embedder.texts_embedded
    store.flush(sid)
    assert store.embed() >= sealed[0]
    assert embedder.texts_embedded == before
    assert orphans(dsn) == [] and duplicates(dsn) == []
    assert found(store, sid, messages[0]) == {0} and found(store, sid, messages[39]) == {39}


def test_a_range_purge_before_the_fold_keeps_embedded_turns_searchable(
    make_store: StoreFactory,
) -> None:
    """Turns embedded in the buffer carry the start their chunk was expected to fold with
    (the first buffered turn's time); a range purge of that first turn makes the fold take
    the next turn's time. The hits still find the turns before any other embed pass (a
    hypothesis example found none), and the next pass embeds nothing again."""
    embedder = HashEmbedder(window_tokens=8)
    store = make_store(embedding_model=embedder, chunk_tokens=200)
    sid = store.create_session("acme")
    live = [msg(words(f"early{i}", 3)) for i in range(3)]
    for m in live:
        store.append_turns(sid, [m])
    store.embed()
    store.purge_range(sid, before_turn_seq=1)
    store.append_turns(sid, [msg(words(f"long{i}", 20)) for i in range(2)])  # seals chunk 0
    store.drain_folds()
    assert store.chunks(sid)[0].first_turn_seq == 1  # folded, under turn 1's time
    for seq in (1, 2):
        assert found(store, sid, live[seq]) == {seq}
    before = embedder.texts_embedded  # (searches embed their queries too)
    store.embed()  # the two new turns only: turns 1 and 2 are not embedded again
    assert embedder.texts_embedded - before == 2 * windows_of(embedder, [msg(words("x", 20))])
    for seq in (1, 2):
        assert found(store, sid, live[seq]) == {seq}


@pytest.mark.slow
def test_erasures_remove_buffered_vectors(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(embedding_model=HashEmbedder(), **SMALL)
    a = store.create_session("acme", subject_id="alice")
    b = store.create_session("acme", subject_id="bob")
    c = store.create_session("beta")
    ma = [msg(words(f"a{i}")) for i in range(6)]
    mb = [msg(words(f"b{i}")) for i in range(3)]
    mc = [msg(words(f"c{i}")) for i in range(3)]
    store.append_turns(a, ma)
    store.append_turns(b, mb)
    store.append_turns(c, mc)
    store.embed()
    assert all(found(store, a, m) == {i} for i, m in enumerate(ma))
    store.rewind(a, 4)  # turns 4, 5 gone (buffered)
    store.purge_range(a, before_turn_seq=2)  # turns 0, 1 gone (buffered)
    store.embed()  # re-marks the session; nothing to embed
    for i in (0, 1, 4, 5):
        assert found(store, a, ma[i]) == set()
        hits = store.search(message_text(ma[i]), tenant_id="acme", k=20)
        assert all(t.message != ma[i] for h in hits for t in h.turns)
    assert found(store, a, ma[2]) == {2} and found(store, a, ma[3]) == {3}
    assert {r[3] for r in vector_rows(dsn, a)} == {2, 3}
    # a new turn 4 after the rewind is embedded (the watermark went with the rewind)
    new4 = msg(words("anew4"))
    store.append_turn(a, new4)
    store.embed()
    assert found(store, a, new4) == {4}
    store.purge_subject("acme", "bob")
    assert vector_rows(dsn, b) == []
    store.purge_tenant("beta")
    assert vector_rows(dsn, c) == []
    store.purge_session(a)
    assert vector_rows(dsn) == []
    with psycopg.connect(dsn) as conn:
        marks = conn.execute("SELECT count(*) FROM shardstore.embed_marks").fetchone()
    assert marks == (0,)


@pytest.mark.slow
def test_retention_removes_buffered_vectors(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(embedding_model=HashEmbedder())
    sid = store.create_session("acme")
    old = [msg(words(f"old{i}")) for i in range(3)]
    store.append_turns(sid, old)
    time.sleep(0.05)
    cut = datetime.now(UTC)
    time.sleep(0.05)
    new = [msg(words(f"new{i}")) for i in range(2)]
    store.append_turns(sid, new)
    store.embed()
    store.purge_before(cut)
    for m in old:
        assert found(store, sid, m) == set()
    assert found(store, sid, new[0]) == {3} and found(store, sid, new[1]) == {4}
    assert {r[3] for r in vector_rows(dsn, sid)} == {3, 4}
    assert orphans(dsn) == []


@pytest.mark.slow
def test_reembed_embeds_buffered_turns_again(make_store: StoreFactory, dsn: str) -> None:
    first = HashEmbedder()
    store = make_store(embedding_model=first)
    sid = store.create_session("acme")
    messages = [msg(words(f"r{i}")) for i in range(3)]
    store.append_turns(sid, messages)
    store.embed()
    second = HashEmbedder(dimension=128, name="test/hash-words-128")
    store.reembed(second)
    assert second.texts_embedded == 3
    assert len(vector_rows(dsn, sid)) == 3
    assert found(store, sid, messages[2]) == {2}


@pytest.mark.slow
def test_a_fork_finds_its_parents_buffered_turns(make_store: StoreFactory) -> None:
    store = make_store(embedding_model=HashEmbedder())
    parent = store.create_session("acme")
    messages = [msg(words(f"f{i}")) for i in range(4)]
    store.append_turns(parent, messages)
    child = store.fork(parent, at_turn_seq=1)
    store.embed()
    assert found(store, child, messages[1]) == {1}
    assert found(store, child, messages[3]) == set()  # past the fork point
    store.rewind(parent, 0)  # copy-on-write: the child keeps turns 0..1 and their search
    store.embed()
    assert found(store, child, messages[0]) == {0}
    assert found(store, parent, messages[0]) == set()


@pytest.mark.slow
def test_async_store_embeds_and_finds_buffered_turns(dsn: str) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn, embedding_model=HashEmbedder())
        try:
            sid = await store.create_session("acme")
            messages = [msg(words(f"as{i}")) for i in range(3)]
            await store.append_turns(sid, messages)
            assert await store.embed() == 1
            hits = await store.search(message_text(messages[2]), session_id=sid, k=1)
            assert hits and hits[0].turns[-1].turn_seq == 2
            await store.flush(sid)
            assert await store.embed() == 1  # the folded chunk: nothing to embed again
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    "kwargs",
    [{"session_id": "not-a-uuid"}, {"batch_size": 0}, {"limit": -1}, {"session_id": 7}],
)
def test_hostile_embed_arguments_write_nothing(
    make_store: StoreFactory, dsn: str, kwargs: dict[str, Any]
) -> None:
    store = make_store(embedding_model=HashEmbedder())
    sid = store.create_session("acme")
    store.append_turns(sid, [msg("hello there")])
    with pytest.raises(shardstore.InvalidInput):
        store.embed(**kwargs)
    assert vector_rows(dsn) == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM shardstore.embed_marks").fetchone() == (0,)


# ------------------------------------------------------------------ model


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5), st.booleans()),
        st.tuples(st.just("embed"), st.just(0), st.just(False)),
        st.tuples(st.just("flush"), st.just(0), st.just(False)),
        st.tuples(st.just("rewind"), st.integers(0, 40), st.just(False)),
        st.tuples(st.just("purge_range"), st.integers(0, 40), st.just(False)),
    ),
    min_size=1,
    max_size=14,
)


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=ops)
def test_searchable_turns_follow_the_model(
    new_database: Callable[[], str], steps: list[Any]
) -> None:
    """Every live turn appended before the last embed() is found by an exact session
    search with its own text; no erased turn is ever found; each window is embedded once."""
    dsn = new_database()
    embedder = HashEmbedder(window_tokens=8)
    store = shardstore.connect(dsn, embedding_model=embedder, chunk_tokens=200)
    try:
        sid = store.create_session("acme")
        live: list[dict[str, Any]] = []  # turn_seq -> message (the model of the session)
        first = 0  # turns below were range-purged
        embedded: set[str] = set()  # texts whose windows were embedded
        erased: list[dict[str, Any]] = []
        searchable: set[int] = set()
        expected_windows = 0
        serial = 0
        passes = 0  # texts the embedding passes sent to the model
        for op, n, long in steps:
            if op == "append":
                batch = []
                for _ in range(n):
                    serial += 1
                    batch.append(msg(words(f"m{serial}", 20 if long else 3)))
                store.append_turns(sid, batch)
                live.extend(batch)
            elif op == "embed":
                before = embedder.texts_embedded  # (searches embed their queries too)
                store.embed()
                passes += embedder.texts_embedded - before
                for seq in range(first, len(live)):
                    text = live[seq]["content"]
                    if text not in embedded:
                        embedded.add(text)
                        expected_windows += windows_of(embedder, [live[seq]])
                searchable = set(range(first, len(live)))
            elif op == "flush":
                store.flush(sid)
                store.drain_folds()
            elif op == "rewind":
                to = max(first, min(n, len(live)))
                store.rewind(sid, to)
                erased.extend(live[to:])
                del live[to:]
                searchable = {s for s in searchable if s < to}
            else:
                cut = min(n, len(live))
                if cut > first:
                    store.purge_range(sid, before_turn_seq=cut)
                    erased.extend(live[first:cut])
                    first = cut
                    searchable = {s for s in searchable if s >= cut}
            for seq in sorted(searchable):
                assert found(store, sid, live[seq]) == {seq}, (op, seq)
            for m in erased[-3:]:
                assert found(store, sid, m) == set()
        before = embedder.texts_embedded
        store.embed()
        passes += embedder.texts_embedded - before
        for seq in range(first, len(live)):
            text = live[seq]["content"]
            if text not in embedded:
                embedded.add(text)
                expected_windows += windows_of(embedder, [live[seq]])
            assert found(store, sid, live[seq]) == {seq}
        for m in erased:
            assert found(store, sid, m) == set()
        assert passes == expected_windows
        assert orphans(dsn) == [] and duplicates(dsn) == []
    finally:
        store.close()


# ------------------------------------------------------------------ crash


WORKER = """
import sys, time
sys.path.insert(0, {root!r})
import shardstore
from tests.embedders import HashEmbedder

class Slow(HashEmbedder):
    def embed(self, texts):
        out = super().embed(texts)
        with open({marker!r}, "a") as f:
            f.write("x")
        if self.calls >= {stall}:
            time.sleep(600)  # killed here, mid-batch, model running
        return out

store = shardstore.connect({dsn!r}, embedding_model=Slow(window_tokens=8))
store.embed(batch_size=1)
"""


@pytest.mark.slow
def test_killed_embedding_pass_leaves_each_turn_embedded_once_after_the_next(
    make_store: StoreFactory, dsn: str, tmp_path: Path
) -> None:
    store = make_store(**SMALL)
    sessions = [store.create_session("acme") for _ in range(4)]
    messages: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for k, sid in enumerate(sessions):
        messages[sid] = [msg(words(f"k{k}t{i}", 3 if i % 2 else 12)) for i in range(12)]
        store.append_turns(sid, messages[sid])
    store.flush(sessions[0])  # one session folded (queue), the others buffered
    store.drain_folds()
    marker = tmp_path / "calls"
    script = WORKER.format(root=str(ROOT), marker=str(marker), stall=3, dsn=dsn)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not (marker.exists() and len(marker.read_text()) >= 3):
            assert proc.poll() is None, "the worker ended before it was killed"
            assert time.monotonic() < deadline, "the worker never reached its third batch"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    stored_before = len(vector_rows(dsn))
    assert stored_before > 0  # two batches committed before the kill
    embedder = HashEmbedder(window_tokens=8)
    after = make_store(embedding_model=embedder, **SMALL)
    # the dead worker's backend may still be finishing: the next pass takes everything left
    deadline = time.monotonic() + 60
    while True:
        after.embed()
        total = sum(windows_of(embedder, ms) for ms in messages.values())
        if len(vector_rows(dsn)) == total or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(vector_rows(dsn)) == total
    assert embedder.texts_embedded == total - stored_before  # the rest, once
    assert orphans(dsn) == [] and duplicates(dsn) == []
    for sid, ms in messages.items():
        for seq in (0, 11):
            assert found(after, sid, ms[seq]) == {seq}
