"""A fold after a seal leaves the session's newest ``default_tail_turns`` turns in the write
buffer (decision 0006), so that a default ``tail()`` of a session written one turn at a time
reads buffer rows only. The invariant, checked after every append against the buffer's rows:
every one of the newest ``keep`` turns is buffered, and no sealed chunk is buffered that the
rule does not need (the turns newer than it are fewer than ``keep``). Reads are the same
whatever is kept (tests/history/test_reads_across_fold_states.py holds them equal across
fold states)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
import shardstore.history


def _buffer(dsn: str, sid: Any) -> tuple[dict[int, set[int]], int, int]:
    """The buffer's turns by chunk, the session's next turn and open chunk."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT chunk_seq, turn_seq FROM shardstore.turn_buffer WHERE session_id = %s",
            (sid,),
        ).fetchall()
        head = conn.execute(
            "SELECT next_turn_seq, open_chunk_seq FROM shardstore.sessions WHERE session_id = %s",
            (sid,),
        ).fetchone()
    assert head is not None
    chunks: dict[int, set[int]] = {}
    for chunk_seq, turn_seq in rows:
        chunks.setdefault(chunk_seq, set()).add(turn_seq)
    return chunks, head[0], head[1]


def _check_keep(dsn: str, sid: Any, keep: int) -> None:
    chunks, next_turn, open_seq = _buffer(dsn, sid)
    buffered = set().union(*chunks.values()) if chunks else set()
    newest = set(range(max(0, next_turn - keep), next_turn))
    assert newest <= buffered, f"newest {sorted(newest - buffered)} not in the buffer"
    # a kept chunk was needed at the last seal: the sealed turns newer than it were fewer
    # than keep (turns the open chunk got since then fold it at the next seal)
    sealed = set().union(*(t for c, t in chunks.items() if c != open_seq)) if chunks else set()
    for chunk_seq, turns in chunks.items():
        if chunk_seq == open_seq:
            continue
        newer = sum(1 for t in sealed if t > max(turns))
        assert newer < keep, f"sealed chunk {chunk_seq} kept with {newer} newer sealed turns"


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=60),
    keep=st.integers(min_value=1, max_value=12),
)
def test_the_newest_turns_stay_buffered_after_every_append(
    dsn: str, sizes: list[int], keep: int
) -> None:
    with shardstore.connect(
        dsn, chunk_tokens=120, default_tail_turns=keep, background_fold=False
    ) as store:
        sid = store.create_session("acme")
        for i, size in enumerate(sizes):
            store.append_turn(sid, {"role": "user", "content": f"t{i} " + "word " * size})
            _check_keep(dsn, sid, keep)
        assert [t.turn_seq for t in store.history(sid)] == list(range(len(sizes)))
        assert [t.turn_seq for t in store.tail(sid)] == list(
            range(max(0, len(sizes) - keep), len(sizes))
        )


