"""The one-statement append and tail paths and the LIFO pool.

* tail_v1 reads a folded chunk's newest turns through one jsonpath slice: held to an
  in-memory model built from ``history()`` (an independent read path) for every n /
  max_tokens, across folded, flushed and buffered chunks, keyed turns and a purge gap;
* a single-turn append is one statement even when it seals (append_one_v2), with and
  without a checkpoint (append_checkpoint_v2), its results those of the batch path;
* the store's pool hands one caller the same connection call after call.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import make_conninfo

import shardstore
from partition_manager import driver
from shardstore.core.steps import Q
from shardstore.models import Turn

MakeStore = Callable[..., shardstore.Store]


def _message(i: int, size: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " + "word " * size}


def _model_tail(turns: list[Turn], n: int | None, max_tokens: int | None) -> list[Turn]:
    """The newest turns within n and max_tokens, oldest first (the plain-chat messages here
    have no tool results, so no trimming applies)."""
    picked: list[Turn] = []
    total = 0
    for turn in reversed(turns):
        if n is not None and len(picked) >= n:
            break
        if max_tokens is not None and total + turn.tokens > max_tokens:
            break
        picked.append(turn)
        total += turn.tokens
    return picked[::-1]


def _built(store: shardstore.Store, sizes: list[int], flush_at: int | None, cut: int | None) -> Any:
    sid = store.create_session("speed")
    for i, size in enumerate(sizes):
        key = f"k{i}" if i % 3 == 0 else None
        store.append_turn(sid, _message(i, size), idempotency_key=key)
        if flush_at is not None and i == flush_at:
            store.flush(sid)
    store.drain_folds()
    if cut is not None:
        store.purge_range(sid, before_turn_seq=cut)
    return sid


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=12, max_size=45),
    flush_at=st.none() | st.integers(0, 44),
    cut=st.none() | st.integers(1, 30),
    asks=st.lists(
        st.tuples(st.none() | st.integers(1, 60), st.none() | st.integers(1, 900)),
        min_size=1,
        max_size=8,
    ),
)
def test_tail_matches_a_model_over_history(
    dsn: str,
    sizes: list[int],
    flush_at: int | None,
    cut: int | None,
    asks: list[tuple[int | None, int | None]],
) -> None:
    """Every Turn field of tail(n, max_tokens) equals the model's pick from history():
    chunks of ~120 tokens, so a tail spans several folded chunks, the buffered open chunk,
    a flushed part and (with ``cut``) the gap a range purge leaves."""
    with shardstore.connect(dsn, chunk_tokens=150) as store:
        sid = _built(store, sizes, flush_at, cut if cut is not None and cut < len(sizes) else None)
        turns = list(store.history(sid))
        for n, max_tokens in asks:
            if n is None and max_tokens is None:
                n = 20
            got = store.tail(sid, n=n, max_tokens=max_tokens)
            assert got == _model_tail(turns, n, max_tokens)


def test_every_window_length_across_folded_chunks(make_store: MakeStore) -> None:
    """tail(n) for every n from 1 past the session's length, and tail(max_tokens) for
    every budget boundary, over folded, flushed and buffered chunks: each window ends at
    the newest turn and is contiguous, whichever chunk it starts in."""
    store = make_store(chunk_tokens=150)
    sid = _built(store, [5 + (i * 7) % 40 for i in range(40)], flush_at=33, cut=None)
    turns = list(store.history(sid))
    assert len({t.chunk_seq for t in turns}) >= 6
    for n in range(1, 43):
        assert store.tail(sid, n=n) == _model_tail(turns, n, None)
    total = 0
    for turn in reversed(turns):
        for budget in (total + turn.tokens - 1, total + turn.tokens):
            assert store.tail(sid, max_tokens=budget) == _model_tail(turns, None, budget)
            assert store.tail(sid, n=7, max_tokens=budget) == _model_tail(turns, 7, budget)
        total += turn.tokens


@contextmanager
def _statements() -> Iterator[list[str]]:
    """The statements this thread's operations send (other threads' are not counted)."""
    sent: list[str] = []
    me = threading.get_ident()
    original = driver._SyncIO.execute

    async def counted(self: Any, q: Q) -> Any:
        if threading.get_ident() == me:
            sent.append(q.sql)
        return await original(self, q)

    driver._SyncIO.execute = counted  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        driver._SyncIO.execute = original  # type: ignore[method-assign]


def test_a_sealing_append_is_one_statement(make_store: MakeStore) -> None:
    """Every single-turn append, sealing or not, with a checkpoint or not, sends exactly one
    statement (the fold goes to the background folder); the results match what the turns
    became, and chunks stay within the budget."""
    store = make_store(chunk_tokens=60)
    sid = store.create_session("speed")
    results = []
    with _statements() as sent:
        for i in range(30):
            if i % 4 == 0:
                results.append(store.append_turn(sid, _message(i, 12), checkpoint={"i": i}))
            else:
                results.append(store.append_turn(sid, _message(i, 12), idempotency_key=f"k{i}"))
    assert len(sent) == 30
    store.drain_folds()
    chunk_seqs = [r.chunk_seq for r in results]
    assert chunk_seqs == sorted(chunk_seqs) and chunk_seqs[-1] >= 5  # it sealed, often
    turns = list(store.history(sid))
    assert [(t.turn_seq, t.chunk_seq, t.tokens) for t in turns] == [
        (r.turn_seq, r.chunk_seq, r.tokens) for r in results
    ]
    budget = store.ctx.settings.budget_tokens
    assert all(c.token_count <= budget for c in store.chunks(sid) if c.turn_count > 1)
    checkpoints = store.checkpoints(sid)
    assert len(checkpoints) == 8
    assert {c.checkpoint_id for c in checkpoints} == {
        r.checkpoint_id for r in results if r.checkpoint_id is not None
    }
    # a repeat of a sealing keyed turn is reported as the first, with one statement
    with _statements() as sent:
        again = store.append_turn(sid, _message(29, 12), idempotency_key="k29")
    assert len(sent) == 1
    assert again == shardstore.models.AppendResult(
        results[29].turn_seq, results[29].chunk_seq, results[29].tokens, True
    )


@pytest.mark.slow
def test_a_lone_caller_keeps_one_connection(make_store: MakeStore) -> None:
    """With several idle connections, consecutive calls of one thread land on the backend
    used last (LIFO); concurrent callers still get connections of their own."""
    store = make_store(pool_min_size=4, pool_max_size=4)
    store.connector._pool.wait()

    def pid() -> int:
        def op() -> Any:
            (value,) = yield Q("SELECT pg_backend_pid()", fetch="one")
            return value

        return store._run(op())  # type: ignore[no-any-return]

    assert len({pid() for _ in range(12)}) == 1
    seen: set[int] = set()
    barrier = threading.Barrier(3)

    def hold() -> None:
        def op() -> Any:
            (value,) = yield Q("SELECT pg_backend_pid() FROM pg_sleep(0.3)", fetch="one")
            return value

        barrier.wait()
        seen.add(store._run(op()))

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 3


def test_async_store_keeps_one_connection(new_database: Callable[[], str]) -> None:
    """The asyncio pool is LIFO too."""

    async def main() -> set[int]:
        store = await shardstore.connect_async(new_database(), pool_min_size=3, pool_max_size=3)
        try:
            await store.connector._pool.wait()

            def op() -> Any:
                (value,) = yield Q("SELECT pg_backend_pid()", fetch="one")
                return value

            return {await store._run(op()) for _ in range(10)}
        finally:
            await store.close()

    assert len(asyncio.run(main())) == 1


def test_a_seal_does_not_wait_for_a_fold(dsn: str) -> None:
    """Appends that seal a chunk (single turns, with a checkpoint, and batches) go on while
    another transaction holds the session row FOR KEY SHARE, the lock a fold or a text pass
    holds while it works; a sealing append does not wait for it (decision 0013). lock_timeout turns
    a wait into an error; afterwards every turn is there, in order, once."""
    holder = psycopg.connect(dsn)
    store = shardstore.connect(
        make_conninfo(dsn, options="-c lock_timeout=2000"), chunk_tokens=60, background_fold=False
    )
    try:
        sid = store.create_session("seal")
        store.append_turn(sid, _message(0, 12))
        holder.execute(
            "SELECT 1 FROM shardstore.sessions WHERE session_id = %s FOR KEY SHARE", (sid,)
        )
        results = [store.append_turn(sid, _message(i, 12)) for i in range(1, 9)]
        results.append(store.append_turn(sid, _message(9, 12), checkpoint={"at": 9}))
        results += store.append_turns(sid, [_message(i, 12) for i in range(10, 20)])
        chunk_seqs = [r.chunk_seq for r in results]
        assert chunk_seqs[-1] - chunk_seqs[0] >= 4  # seals of every kind happened
        holder.rollback()
        store.flush(sid)
        turns = list(store.history(sid))
        assert [t.turn_seq for t in turns] == list(range(20))
        assert [t.message for t in turns] == [_message(i, 12) for i in range(20)]
    finally:
        holder.close()
        store.close()


APPEND_V2 = (
    "shardstore.append_v2(uuid, jsonb, integer[], integer[], text[], bigint, bigint, interval,"
    " timestamptz, integer)"
)


def test_a_seal_does_not_need_the_batch_function(dsn: str) -> None:
    """A single turn that seals its chunk (with or without a key or a checkpoint) is one
    UPDATE of the head and one INSERT: with the batch function renamed away, turns
    keep sealing chunks; the results are those the batch path gives (the model tests hold
    the chunk rule), and once it is back a retried key and a new session work as before."""
    store = shardstore.connect(dsn, chunk_tokens=60, background_fold=False)
    admin = psycopg.connect(dsn, autocommit=True)
    try:
        sid = store.create_session("seal")
        store.append_turn(sid, _message(0, 12))  # a new session's first turn: the batch path
        admin.execute(f"ALTER FUNCTION {APPEND_V2} RENAME TO append_v2_away")
        results = []
        for i in range(1, 25):
            if i % 5 == 0:
                results.append(store.append_turn(sid, _message(i, 12), checkpoint={"i": i}))
            else:
                results.append(store.append_turn(sid, _message(i, 12), idempotency_key=f"k{i}"))
        seals = sum(1 for a, b in itertools.pairwise(results) if b.chunk_seq > a.chunk_seq)
        assert seals >= 4
        with pytest.raises(shardstore.ShardstoreError):  # a retried key takes the batch path
            store.append_turn(sid, _message(24, 12), idempotency_key="k24")
        admin.execute(
            "ALTER FUNCTION shardstore.append_v2_away(uuid, jsonb, integer[], integer[], text[],"
            " bigint, bigint, interval, timestamptz, integer) RENAME TO append_v2"
        )
        again = store.append_turn(sid, _message(24, 12), idempotency_key="k24")
        assert again.duplicate and (again.turn_seq, again.chunk_seq) == (
            results[-1].turn_seq,
            results[-1].chunk_seq,
        )
        store.flush(sid)
        turns = list(store.history(sid))
        assert [(t.turn_seq, t.chunk_seq) for t in turns[1:]] == [
            (r.turn_seq, r.chunk_seq) for r in results
        ]
        assert [t.message for t in turns] == [_message(i, 12) for i in range(25)]
        budget = store.ctx.settings.budget_tokens
        assert all(c.token_count <= budget for c in store.chunks(sid) if c.turn_count > 1)
        assert len(store.checkpoints(sid)) == 4
    finally:
        admin.close()
        store.close()
