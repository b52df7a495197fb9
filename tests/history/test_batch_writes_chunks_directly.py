"""A batch writes the chunks it starts and seals straight into agent_history (append_v1,
docs/architecture.md "Disk"): what is stored afterwards is what the turn-by-turn path
stores once its folds ran (chunks, chunk map, queues, text index, keys, buffer), and only
the open chunk's turns touch turn_buffer."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import shardstore
import shardstore.history

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


def _messages(n: int, seed: int = 0) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        words = " ".join(WORDS[(i * 7 + j + seed) % len(WORDS)] for j in range(5 + i % 13))
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": f"turn {i} {words} zz{i}q"})
    return out


def _stored(dsn: str, sid: Any) -> dict[str, Any]:
    """Everything stored for a session, times left out (the two paths run at other times)."""
    with psycopg.connect(dsn) as c:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in c.execute(sql, (sid,)).fetchall()]

        chunks = rows(
            "SELECT chunk_seq, first_turn_seq, turn_count, token_count, byte_count, tenant_id,"
            " (SELECT jsonb_agg(e - 'at' ORDER BY (e->>'s')::bigint)"
            "    FROM jsonb_array_elements(conversation_chunk) e),"
            " chunk_start = (conversation_chunk->0->>'at')::timestamptz,"
            " chunk_end = (conversation_chunk->-1->>'at')::timestamptz"
            " FROM shardstore.agent_history WHERE session_id = %s ORDER BY chunk_seq"
        )
        return {
            "chunks": chunks,
            "chunk_map": rows(
                "SELECT m.chunk_seq, m.first_turn_seq, m.tenant_id,"
                " m.chunk_start = h.chunk_start FROM shardstore.chunk_map m"
                " JOIN shardstore.agent_history h USING (session_id, chunk_seq)"
                " WHERE m.session_id = %s ORDER BY 1"
            ),
            "embed_queue": rows(
                "SELECT chunk_seq, tenant_id FROM shardstore.embed_queue"
                " WHERE session_id = %s ORDER BY 1"
            ),
            "summary_queue": rows(
                "SELECT chunk_seq, tenant_id FROM shardstore.summary_queue"
                " WHERE session_id = %s ORDER BY 1"
            ),
            "turn_text": rows(
                "SELECT turn_seq, window_no, chunk_seq, tenant_id, agent_id, tsv::text"
                " FROM shardstore.turn_text WHERE session_id = %s ORDER BY 1, 2"
            ),
            "turn_buffer": rows(
                "SELECT turn_seq, chunk_seq, tokens, bytes, idempotency_key, message::text,"
                " tenant_id FROM shardstore.turn_buffer WHERE session_id = %s ORDER BY 1"
            ),
            "turn_keys": rows(
                "SELECT idempotency_key, turn_seq, chunk_seq, tokens, tenant_id"
                " FROM shardstore.turn_keys WHERE session_id = %s ORDER BY 2"
            ),
            "head": rows(
                "SELECT next_turn_seq, open_chunk_seq, open_turns, open_tokens, open_bytes"
                " FROM shardstore.sessions WHERE session_id = %s"
            ),
        }


@pytest.mark.parametrize("prefix", ["none", "buffered", "flushed"])
def test_a_batch_is_stored_as_the_turn_by_turn_path_stores_it(dsn: str, prefix: str) -> None:
    """Sealed chunks of a 90-turn batch (chunk budget ~200 tokens, so many chunks; keys
    on every third turn): the same chunks, envelopes, chunk map, embedding and summary
    queue rows, text windows, keys, buffer rows and head as 90 single appends, folded."""
    store = shardstore.connect(dsn, chunk_tokens=240)
    try:
        msgs = _messages(90)
        keys = [f"k{i}" if i % 3 == 0 else None for i in range(90)]
        head = 0 if prefix == "none" else 4
        sids = []
        for batched in (True, False):
            sid = store.create_session("tenant-a", "subject", "agent-x")
            for i in range(head):
                store.append_turn(sid, msgs[i], keys[i])
            if prefix == "flushed":
                assert store.flush(sid) == head
            if batched:
                store.append_turns(sid, msgs[head:], keys[head:])
            else:
                for i in range(head, 90):
                    store.append_turn(sid, msgs[i], keys[i])
            sids.append(sid)
        store.drain_folds()
        for sid in sids:  # what the folds kept in the buffer (the keep rule) folded too
            store._run(shardstore.history.ops.fold_sealed_op(sid, 0))
        batched_rows, single_rows = (_stored(dsn, s) for s in sids)
        assert len(batched_rows["chunks"]) > 5  # the batch sealed many chunks
        assert batched_rows == single_rows
        assert [t.message for t in store.history(sids[0])] == msgs
        assert all(row[-2] and row[-1] for row in batched_rows["chunks"])
    finally:
        store.close()


def _kept_from(chunks: list[int], keep: int) -> int:
    """The model of the keep window (decisions 0006, 0020): given each turn's chunk, oldest
    first, the first chunk that stays buffered. Going down from the newest sealed chunk, one is kept
    while the turns newer than it (the open chunk's first) number fewer than ``keep``."""
    open_chunk = chunks[-1]
    newer = chunks.count(open_chunk)
    upto = open_chunk
    for c in sorted({c for c in chunks if c < open_chunk}, reverse=True):
        if newer >= keep:
            break
        upto = c
        newer += chunks.count(c)
    return upto


def _buffered(dsn: str, sid: Any) -> list[tuple[int, int]]:
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT turn_seq, chunk_seq FROM shardstore.turn_buffer WHERE session_id = %s"
            " ORDER BY turn_seq",
            (sid,),
        ).fetchall()
    return [(int(a), int(b)) for a, b in rows]


