"""tail(): newest turns oldest first, within n and max_tokens, never opening on an orphaned
tool result."""

from __future__ import annotations

import pytest

import shardstore
from shardstore.history.pairing import is_tool_result


def _conversation(store: shardstore.Store) -> object:
    sid = store.create_session("acme")
    store.append_turns(
        sid,
        [
            {"role": "user", "content": "weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "a",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"c":"Paris"}'},
                    },
                    {
                        "id": "b",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"c":"Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "Paris: 12C " * 30},
            {"role": "tool", "tool_call_id": "b", "content": "Rome: 18C"},
            {"role": "assistant", "content": "Paris 12C, Rome 18C."},
        ],
    )
    return sid


def test_tail_never_starts_with_an_orphaned_tool_result(store: shardstore.Store) -> None:
    sid = _conversation(store)
    for n in range(1, 7):
        turns = store.tail(sid, n=n)  # type: ignore[arg-type]
        assert len(turns) <= n
        assert not turns or not is_tool_result(turns[0].message)
    assert [t.turn_seq for t in store.tail(sid, n=2)] == [4]  # [tool b, assistant] -> drop tool
    assert [t.turn_seq for t in store.tail(sid, n=3)] == [4]
    assert [t.turn_seq for t in store.tail(sid, n=4)] == [1, 2, 3, 4]


def test_seed_format_tool_results_count_too(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    store.append_turns(
        sid,
        [
            {"role": "assistant", "content": "calling", "metadata": {"tool_calls": ["t1"]}},
            {"role": "tool_result", "content": "42", "metadata": {"tool_call_id": "t1"}},
            {"role": "assistant", "content": "it is 42"},
        ],
    )
    assert [t.turn_seq for t in store.tail(sid, n=2)] == [2]


@pytest.mark.slow
def test_max_tokens_is_never_exceeded(store: shardstore.Store) -> None:
    sid = _conversation(store)
    all_turns = store.tail(sid, n=100)
    for budget in range(1, sum(t.tokens for t in all_turns) + 5):
        turns = store.tail(sid, max_tokens=budget)
        assert sum(t.tokens for t in turns) <= budget
    assert store.tail(sid, max_tokens=1) == []


def test_tail_reaches_back_across_sealed_chunks(make_store: object) -> None:
    store = make_store(chunk_tokens=100)  # type: ignore[operator]
    sid = store.create_session("acme")
    for i in range(60):
        store.append_turn(sid, {"role": "user", "content": f"message number {i}"})
    assert len(store.chunks(sid)) > 5
    turns = store.tail(sid, n=45)
    assert [t.turn_seq for t in turns] == list(range(15, 60))
    assert [t.message["content"] for t in turns] == [f"message number {i}" for i in range(15, 60)]
    assert store.tail(sid) == turns[-20:]  # default: 20 turns


def test_tail_gives_each_turns_stored_time_key_and_message_exactly(dsn: str) -> None:
    """tail_window sends times as microseconds since 1970 and keys through to_json: the
    window's turns equal history()'s (times as instants, to the microsecond, whatever the
    connection's TimeZone), buffered and folded alike, with keys that need JSON escaping."""
    import io
    import json
    import uuid
    from datetime import UTC, datetime, timedelta, timezone

    from psycopg.conninfo import make_conninfo

    store = shardstore.connect(
        make_conninfo(dsn, options="-c TimeZone=Asia/Kolkata"),
        chunk_tokens=60,
        default_tail_turns=3,
    )
    try:
        sid = str(uuid.uuid4())
        start = datetime(2001, 2, 3, 4, 5, 6, 789012, tzinfo=timezone(timedelta(hours=-7)))
        times = [start + timedelta(seconds=i, microseconds=7 * i) for i in range(30)]
        keys = [None if i % 3 else f'k"{i}\\\n\u00e9\u2028x' for i in range(30)]
        head = {
            "kind": "session",
            "format": "shardstore.jsonl",
            "version": 1,
            "session_id": sid,
            "tenant_id": "acme",
            "subject_id": None,
            "agent_id": None,
            "metadata": {},
            "created_at": start.isoformat(),
        }
        lines = (
            [head]
            + [
                {
                    "kind": "turn",
                    "turn_seq": i,
                    "created_at": t.isoformat(),
                    "idempotency_key": keys[i],
                    "tokens": 9,
                    "message": {"role": "user", "content": f'turn {i} \u2603 "q" \\ \ue000'},
                }
                for i, t in enumerate(times)
            ]
            + [{"kind": "end", "session_id": sid, "turns": 30}]
        )
        store.import_jsonl(io.StringIO("".join(json.dumps(d) + "\n" for d in lines)))
        for i in range(3):  # and a few buffered turns appended now
            store.append_turn(sid, {"role": "assistant", "content": f"reply {i}"}, f"r\t{i}")
        window = store.tail(sid, n=100)
        assert window == list(store.history(sid))
        assert len(window) == 33 and len(store.chunks(sid)) > 3
        assert [t.created_at for t in window[:30]] == times
        assert [t.idempotency_key for t in window] == keys + [f"r\t{i}" for i in range(3)]
        assert window[0].message["content"] == 'turn 0 \u2603 "q" \\ \ue000'
        assert all(t.created_at.utcoffset() == timedelta(0) for t in window)
        assert abs(window[-1].created_at - datetime.now(UTC)) < timedelta(minutes=5)
    finally:
        store.close()
