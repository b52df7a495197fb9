from __future__ import annotations

import shardstore


def test_append_and_tail_round_trip(store: shardstore.Store) -> None:
    sid = store.create_session("acme", "user:1")
    first = store.append_turn(sid, {"role": "user", "content": "hello"})
    assert (first.turn_seq, first.chunk_seq, first.duplicate) == (0, 0, False)
    turns = store.tail(sid, n=5)
    assert [t.message for t in turns] == [{"role": "user", "content": "hello"}]