@pytest.mark.parametrize("keep", [1, 20, 45])
def test_a_batch_buffers_the_open_chunk_and_the_chunks_a_tail_reads(dsn: str, keep: int) -> None:
    """In the batch's own transaction: turn_buffer gets exactly the turns of the open chunk
    and of the sealed chunks holding the newest ``default_tail_turns`` turns (the keep window
    a fold leaves), and loses none; agent_history gets one row per other chunk."""
    with psycopg.connect(dsn) as conn:
        store = shardstore.connect(
            conn, chunk_tokens=240, background_fold=False, default_tail_turns=keep
        )
        sid = store.create_session("tenant-a", "subject", "agent-x")
        conn.commit()
        with conn.transaction():
            results = store.append_turns(sid, _messages(120))
            stats = {
                name: (ins, dele)
                for name, ins, dele in conn.execute(
                    "SELECT relname, n_tup_ins, n_tup_del FROM pg_stat_xact_user_tables"
                    " WHERE schemaname = 'shardstore'"
                    " AND (relname = 'turn_buffer' OR relname LIKE 'agent_history_p%%')"
                ).fetchall()
            }
            (moved,) = conn.execute(
                "SELECT shardstore.fold_sealed_v2(%s, %s)", (sid, keep)
            ).fetchone() or (None,)
        chunks = [r.chunk_seq for r in results]
        upto = _kept_from(chunks, keep)
        in_window = sum(1 for c in chunks if c >= upto)
        assert chunks[-1] > 3 and upto > 0
        assert in_window >= min(keep, 120)
        assert stats["turn_buffer"] == (in_window, 0)
        assert sum(ins for n, (ins, _) in stats.items() if n != "turn_buffer") == upto
        assert moved == 0  # the fold after the batch finds nothing outside its window
        assert _buffered(dsn, sid) == [(r.turn_seq, r.chunk_seq) for r in results[-in_window:]]
        store.close()


def test_a_tail_after_batches_reads_buffer_rows_and_kept_chunks_are_folded_later(
    dsn: str,
) -> None:
    """With the background folder and default settings: after each of three batches of 100
    turns the newest 20 turns are buffer rows, the buffer holds no sealed chunk outside the
    window (an earlier batch's kept chunks were folded), and the history reads back whole."""
    store = shardstore.connect(dsn, chunk_tokens=600)
    try:
        sid = store.create_session("tenant-a", "subject", "agent-x")
        msgs = _messages(300)
        for b in range(3):
            results = store.append_turns(sid, msgs[b * 100 : (b + 1) * 100])
            store.drain_folds()
            chunks = [r.chunk_seq for r in results]
            upto = _kept_from(chunks, 20)
            assert chunks[-1] - chunks[0] >= 3 and upto > chunks[0]  # many chunks sealed
            buffered = _buffered(dsn, sid)
            assert [t for t, _ in buffered][-20:] == [r.turn_seq for r in results[-20:]]
            assert min(c for _, c in buffered) == upto
            newest = msgs[(b + 1) * 100 - 20 : (b + 1) * 100]
            assert [t.message for t in store.tail(sid, n=20)] == newest
        assert [t.message for t in store.history(sid)] == msgs
        assert store.flush(sid) > 0 and _buffered(dsn, sid) == []
        assert [t.message for t in store.history(sid)] == msgs
    finally:
        store.close()