def _kept(conn: psycopg.Connection[Any], sid: Any) -> list[int]:
    """The chunks that have turns in the buffer."""
    rows = conn.execute(
        "SELECT DISTINCT chunk_seq FROM shardstore.turn_buffer WHERE session_id = %s ORDER BY 1",
        (sid,),
    ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.slow
def test_background_folds_keep_the_same_turns(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    """The background folder applies the inline fold's rule. A fold counts the turns the
    session has when it runs, the open chunk's included, so when it runs decides what it
    keeps: a background fold that runs after more turns arrived may fold one more chunk
    than the fold inside the sealing append did (both keep the newest turns). The folder
    also folds at its text passes (every TEXT_INDEX_EVERY turns), where the inline path
    does not. So a store whose folds are drained after every append is compared exactly,
    at every append, with inline folds at the same points; a store whose folds run freely
    must end between the two states a fold can leave: the lockstep store's (folds as soon
    as they are due) and a fold run after the last append."""
    keep = 20  # default_tail_turns
    every = shardstore.history.ops.TEXT_INDEX_EVERY
    inline = make_store(chunk_tokens=100, background_fold=False)
    lockstep = make_store(chunk_tokens=100)
    free = make_store(chunk_tokens=100)
    a, b, c = (s.create_session("acme") for s in (inline, lockstep, free))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(120):
            message = {"role": "user", "content": f"turn {i} " + "x " * (i % 9)}
            turn = inline.append_turn(a, message).turn_seq
            if every and turn % every == every - 1:
                # the fold of the background folder's text pass (a seal folded already)
                inline._run(shardstore.history.ops.fold_sealed_op(a, keep))
            lockstep.append_turn(b, message)
            lockstep.drain_folds()
            assert _kept(conn, a) == _kept(conn, b), f"after turn {i}"
            free.append_turn(c, message)
        free.drain_folds()
        assert lockstep.background_folder is not None and lockstep.background_folder.text_search
        _check_keep(dsn, c, keep)
        kept_free, kept_lockstep = set(_kept(conn, c)), set(_kept(conn, b))
        # the same rule applied after the last append: the least a fold can keep
        inline._run(shardstore.history.ops.fold_sealed_op(a, keep))
        kept_last = set(_kept(conn, a))
        assert kept_last <= kept_free <= kept_lockstep, (kept_last, kept_free, kept_lockstep)
        assert len(kept_free) < len(free.chunks(c))
        assert len(kept_lockstep) < len(lockstep.chunks(b))


def test_async_store_keeps_the_same_turns(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    sync = make_store(chunk_tokens=100, default_tail_turns=7)
    a = sync.create_session("acme")
    messages = [{"role": "user", "content": f"turn {i} " + "y " * (i % 5)} for i in range(90)]
    for m in messages:
        sync.append_turn(a, m)
    sync.drain_folds()

    async def main() -> Any:
        store = await shardstore.connect_async(dsn, chunk_tokens=100, default_tail_turns=7)
        try:
            sid = await store.create_session("acme")
            for m in messages:
                await store.append_turn(sid, m)
            await store.drain_folds()
            return sid, [t.turn_seq for t in await store.tail(sid)]
        finally:
            await store.close()

    b, tail = asyncio.run(main())
    assert sorted(_buffer(dsn, a)[0]) == sorted(_buffer(dsn, b)[0])
    _check_keep(dsn, b, 7)
    assert tail == list(range(83, 90))


@pytest.mark.slow
def test_flush_and_maintenance_fold_what_was_kept(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=100, background_fold=False)
    a, b = store.create_session("acme"), store.create_session("acme")
    for i in range(60):
        store.append_turn(a, {"role": "user", "content": f"turn {i} " + "z " * (i % 7)})
        store.append_turn(b, {"role": "user", "content": f"turn {i} " + "z " * (i % 7)})
    open_a = _buffer(dsn, a)[2]
    assert set(_buffer(dsn, a)[0]) - {open_a}, "a sealed chunk must be kept"
    store.flush(a)
    assert _buffer(dsn, a)[0] == {}
    # maintenance folds a kept chunk once its turns are older than flush_idle
    store.maintain(flush_idle=timedelta(0), embed=False)
    assert _buffer(dsn, b)[0] == {}
    assert [t.turn_seq for t in store.history(b)] == list(range(60))


def test_keep_zero_folds_every_sealed_chunk(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=100, background_fold=False)
    sid = store.create_session("acme")
    for i in range(40):
        store.append_turn(sid, {"role": "user", "content": f"turn {i} " + "w " * (i % 6)})
    chunks, _, open_seq = _buffer(dsn, sid)
    assert set(chunks) - {open_seq}
    store._run(shardstore.history.ops.fold_sealed_op(sid, 0))
    assert set(_buffer(dsn, sid)[0]) == {open_seq}
    assert [t.turn_seq for t in store.history(sid)] == list(range(40))
