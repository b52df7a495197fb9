"""Bad input raises a typed ShardstoreError and writes nothing; awkward strings round-trip."""

from __future__ import annotations

import math
import uuid
from typing import Any

import hypothesis.strategies as st
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings

import shardstore


def _row_counts(dsn: str) -> tuple[int, ...]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM shardstore.turn_buffer),"
            " (SELECT count(*) FROM shardstore.agent_history),"
            " (SELECT count(*) FROM shardstore.turn_keys),"
            " (SELECT coalesce(sum(next_turn_seq), 0) FROM shardstore.sessions)"
        ).fetchone()
    assert row is not None
    return tuple(int(v) for v in row)


BAD_MESSAGES: list[Any] = [
    "just a string",
    ["role", "user"],
    None,
    {"content": "no role"},
    {"role": ""},
    {"role": 7, "content": "x"},
    {"role": "user", "content": math.nan},
    {"role": "user", "content": [1.0, math.inf]},
    {"role": "user", "meta": {1: "int key"}},
    {"role": "user", "blob": b"bytes"},
    {"role": "user", "when": (1, 2)},
]


@pytest.mark.parametrize("message", BAD_MESSAGES, ids=lambda m: repr(m)[:30])
def test_bad_message_is_refused_and_nothing_written(
    store: shardstore.Store, dsn: str, message: Any
) -> None:
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "kept"})
    before = _row_counts(dsn)
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turn(sid, message, idempotency_key="k")
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turns(sid, [{"role": "user", "content": "fine"}, message])
    assert _row_counts(dsn) == before


def test_cyclic_message(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")
    message: dict[str, Any] = {"role": "user"}
    message["self"] = message
    with pytest.raises(shardstore.InvalidMessage, match="cycle"):
        store.append_turn(sid, message)
    assert _row_counts(dsn)[0] == 0


def test_unknown_and_purged_sessions(store: shardstore.Store, dsn: str) -> None:
    missing = uuid.uuid4()
    with pytest.raises(shardstore.SessionNotFound):
        store.append_turn(missing, {"role": "user", "content": "x"})
    for read in (
        lambda: store.tail(missing),
        lambda: list(store.history(missing)),
        lambda: store.chunks(missing),
    ):
        with pytest.raises(shardstore.SessionNotFound):
            read()
    sid = store.create_session("acme", session_id=uuid.uuid4())
    store.append_turn(sid, {"role": "user", "content": "x"})
    with psycopg.connect(dsn) as conn:  # the tombstone that purge (a later feature) leaves
        conn.execute(
            "UPDATE shardstore.sessions SET purged_at = now() WHERE session_id = %s", (sid,)
        )
    before = _row_counts(dsn)
    with pytest.raises(shardstore.SessionPurged):
        store.append_turn(sid, {"role": "user", "content": "late write"})
    with pytest.raises(shardstore.SessionPurged):
        store.tail(sid)
    with pytest.raises(shardstore.SessionPurged):
        store.create_session("acme", session_id=sid)
    assert _row_counts(dsn) == before


def test_oversize_turn_is_refused_before_the_server(make_store: Any, dsn: str) -> None:
    store = make_store(chunk_max_bytes=64 * 1024)
    sid = store.create_session("acme")
    before = _row_counts(dsn)
    with pytest.raises(shardstore.TurnTooLarge, match="bytes"):
        store.append_turn(sid, {"role": "tool", "content": "x" * (64 * 1024)})
    assert _row_counts(dsn) == before


@pytest.mark.parametrize("bad", [0, -1, "3", 2.0, True])
def test_non_positive_or_wrong_type_n(store: shardstore.Store, bad: Any) -> None:
    sid = store.create_session("acme")
    with pytest.raises(shardstore.InvalidInput):
        store.tail(sid, n=bad)
    with pytest.raises(shardstore.InvalidInput):
        store.tail(sid, max_tokens=bad)
    with pytest.raises(shardstore.InvalidInput):
        store.chunks(sid, last=bad)


@pytest.mark.parametrize(
    "bad_id", ["not-a-uuid", 42, None, "'; DROP TABLE shardstore.sessions; --"]
)
def test_invalid_session_ids(store: shardstore.Store, bad_id: Any) -> None:
    with pytest.raises(shardstore.InvalidInput):
        store.append_turn(bad_id, {"role": "user", "content": "x"})
    with pytest.raises(shardstore.InvalidInput):
        store.tail(bad_id)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tenant_id": ""},
        {"tenant_id": None},
        {"tenant_id": "a\x00b"},
        {"tenant_id": "t", "subject_id": 5},
        {"tenant_id": "t", "metadata": ["not", "a", "dict"]},
        {"tenant_id": "t", "session_id": "nope"},
    ],
)
def test_bad_session_arguments(store: shardstore.Store, kwargs: dict[str, Any]) -> None:
    with pytest.raises(shardstore.InvalidInput):
        store.create_session(**kwargs)


