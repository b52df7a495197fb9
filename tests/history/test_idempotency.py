"""Retries with an idempotency key store nothing and return the first result."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

import shardstore
import shardstore.history


def test_retry_returns_first_result(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    first = store.append_turn(sid, {"role": "user", "content": "pay me"}, idempotency_key="m-1")
    retry = store.append_turn(sid, {"role": "user", "content": "pay me"}, idempotency_key="m-1")
    assert retry == shardstore.AppendResult(first.turn_seq, first.chunk_seq, first.tokens, True)
    assert [t.message["content"] for t in store.history(sid)] == ["pay me"]


def test_retry_after_the_chunk_was_folded(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")
    first = store.append_turn(sid, {"role": "user", "content": "early"}, idempotency_key="k0")
    big = {"role": "tool", "tool_call_id": "c", "content": "data " * 9000}
    store.append_turn(sid, big)  # over the budget: seals chunk 0 and folds it
    store.append_turn(sid, {"role": "user", "content": "next"})
    store.drain_folds()
    # the background fold kept chunk 0 buffered (the keep rule): fold it keeping none
    store._run(shardstore.history.ops.fold_sealed_op(sid, 0))
    with psycopg.connect(dsn) as conn:
        (buffered,) = conn.execute(
            "SELECT count(*) FROM shardstore.turn_buffer WHERE session_id = %s AND turn_seq = 0",
            (sid,),
        ).fetchone()  # type: ignore[misc]
    assert buffered == 0, "turn 0 must have left the buffer for this test to mean anything"
    retry = store.append_turn(sid, {"role": "user", "content": "early"}, idempotency_key="k0")
    assert retry.duplicate and retry.turn_seq == first.turn_seq and retry.chunk_seq == 0
    assert store.session(sid).turn_count == 3


def test_retry_of_a_whole_batch_and_repeats_inside_a_batch(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(3)]
    keys = ["a", "b", "a"]
    first = store.append_turns(sid, msgs, keys)
    assert [r.duplicate for r in first] == [False, False, True]
    assert first[2].turn_seq == first[0].turn_seq
    again = store.append_turns(sid, msgs, keys)
    assert all(r.duplicate for r in again)
    assert [r.turn_seq for r in again] == [r.turn_seq for r in first]
    assert [t.message["content"] for t in store.history(sid)] == ["m0", "m1"]


def test_keys_are_per_session(store: shardstore.Store) -> None:
    a = store.create_session("acme")
    b = store.create_session("acme")
    store.append_turn(a, {"role": "user", "content": "x"}, idempotency_key="same")
    r = store.append_turn(b, {"role": "user", "content": "y"}, idempotency_key="same")
    assert not r.duplicate


@pytest.mark.slow
def test_concurrent_retries_with_one_key_store_once(make_store: Any) -> None:
    store = make_store(pool_max_size=4)
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "warm"})
    rounds, racers = 40, 3
    outcomes: list[list[shardstore.AppendResult]] = [[] for _ in range(rounds)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(racers)

    def racer() -> None:
        try:
            for i in range(rounds):
                barrier.wait()
                message = {"role": "user", "content": f"payment {i}"}
                outcomes[i].append(store.append_turn(sid, message, idempotency_key=f"pay-{i}"))
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=racer) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for results in outcomes:
        assert sorted(r.duplicate for r in results) == [False] + [True] * (racers - 1)
        assert len({r.turn_seq for r in results}) == 1
    contents = [t.message["content"] for t in store.history(sid)]
    assert contents == ["warm"] + [f"payment {i}" for i in range(rounds)]
