"""Reads give the same answer whatever the fold state: sealed chunks still in the buffer,
a chunk flushed while open and then sealed, or everything folded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import shardstore
import shardstore.history


def _snapshot(store: shardstore.Store, sid: Any) -> tuple[Any, ...]:
    return (
        [(t.turn_seq, t.chunk_seq, t.tokens, t.message) for t in store.history(sid)],
        [(t.turn_seq, t.message) for t in store.tail(sid, n=30)],
        [(t.turn_seq, t.message) for t in store.tail(sid, max_tokens=150)],
        [(t.turn_seq,) for t in store.history(sid, from_seq=7, to_seq=31)],
        [
            (c.chunk_seq, c.first_turn_seq, c.turn_count, c.token_count, c.byte_count, c.is_open)
            for c in store.chunks(sid)
        ],
        [c.chunk_seq for c in store.chunks(sid, last=3)],
    )


def _buffered_chunks(dsn: str, sid: Any) -> set[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT DISTINCT chunk_seq FROM shardstore.turn_buffer WHERE session_id = %s", (sid,)
        ).fetchall()
    return {r[0] for r in rows}


class _NeverFold:
    """Stands in for the store's background folder: takes sealed sessions, folds none."""

    text_search = True  # as a folder whose last pass found text search on

    def submit(self, session_id: object) -> None:
        pass

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_reads_agree_before_and_after_folding(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=120)
    store.background_folder = _NeverFold()  # sealed chunks are handed to a folder that never folds
    sid = store.create_session("acme")
    for i in range(12):
        store.append_turn(sid, {"role": "user", "content": f"first part {i}"})
    store.flush(sid)  # folds what is sealed and the open chunk's turns so far
    for i in range(30):
        store.append_turn(sid, {"role": "assistant", "content": f"second part {i} " * (i % 4)})
    buffered = _buffered_chunks(dsn, sid)
    open_seq = store.chunks(sid)[-1].chunk_seq
    assert len(buffered - {open_seq}) >= 2, "sealed chunks must be waiting in the buffer"
    before = _snapshot(store, sid)

    store._run(shardstore.history.ops.fold_sealed_op(sid))
    assert _buffered_chunks(dsn, sid) == {open_seq}
    assert _snapshot(store, sid) == before

    store.flush(sid)
    assert _buffered_chunks(dsn, sid) == set()
    assert _snapshot(store, sid) == before
    assert [t.turn_seq for t in store.history(sid)] == list(range(42))


def test_background_folds_leave_only_the_newest_tail_in_the_buffer(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    # chunks of a few turns each: the open one and the sealed ones holding any of the newest
    # default_tail_turns turns stay buffered (the keep rule); every older chunk is folded
    store = make_store(chunk_tokens=100, default_tail_turns=5)
    sid = store.create_session("acme")
    for i in range(50):
        store.append_turn(sid, {"role": "user", "content": f"turn {i}"})
    store.drain_folds()
    chunks = store.chunks(sid)
    assert len(chunks) > 6
    kept, newer = set(), 0
    for c in reversed(chunks):
        if c.is_open or newer < 5:
            kept.add(c.chunk_seq)
        newer += c.turn_count
    assert _buffered_chunks(dsn, sid) == kept
    assert len(kept) < len(chunks)
    assert sum(c.turn_count for c in store.chunks(sid)) == 50
    store.flush(sid)
    assert _buffered_chunks(dsn, sid) == set()


@pytest.mark.slow
def test_history_across_many_batches_of_chunks(
    make_store: Callable[..., shardstore.Store],
) -> None:
    store = make_store(chunk_tokens=60)
    sid = store.create_session("acme")
    messages = [{"role": "user", "content": f"turn {i} " + "x " * (i % 7)} for i in range(300)]
    store.append_turns(sid, messages[:150])
    store.flush(sid)
    for m in messages[150:]:
        store.append_turn(sid, m)
    store.drain_folds()
    assert len(store.chunks(sid)) > 3 * shardstore.history.ops.HISTORY_BATCH
    assert [t.message for t in store.history(sid)] == messages
    assert [t.turn_seq for t in store.history(sid, from_seq=77, to_seq=251)] == list(range(77, 251))