def test_bad_idempotency_keys(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    for key in ["", "a\x00b", "\ud800", 5, "k" * 513]:
        with pytest.raises(shardstore.InvalidInput):
            store.append_turn(sid, {"role": "user", "content": "x"}, idempotency_key=key)  # type: ignore[arg-type]
    with pytest.raises(shardstore.InvalidInput):
        store.append_turns(sid, [{"role": "user"}], ["a", "b"])
    assert store.session(sid).turn_count == 0


def test_create_session_is_idempotent_with_an_id(store: shardstore.Store) -> None:
    sid = uuid.uuid4()
    assert store.create_session("acme", "user:1", session_id=sid) == sid
    assert store.create_session("acme", "user:1", session_id=str(sid)) == sid
    with pytest.raises(shardstore.SessionConflict):
        store.create_session("other", "user:1", session_id=sid)


AWKWARD = [
    "\ue002",
    "\ue000\ue002x",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\ue000starts with the marker",
    "\ue001",
    "\\u0000",
    "plain",
    "",
    "\x00",
    "🙂",
    "\ue000\x00\ud83d",
]


@pytest.mark.parametrize("text", AWKWARD, ids=repr)
def test_awkward_strings_round_trip_exactly(store: shardstore.Store, text: str) -> None:
    sid = store.create_session("acme", metadata={text: text})
    message = {"role": "user", "content": text, text: [text, {text: text}]}
    store.append_turn(sid, message)
    store.append_turn(sid, {"role": "assistant", "content": "x" * 50_000})  # fold the first
    store.flush(sid)
    assert next(iter(store.history(sid))).message == message
    assert store.tail(sid, n=2)[0].message == message
    assert store.session(sid).metadata == {text: text}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payload=json_values, role=st.text(min_size=1, max_size=10))
def test_any_json_message_round_trips(store: shardstore.Store, payload: Any, role: str) -> None:
    sid = store.create_session("acme")
    message = {"role": role, "payload": payload}
    store.append_turn(sid, message)
    assert store.tail(sid, n=1)[0].message == message
    store.flush(sid)
    assert next(iter(store.history(sid))).message == message


@pytest.mark.parametrize(
    "number", [1e16, -3.602879272399667e16, 1e300, 5e-324, 0.1, 123.0, 2**80, -(2**63)]
)
def test_numbers_keep_their_type_and_value(store: shardstore.Store, number: float | int) -> None:
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "n": number, "k": {"x": [number]}})
    back = store.tail(sid, n=1)[0].message
    assert back == {"role": "user", "n": number, "k": {"x": [number]}}
    assert type(back["n"]) is type(number)


def test_int_too_long_for_json_is_refused(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turn(sid, {"role": "user", "n": 10**5000})


def test_keys_and_messages_with_the_marker_survive_a_fold(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    key = "\ue000key\ue001"
    message = {"role": "user", "content": "\ue000\x00 marked"}
    store.append_turn(sid, message, idempotency_key=key)
    store.flush(sid)
    (turn,) = store.history(sid)
    assert (turn.message, turn.idempotency_key) == (message, key)
    assert store.tail(sid, n=1)[0].idempotency_key == key
    assert store.append_turn(sid, message, idempotency_key=key).duplicate