def test_a_rolled_back_batch_leaves_nothing(dsn: str) -> None:
    """The direct chunks, their queue rows and text windows roll back with the batch."""
    with psycopg.connect(dsn) as conn:
        store = shardstore.connect(conn, chunk_tokens=240, background_fold=False)
        sid = store.create_session("tenant-a", "subject", "agent-x")
        conn.commit()
        before = _stored(dsn, sid)
        with pytest.raises(RuntimeError), conn.transaction():
            store.append_turns(sid, _messages(60))
            raise RuntimeError("the application fails after the append")
        assert _stored(dsn, sid) == before
        assert before["chunks"] == [] and before["turn_text"] == []
        store.close()


def test_keys_of_direct_chunks_are_recognised(dsn: str) -> None:
    """A key inside a chunk written straight to agent_history is known afterwards: a retry
    of the whole batch is all duplicates with the first results and stores nothing; a key
    repeated inside one batch is a duplicate of its first turn there."""
    store_small = shardstore.connect(dsn, chunk_tokens=240)
    try:
        sid = store_small.create_session("tenant-a", "subject", "agent-x")
        msgs = _messages(50)
        keys = [f"key-{i}" for i in range(50)]
        first = store_small.append_turns(sid, msgs, keys)
        store_small.drain_folds()
        before = _stored(dsn, sid)
        again = store_small.append_turns(sid, msgs, keys)
        assert [r.duplicate for r in again] == [True] * 50
        assert [(r.turn_seq, r.chunk_seq, r.tokens) for r in again] == [
            (r.turn_seq, r.chunk_seq, r.tokens) for r in first
        ]
        assert _stored(dsn, sid) == before
        sid2 = store_small.create_session("tenant-a", "subject", "agent-x")
        twice = store_small.append_turns(sid2, [*msgs[:30], msgs[0]], [*keys[:30], keys[0]])
        assert twice[-1].duplicate and twice[-1].turn_seq == twice[0].turn_seq
        assert len(list(store_small.history(sid2))) == 30
    finally:
        store_small.close()


def test_text_search_finds_turns_of_direct_chunks(dsn: str) -> None:
    """A word only in an early turn of a big batch (its chunk written straight to
    agent_history) is found by text search, at its turn."""
    store = shardstore.connect(dsn, chunk_tokens=240)
    try:
        sid = store.create_session("tenant-a", "subject", "agent-x")
        results = store.append_turns(sid, _messages(80))
        assert results[3].chunk_seq < results[-1].chunk_seq
        hits = store.search("zz3q", session_id=sid, mode="text", k=3)
        assert hits and hits[0].chunk_seq == results[3].chunk_seq
        assert 3 in [t.turn_seq for t in hits[0].turns]
    finally:
        store.close()


def test_stored_text_windows_are_sorted_lexeme_hashes(store: shardstore.Store, dsn: str) -> None:
    """turn_text holds each window's lexemes as their sorted, distinct hashtext() values
    (decision 0012): the ranking reads only which lexemes a window holds
    and how many. Each turn's window is the lexemes of its strings in document order."""
    sid = store.create_session("tenant-a", "subject", "agent-x")
    sent = _messages(5)
    store.append_turns(sid, sent)
    store.flush(sid)
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT turn_seq, tsv FROM shardstore.turn_text WHERE session_id = %s"
            " ORDER BY turn_seq",
            (sid,),
        ).fetchall()
        assert [r[0] for r in rows] == list(range(5))
        for (seq, hashes), message in zip(rows, sent, strict=True):
            text = f"{message['role']} {message['content']}"
            (want,) = c.execute(
                "SELECT array(SELECT DISTINCT hashtext(l)"
                "  FROM unnest(tsvector_to_array(to_tsvector('english', %s))) AS l ORDER BY 1)",
                (text,),
            ).fetchone()
            assert hashes == want and hashes == sorted(set(hashes)) and len(hashes) > 3, seq
