"""Hostile and bad input values: every call either round-trips exactly or raises a typed
ShardstoreError and writes nothing (row counts and contents of every shardstore table
unchanged, schema intact). Fixed examples (bad messages, awkward strings, unknown and purged
sessions, bad arguments), hypothesis, and a table of wrong types for every public argument;
tests/hostile/test_every_method.py and test_every_command.py walk every method and command."""

from __future__ import annotations

import asyncio
import io
import math
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import hypothesis.strategies as st
import psycopg
import pytest
from hypothesis import HealthCheck, assume, example, given, settings

import shardstore
from shardstore.cli import main as cli_main
from shardstore.core.jsoncodec import MAX_DEPTH

FIXTURE_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


# ---------------------------------------------------------------- observing the database


def db_state(dsn: str) -> tuple[Any, ...]:
    """Row count and a digest of the contents of every table in schema shardstore
    (partitions included), and the schema's relations and functions."""
    with psycopg.connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c"
                " WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind IN ('r', 'p')"
                "   AND c.relname NOT IN ('schema_migrations', 'maintenance_runs')"
                " ORDER BY 1"
            )
        ]
        rows = []
        for t in tables:
            rows.append(
                conn.execute(
                    f"SELECT %s, count(*), md5(coalesce(string_agg(x::text, ',' ORDER BY"
                    f" x::text), '')) FROM ONLY shardstore.{t} x",
                    (t,),
                ).fetchone()
            )
        shape = conn.execute(
            "SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c"
            " WHERE c.relnamespace = 'shardstore'::regnamespace"
        ).fetchone()
        funcs = conn.execute(
            "SELECT array_agg(p.oid::regprocedure::text ORDER BY 1) FROM pg_proc p"
            " WHERE p.pronamespace = 'shardstore'::regnamespace"
        ).fetchone()
    return (tuple(rows), shape, funcs)


class CountingConnection(psycopg.Connection[Any]):
    """A connection that counts the statements sent through it (the executor's only path)."""

    statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        type(self).statements += 1
        return super().execute(*args, **kwargs)


@pytest.fixture
def counted(dsn: str) -> Iterator[tuple[shardstore.Store, type[CountingConnection]]]:
    """A store on a CountingConnection (folds run inline on it)."""

    class Counting(CountingConnection):
        statements = 0

    conn = Counting.connect(dsn, autocommit=True)
    store = shardstore.connect(conn, chunk_max_bytes=64 * 1024)
    try:
        yield store, Counting
    finally:
        store.close()
        conn.close()


# ---------------------------------------------------------------- strategies

# every code point, lone surrogates and NUL included, plus shardstore's own escape markers
ANY_CHAR = st.characters(codec=None, exclude_categories=()) | st.sampled_from(
    ["\x00", "\ud800", "\udfff", "\ue000", "\ue001", "\ue002", "\\", '"', "'"]
)
hostile_text = st.text(ANY_CHAR, max_size=24)
hostile_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e16, -1e16, 1.7976931348623157e308, 5e-324, -0.0, 123.0, 1e300]
)
hostile_ints = st.integers(min_value=-(2**200), max_value=2**200)
json_leaf = st.none() | st.booleans() | hostile_ints | hostile_floats | hostile_text
hostile_json = st.recursive(
    json_leaf,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(hostile_text, kids, max_size=4),
    max_leaves=25,
)

SQL_INJECTION = [
    "'; DROP TABLE shardstore.sessions; --",
    "' OR '1'='1",
    "acme' OR tenant_id <> 'acme",
    '"; DROP SCHEMA shardstore CASCADE; --',
    "$$; DELETE FROM shardstore.turn_buffer; $$",
    "\\'; TRUNCATE shardstore.agent_history; --",
    "1); DELETE FROM shardstore.sessions WHERE (1=1",
    "%s%s%s%(x)s",
    "{}",
    "NULL",
    "Robert'); DROP TABLE students;--",
    "$1",
    "E'\\x00'",
    "/* */ UNION SELECT * FROM pg_authid --",
]
injection_text = st.builds(
    lambda a, b, c: f"{a}{b}{c}"[:256],
    st.text(max_size=6),
    st.sampled_from(SQL_INJECTION),
    st.text(max_size=6),
).filter(lambda s: "\x00" not in s and s != "")


class Opaque:
    pass


POISON: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    b"bytes",
    bytearray(b"x"),
    (1, 2),
    {1, 2},
    frozenset(),
    Decimal("1.5"),
    Opaque(),
    10**5000,
    {1: "int key"},
    {None: "none key"},
    {("t",): "tuple key"},
    {b"k": "bytes key"},
    datetime.now(UTC),
    uuid.uuid4(),
    1 + 2j,
]


def _insert(tree: Any, poison: Any, path: list[int]) -> Any:
    """``tree`` with ``poison`` put somewhere in it (guided by ``path``)."""
    if not path:
        return poison
    step, rest = path[0], path[1:]
    if isinstance(tree, list) and tree:
        i = step % (len(tree) + 1)
        out = list(tree)
        if i == len(tree):
            out.append(poison)
        else:
            out[i] = _insert(tree[i], poison, rest)
        return out
    if isinstance(tree, dict) and tree:
        keys = list(tree)
        k = keys[step % len(keys)]
        copy = dict(tree)
        copy[k] = _insert(tree[k], poison, rest)
        return copy
    return [tree, poison]


def _nest(depth: int, kind: str) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        as_list = kind == "list" or (kind == "mixed" and i % 2 == 1)
        value = [value] if as_list else {"k": value}
    return value


# ---------------------------------------------------------------- round trips


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURE_OK)
@given(payload=hostile_json, role=st.text(ANY_CHAR, min_size=1, max_size=8), key=hostile_text)
def test_hostile_json_round_trips_exactly(
    store: shardstore.Store, payload: Any, role: str, key: str
) -> None:
    sid = store.create_session("acme", metadata={key: payload, "k": [payload]})
    message = {"role": role, "payload": payload, key: payload}
    store.append_turn(sid, message)
    assert store.tail(sid, n=1)[0].message == message
    store.flush(sid)
    (turn,) = store.history(sid)
    assert turn.message == message
    assert store.tail(sid, n=1)[0].message == message
    assert store.session(sid).metadata == {key: payload, "k": [payload]}


def _same(a: Any, b: Any) -> bool:
    """Equality that also tells 0.0 from -0.0 and int from float."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    numbers=st.lists(
        hostile_floats.filter(lambda f: not (f == 0 and math.copysign(1, f) < 0)) | hostile_ints,
        min_size=1,
        max_size=8,
    )
)
@example(numbers=[1e16, -3.602879272399667e16, 1e300, 5e-324, 0.1, 123.0, 2**80, -(2**63)])
def test_numbers_keep_type_and_value(store: shardstore.Store, numbers: list[Any]) -> None:
    sid = store.create_session("acme")
    message = {"role": "user", "n": numbers}
    store.append_turn(sid, message)
    assert _same(store.tail(sid, n=1)[0].message, message)
    store.flush(sid)
    assert _same(next(iter(store.history(sid))).message, message)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    tenant=injection_text,
    subject=injection_text,
    agent=injection_text,
    key=injection_text,
    meta_key=injection_text,
)
def test_sql_injection_strings_are_data(
    store: shardstore.Store,
    dsn: str,
    tenant: str,
    subject: str,
    agent: str,
    key: str,
    meta_key: str,
) -> None:
    shape = db_state(dsn)[1:]
    sid = store.create_session(tenant, subject, agent, metadata={meta_key: key})
    info = store.session(sid)
    assert (info.tenant_id, info.subject_id, info.agent_id) == (tenant, subject, agent)
    assert info.metadata == {meta_key: key}
    message = {"role": key, meta_key: subject, "content": tenant}
    store.append_turn(sid, message, idempotency_key=key)
    assert store.append_turn(sid, message, idempotency_key=key).duplicate
    (turn,) = store.tail(sid)
    assert (turn.message, turn.idempotency_key) == (message, key)
    assert store.create_session(tenant, subject, agent, session_id=sid) == sid
    report = store.purge_subject(tenant, subject, dry_run=True)
    assert sid in report.session_ids
    assert store.purge_tenant(tenant).tombstoned >= 1
    with pytest.raises(shardstore.SessionPurged):
        store.tail(sid)
    assert db_state(dsn)[1:] == shape  # no table or function dropped or added


# ---------------------------------------------------------------- fixed examples that round-trip


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


@pytest.mark.slow
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


# ---------------------------------------------------------------- refused input


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    tree=hostile_json,
    poison=st.sampled_from(POISON),
    path=st.lists(st.integers(0, 7), max_size=6),
    where=st.sampled_from(["message", "batch", "metadata"]),
)
@example(tree={}, poison=10**5000, path=[], where="message")  # an int too long for JSON
def test_poisoned_json_is_refused_before_the_server(
    counted: tuple[shardstore.Store, type[CountingConnection]],
    tree: Any,
    poison: Any,
    path: list[int],
    where: str,
) -> None:
    store, counter = counted
    sid = uuid.uuid4()
    bad = _insert({"x": tree}, poison, [0, *path])
    counter.statements = 0
    with pytest.raises(shardstore.InvalidMessage):
        if where == "message":
            store.append_turn(sid, {"role": "user", **bad}, idempotency_key="k")
        elif where == "batch":
            store.append_turns(sid, [{"role": "user"}, {"role": "tool", **bad}])
        else:
            store.create_session("acme", metadata=bad)
    assert counter.statements == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["list", "dict", "mixed"])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000, 100_000])
def test_deep_nesting_is_refused_not_a_crash(
    counted: tuple[shardstore.Store, type[CountingConnection]], dsn: str, kind: str, depth: int
) -> None:
    store, counter = counted
    sid = store.create_session("acme")
    before = db_state(dsn)
    counter.statements = 0
    deep = _nest(depth, kind)
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turn(sid, {"role": "user", "content": deep})
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turns(sid, [{"role": "user"}, {"role": "user", "c": deep}])
    with pytest.raises(shardstore.InvalidMessage):
        store.create_session("acme", metadata={"m": deep})
    assert counter.statements == 0
    assert db_state(dsn) == before


def test_nesting_at_the_limit_round_trips(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    message = {"role": "user", "content": _nest(MAX_DEPTH - 1, "mixed")}
    store.append_turn(sid, message)
    store.flush(sid)
    assert next(iter(store.history(sid))).message == message


@pytest.mark.parametrize("container", ["dict", "list", "metadata"])
def test_cycles_are_refused(
    counted: tuple[shardstore.Store, type[CountingConnection]], container: str
) -> None:
    store, counter = counted
    counter.statements = 0
    loop: Any = {} if container != "list" else []
    if isinstance(loop, dict):
        loop["again"] = [loop]
    else:
        loop.append({"again": loop})
    with pytest.raises(shardstore.InvalidMessage, match="cycle"):
        if container == "metadata":
            store.create_session("acme", metadata={"m": loop})
        else:
            store.append_turn(uuid.uuid4(), {"role": "user", "c": loop})
    assert counter.statements == 0


CAP = 64 * 1024


def _sized(text_unit: str, target: int) -> dict[str, Any]:
    """A message whose stored JSON is exactly ``target`` bytes (or as close as the unit's
    width allows, never over)."""
    from shardstore.core.jsoncodec import encode_message

    def size(n: int) -> int:
        return len(encode_message({"role": "user", "content": text_unit * n}).encode())

    width = size(2) - size(1)
    count = (target - (size(1) - width)) // width
    return {"role": "user", "content": text_unit * count}


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["x", "€", "🙂", "\x00", '"', "\ud800"])
def test_turns_near_the_byte_cap(
    counted: tuple[shardstore.Store, type[CountingConnection]], dsn: str, unit: str
) -> None:
    from shardstore.core.jsoncodec import encode_message

    store, counter = counted
    sid = store.create_session("acme")
    fits = _sized(unit, CAP)
    size = len(encode_message(fits).encode())
    assert CAP - 8 < size <= CAP
    store.append_turn(sid, fits)
    assert store.tail(sid, n=1)[0].message == fits
    store.flush(sid)
    assert next(iter(store.history(sid))).message == fits
    before = db_state(dsn)
    over = {"role": "user", "content": fits["content"] + unit * 2}
    counter.statements = 0
    with pytest.raises(shardstore.TurnTooLarge, match="bytes"):
        store.append_turn(sid, over)
    with pytest.raises(shardstore.TurnTooLarge, match="bytes"):
        store.append_turns(sid, [fits, over])
    assert counter.statements == 0
    assert db_state(dsn) == before


@pytest.mark.slow
def test_default_cap_refuses_a_huge_turn_before_the_server(dsn: str) -> None:
    class Counting(CountingConnection):
        statements = 0

    with Counting.connect(dsn, autocommit=True) as conn:
        store = shardstore.connect(conn)
        sid = store.create_session("acme")
        before = db_state(dsn)
        Counting.statements = 0
        with pytest.raises(shardstore.TurnTooLarge):
            store.append_turn(sid, {"role": "tool", "content": "x" * (16 * 1024 * 1024)})
        # escaping makes a NUL 7 bytes: 3 MiB of NULs is over 16 MiB once stored
        with pytest.raises(shardstore.TurnTooLarge):
            store.append_turn(sid, {"role": "tool", "content": "\x00" * (3 * 1024 * 1024)})
        assert Counting.statements == 0
        assert db_state(dsn) == before


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    bad=st.one_of(
        st.text(max_size=40),
        st.binary(max_size=16),
        st.integers(),
        st.floats(),
        st.none(),
        st.lists(st.integers(), max_size=3),
    )
)
@example(bad="not-a-uuid")
@example(bad=42)
@example(bad=None)
@example(bad="'; DROP TABLE shardstore.sessions; --")
def test_invalid_session_ids_are_refused_everywhere(
    counted: tuple[shardstore.Store, type[CountingConnection]], bad: Any
) -> None:
    if isinstance(bad, str):
        try:
            uuid.UUID(bad)
            assume(False)
        except ValueError:
            pass
    store, counter = counted
    counter.statements = 0
    calls: list[Callable[[], Any]] = [
        lambda: store.append_turn(bad, {"role": "user"}),
        lambda: store.append_turns(bad, [{"role": "user"}]),
        lambda: store.tail(bad),
        lambda: list(store.history(bad)),
        lambda: store.chunks(bad),
        lambda: store.session(bad),
        lambda: store.flush(bad),
        lambda: store.purge_session(bad),
        lambda: store.purge_range(bad, 1),
    ]
    if bad is not None:  # None asks for a new id
        calls.append(lambda: store.create_session("acme", session_id=bad))
    for call in calls:
        with pytest.raises(shardstore.InvalidInput):
            call()
    assert counter.statements == 0


# ---------------------------------------------------------------- fixed examples that are refused


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


@pytest.mark.slow
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


# ---------------------------------------------------------------- wrong types, every argument

NOW = datetime.now(UTC)
WRONG: list[tuple[str, Callable[[Any, uuid.UUID], Any], type[Exception]]] = [
    ("tail n str", lambda s, i: s.tail(i, n="5"), shardstore.InvalidInput),
    ("tail n float", lambda s, i: s.tail(i, n=5.0), shardstore.InvalidInput),
    ("tail n bool", lambda s, i: s.tail(i, n=True), shardstore.InvalidInput),
    ("tail n 0", lambda s, i: s.tail(i, n=0), shardstore.InvalidInput),
    ("tail max_tokens neg", lambda s, i: s.tail(i, max_tokens=-1), shardstore.InvalidInput),
    ("tail max_tokens list", lambda s, i: s.tail(i, max_tokens=[1]), shardstore.InvalidInput),
    ("append_turns str", lambda s, i: s.append_turns(i, "not a list"), shardstore.InvalidInput),
    ("append_turns bytes", lambda s, i: s.append_turns(i, b"xy"), shardstore.InvalidInput),
    ("append_turns dict", lambda s, i: s.append_turns(i, {"role": "u"}), shardstore.InvalidInput),
    ("append_turns None", lambda s, i: s.append_turns(i, None), shardstore.InvalidInput),
    ("append_turns int", lambda s, i: s.append_turns(i, 3), shardstore.InvalidInput),
    (
        "append_turns gen",
        lambda s, i: s.append_turns(i, iter([{"role": "u"}])),
        shardstore.InvalidInput,
    ),
    (
        "append_turns keys str",
        lambda s, i: s.append_turns(i, [{"role": "u"}], "k"),
        shardstore.InvalidInput,
    ),
    (
        "append_turns keys short",
        lambda s, i: s.append_turns(i, [{"role": "u"}] * 2, ["k"]),
        shardstore.InvalidInput,
    ),
    (
        "append_turns key int",
        lambda s, i: s.append_turns(i, [{"role": "u"}], [5]),
        shardstore.InvalidInput,
    ),
    ("append_turn list", lambda s, i: s.append_turn(i, [{"role": "u"}]), shardstore.InvalidMessage),
    ("append_turn role int", lambda s, i: s.append_turn(i, {"role": 1}), shardstore.InvalidMessage),
    (
        "append_turn key bytes",
        lambda s, i: s.append_turn(i, {"role": "u"}, b"k"),
        shardstore.InvalidInput,
    ),
    (
        "append_turn key long",
        lambda s, i: s.append_turn(i, {"role": "u"}, "k" * 513),
        shardstore.InvalidInput,
    ),
    ("history from -1", lambda s, i: list(s.history(i, from_seq=-1)), shardstore.InvalidInput),
    ("history from str", lambda s, i: list(s.history(i, from_seq="0")), shardstore.InvalidInput),
    ("history to float", lambda s, i: list(s.history(i, to_seq=2.0)), shardstore.InvalidInput),
    ("history to -1", lambda s, i: list(s.history(i, to_seq=-1)), shardstore.InvalidInput),
    ("chunks last 0", lambda s, i: s.chunks(i, last=0), shardstore.InvalidInput),
    ("chunks last str", lambda s, i: s.chunks(i, last="1"), shardstore.InvalidInput),
    ("create tenant int", lambda s, i: s.create_session(5), shardstore.InvalidInput),
    ("create tenant long", lambda s, i: s.create_session("t" * 257), shardstore.InvalidInput),
    ("create tenant surrogate", lambda s, i: s.create_session("\udc00"), shardstore.InvalidInput),
    ("create subject list", lambda s, i: s.create_session("t", ["x"]), shardstore.InvalidInput),
    (
        "create agent nul",
        lambda s, i: s.create_session("t", None, "a\x00"),
        shardstore.InvalidInput,
    ),
    (
        "create metadata list",
        lambda s, i: s.create_session("t", metadata=[1]),
        shardstore.InvalidInput,
    ),
    (
        "create metadata nan",
        lambda s, i: s.create_session("t", metadata={"x": math.nan}),
        shardstore.InvalidMessage,
    ),
    (
        "create metadata int key",
        lambda s, i: s.create_session("t", metadata={1: 1}),
        shardstore.InvalidMessage,
    ),
    (
        "create session_id float",
        lambda s, i: s.create_session("t", session_id=1.5),
        shardstore.InvalidInput,
    ),
    (
        "create other owners",
        lambda s, i: s.create_session("other", session_id=i),
        shardstore.SessionConflict,
    ),
    ("purge_range neither", lambda s, i: s.purge_range(i), shardstore.InvalidInput),
    ("purge_range both", lambda s, i: s.purge_range(i, 1, NOW), shardstore.InvalidInput),
    ("purge_range seq str", lambda s, i: s.purge_range(i, "1"), shardstore.InvalidInput),
    ("purge_range seq neg", lambda s, i: s.purge_range(i, -1), shardstore.InvalidInput),
    (
        "purge_range naive",
        lambda s, i: s.purge_range(i, before=datetime(2020, 1, 1)),
        shardstore.InvalidInput,
    ),
    (
        "purge_range before str",
        lambda s, i: s.purge_range(i, before="2020-01-01"),
        shardstore.InvalidInput,
    ),
    ("purge_subject int", lambda s, i: s.purge_subject(1, "x"), shardstore.InvalidInput),
    ("purge_subject empty", lambda s, i: s.purge_subject("acme", ""), shardstore.InvalidInput),
    (
        "purge_subject batch 0",
        lambda s, i: s.purge_subject("acme", "u", batch_size=0),
        shardstore.InvalidInput,
    ),
    ("purge_tenant None", lambda s, i: s.purge_tenant(None), shardstore.InvalidInput),
    (
        "purge_tenant batch float",
        lambda s, i: s.purge_tenant("acme", batch_size=2.0),
        shardstore.InvalidInput,
    ),
    (
        "purge_tenant progress",
        lambda s, i: s.purge_tenant("acme", progress="yes"),
        shardstore.InvalidInput,
    ),
    ("purge_before str", lambda s, i: s.purge_before("2020-01-01"), shardstore.InvalidInput),
    (
        "purge_before naive",
        lambda s, i: s.purge_before(datetime(2020, 1, 1)),
        shardstore.InvalidInput,
    ),
    ("purge_before tenant int", lambda s, i: s.purge_before(NOW, 5), shardstore.InvalidInput),
    (
        "purge_session missing",
        lambda s, i: s.purge_session(uuid.uuid4()),
        shardstore.SessionNotFound,
    ),
    (
        "maintain retention bogus",
        lambda s, i: s.maintain(retention="bogus"),
        shardstore.ConfigurationError,
    ),
    ("maintain retention int", lambda s, i: s.maintain(retention=5), shardstore.ConfigurationError),
    (
        "maintain retention negative",
        lambda s, i: s.maintain(retention=timedelta(days=-1)),
        shardstore.ConfigurationError,
    ),
    ("maintain premake str", lambda s, i: s.maintain(premake="3"), shardstore.ConfigurationError),
    (
        "maintain premake huge",
        lambda s, i: s.maintain(premake=10**6),
        shardstore.ConfigurationError,
    ),
    (
        "maintain flush_idle bogus",
        lambda s, i: s.maintain(flush_idle="soon"),
        shardstore.ConfigurationError,
    ),
    (
        "maintain lock_timeout 0",
        lambda s, i: s.maintain(lock_timeout=timedelta(0)),
        shardstore.ConfigurationError,
    ),
    ("maintain archive int", lambda s, i: s.maintain(archive=5), shardstore.ConfigurationError),
    ("search no scope", lambda s, i: s.search("x"), shardstore.InvalidInput),
    ("search k str", lambda s, i: s.search("x", tenant_id="acme", k="5"), shardstore.InvalidInput),
    ("search k huge", lambda s, i: s.search("x", session_id=i, k=10**9), shardstore.InvalidInput),
    ("search tenant int", lambda s, i: s.search("x", tenant_id=5), shardstore.InvalidInput),
    ("search session bad", lambda s, i: s.search("x", session_id="x'--"), shardstore.InvalidInput),
    (
        "search agent NUL",
        lambda s, i: s.search("x", tenant_id="acme", agent_id="a\x00"),
        shardstore.InvalidInput,
    ),
    (
        "search since naive",
        lambda s, i: s.search("x", tenant_id="acme", since=datetime(2020, 1, 1)),
        shardstore.InvalidInput,
    ),
    (
        "search until str",
        lambda s, i: s.search("x", tenant_id="acme", until="2020-01-01"),
        shardstore.InvalidInput,
    ),
    ("search query dict", lambda s, i: s.search({"a": 1}, session_id=i), shardstore.InvalidInput),
    ("search query None", lambda s, i: s.search(None, session_id=i), shardstore.InvalidInput),
    (
        "search vector nan",
        lambda s, i: s.search([float("nan")], session_id=i),
        shardstore.InvalidInput,
    ),
    ("search query blank", lambda s, i: s.search("  ", session_id=i), shardstore.InvalidInput),
    ("embed batch 0", lambda s, i: s.embed(batch_size=0), shardstore.InvalidInput),
    ("embed batch str", lambda s, i: s.embed(batch_size="4"), shardstore.InvalidInput),
    ("embed limit -1", lambda s, i: s.embed(limit=-1), shardstore.InvalidInput),
    ("embed session bad", lambda s, i: s.embed(session_id=5), shardstore.InvalidInput),
    ("tail unknown", lambda s, i: s.tail(uuid.uuid4()), shardstore.SessionNotFound),
    (
        "append unknown",
        lambda s, i: s.append_turn(uuid.uuid4(), {"role": "u"}),
        shardstore.SessionNotFound,
    ),
]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURE_OK)
@given(text=hostile_text, tenant=hostile_text)
def test_hostile_search_text_finds_or_refuses(
    searchable: tuple[shardstore.Store, uuid.UUID], dsn: str, text: str, tenant: str
) -> None:
    store, sid = searchable
    before = db_state(dsn)
    for scope in ({"session_id": sid}, {"tenant_id": tenant}):
        try:
            hits = store.search(text, **scope)  # type: ignore[arg-type]
        except shardstore.InvalidInput:
            continue
        assert all(h.session_id == sid for h in hits)
        if "tenant_id" in scope and tenant != "acme":
            assert hits == []
    assert db_state(dsn) == before


@pytest.fixture
def searchable(make_store: Callable[..., shardstore.Store]) -> tuple[shardstore.Store, uuid.UUID]:
    from tests.embedders import HashEmbedder

    store = make_store(embedding_model=HashEmbedder())
    sid = store.create_session("acme", "u")
    store.append_turns(sid, [{"role": "user", "content": f"turn {i} \ud800 x"} for i in range(5)])
    store.flush(sid)
    assert store.embed() == 1
    return store, sid


@pytest.fixture
def loaded(store: shardstore.Store) -> tuple[shardstore.Store, uuid.UUID]:
    sid = store.create_session("acme", "u", session_id=uuid.uuid4())
    store.append_turns(sid, [{"role": "user", "content": f"turn {i}"} for i in range(5)])
    return store, sid


@pytest.mark.slow
@pytest.mark.parametrize(("name", "call", "error"), WRONG, ids=[w[0] for w in WRONG])
def test_wrong_types_raise_typed_errors_and_write_nothing(
    loaded: tuple[shardstore.Store, uuid.UUID],
    dsn: str,
    name: str,
    call: Callable[[Any, uuid.UUID], Any],
    error: type[Exception],
) -> None:
    store, sid = loaded
    before = db_state(dsn)
    with pytest.raises(error):
        call(store, sid)
    assert db_state(dsn) == before
    assert [t.turn_seq for t in store.tail(sid)] == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_async_store_refuses_the_same(dsn: str) -> None:
    async def go() -> None:
        store: Any = await shardstore.connect_async(dsn)
        try:
            sid = await store.create_session("acme")
            before = db_state(dsn)
            bads: list[Callable[[], Any]] = [
                lambda: store.tail(sid, n="5"),
                lambda: store.append_turns(sid, "not a list"),
                lambda: store.append_turn(sid, {"role": "user", "c": _nest(10_000, "list")}),
                lambda: store.purge_range(sid),
                lambda: store.maintain(retention="bogus"),
                lambda: store.create_session("acme", session_id="'; DROP TABLE x; --"),
            ]
            for bad in bads:
                with pytest.raises(shardstore.ShardstoreError):
                    await bad()
            with pytest.raises(shardstore.InvalidInput):
                async for _ in store.history(sid, from_seq=-1):
                    pass
            assert db_state(dsn) == before
        finally:
            await store.close()

    asyncio.run(go())


# ---------------------------------------------------------------- the CLI's parsing

cli_word = st.text(
    ANY_CHAR.filter(lambda c: c not in "\x00" and not "\ud800" <= c <= "\udfff"), max_size=12
) | st.sampled_from(
    [
        "-1",
        "0",
        "1",
        "2.5",
        "1e9",
        "99999999999999999999",
        "",
        "-",
        "--json",
        "nan",
        '{"role": "user"}',
        '[{"role": "user"}]',
        "[]",
        "{}",
        '{"role": 1}',
        "null",
        '{"role": "user", "c": NaN}',
        "[" * 5000 + "]" * 5000,
        "90 days",
        "2026-01-01",
        *SQL_INJECTION,
    ]
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    command=st.sampled_from(
        [
            "append",
            "tail",
            "history",
            "chunks",
            "session",
            "create-session",
            "purge-range",
            "purge-session",
            "purge-subject",
            "purge-before",
        ]
    ),
    words=st.lists(cli_word, min_size=0, max_size=3),
    use_real_session=st.booleans(),
)
def test_cli_parsing_never_crashes(
    loaded: tuple[shardstore.Store, uuid.UUID],
    dsn: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    words: list[str],
    use_real_session: bool,
) -> None:
    _store, sid = loaded
    target = str(sid) if use_real_session else (words[0] if words else "x")
    w = [*words, "", "", ""]
    argv = {
        "append": ["append", target, w[0], *(["--key", w[1]] if w[1] else [])],
        "tail": ["tail", target, "-n", w[0]],
        "history": ["history", target, "--from", w[0], "--to", w[1]],
        "chunks": ["chunks", target, "--last", w[0]],
        "session": ["session", target],
        "create-session": ["create-session", "--tenant", w[0], "--metadata", w[1]],
        "purge-range": ["purge", "range", target, "--before", w[0], "--yes", "--dry-run"],
        "purge-session": ["purge", "session", target, "--yes", "--dry-run"],
        "purge-subject": [
            "purge",
            "subject",
            "--tenant",
            w[0],
            "--subject",
            w[1],
            "--yes",
            "--dry-run",
        ],
        "purge-before": ["purge", "before", w[0], "--yes", "--dry-run"],
    }[command]
    monkeypatch.setattr(sys, "stdin", io.StringIO(w[2]))
    before = db_state(dsn)
    rc = cli_main(["--dsn", dsn, *argv])
    err = capsys.readouterr().err
    assert rc in (0, 2), err  # 1 would be an unexpected exception (a traceback)
    assert "Traceback" not in err
    if rc != 0:
        assert db_state(dsn) == before


# ---------------------------------------------------------------- bugs these tests found (fixed)


def test_cli_append_of_json_nested_past_the_decoders_depth_is_a_usage_error(
    loaded: tuple[shardstore.Store, uuid.UUID], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by test_cli_parsing_never_crashes: a message of 5,000 nested brackets made
    json.loads raise RecursionError, which the CLI printed as a traceback (exit 1)."""
    _store, sid = loaded
    before = db_state(dsn)
    rc = cli_main(["--dsn", dsn, "append", str(sid), "[" * 5000 + "]" * 5000])
    err = capsys.readouterr().err
    assert rc == 2 and "nested too deeply" in err and "Traceback" not in err, err
    assert db_state(dsn) == before


@pytest.mark.parametrize("keys", [5, {"a", "b"}, {"a": 1, "b": 2}], ids=["int", "set", "dict"])
def test_idempotency_keys_must_be_a_sequence(
    loaded: tuple[shardstore.Store, uuid.UUID], dsn: str, keys: Any
) -> None:
    store, sid = loaded
    before = db_state(dsn)
    with pytest.raises(shardstore.InvalidInput):
        store.append_turns(sid, [{"role": "user"}, {"role": "user"}], keys)
    assert db_state(dsn) == before


@pytest.mark.parametrize(
    "text", ["\ud800", "a\x00b", "t" * 100_000], ids=["surrogate", "nul", "long"]
)
def test_purge_text_arguments_are_validated(
    loaded: tuple[shardstore.Store, uuid.UUID], dsn: str, text: str
) -> None:
    store, _sid = loaded
    before = db_state(dsn)
    calls: list[Callable[[], Any]] = [
        lambda: store.purge_subject(text, "u"),
        lambda: store.purge_subject("acme", text),
        lambda: store.purge_tenant(text),
        lambda: store.purge_before(NOW, text),
    ]
    for call in calls:
        with pytest.raises(shardstore.InvalidInput):
            call()
    assert db_state(dsn) == before


@pytest.mark.parametrize(
    "call",
    [
        lambda s, i: s.tail(i, n=2**31),
        lambda s, i: s.tail(i, max_tokens=2**63),
        lambda s, i: s.purge_range(i, 2**63),
        lambda s, i: s.purge_tenant("acme", batch_size=2**63),
    ],
    ids=["tail-n", "tail-max_tokens", "purge_range-seq", "purge-batch"],
)
def test_out_of_range_ints_are_invalid_input(
    loaded: tuple[shardstore.Store, uuid.UUID], call: Callable[..., Any]
) -> None:
    store, sid = loaded
    with pytest.raises(shardstore.InvalidInput):
        call(store, sid)


def test_purge_before_extreme_datetime(loaded: tuple[shardstore.Store, uuid.UUID]) -> None:
    store, sid = loaded
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
    calls: list[Callable[[], Any]] = [
        lambda: store.purge_before(early),
        lambda: store.purge_range(sid, before=early),
    ]
    for call in calls:
        with pytest.raises(shardstore.ShardstoreError):
            call()


@pytest.mark.parametrize("flag", ["no", "false", 1], ids=repr)
def test_purge_flags_must_be_bools(
    loaded: tuple[shardstore.Store, uuid.UUID], dsn: str, flag: Any
) -> None:
    store, sid = loaded
    before = db_state(dsn)
    with pytest.raises(shardstore.InvalidInput):
        store.purge_session(sid, dry_run=flag)
    assert db_state(dsn) == before


def test_negative_zero_keeps_its_sign(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "n": -0.0})
    back = store.tail(sid, n=1)[0].message["n"]
    assert math.copysign(1, back) == -1


# ---------------------------------------------------------------- issue 34: untyped errors


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_deep_message_with_offload_is_invalid_message(
    make_store: Callable[..., shardstore.Store], dsn: str, kind: str
) -> None:
    """Issue 34: with ``offload_over`` set, the offload walk ran before validation and a
    message nested 2,000 levels deep raised RecursionError (without offload it was
    InvalidMessage)."""
    store = make_store(offload_over=256)
    sid = store.create_session("acme")
    before = db_state(dsn)
    deep = _nest(2_000, kind)
    big = "x" * 300  # over offload_over, so the append takes the offload path
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turn(sid, {"role": "user", "content": big, "deep": deep})
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turns(sid, [{"role": "user", "content": big}, {"role": "user", "c": deep}])
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turn(sid, {"role": "user", "deep": deep})
    assert db_state(dsn) == before


def _single_row_source(dsn: str, rows: list[tuple[str, str]]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE chats (id text PRIMARY KEY, history jsonb)")
        for key, history in rows:
            conn.execute("INSERT INTO chats VALUES (%s, %s::jsonb)", (key, history))


@pytest.mark.slow
@pytest.mark.parametrize("depth", [300, 5_000])
def test_single_row_import_skips_a_deeply_nested_row(
    store: shardstore.Store, new_database: Callable[[], str], depth: int
) -> None:
    """Issue 34: a row nested 5,000 levels raised RecursionError out of
    ``import_single_row(on_error="skip")``: the rows before it were imported, the rows
    after it never. Now it is skipped (nothing of it written) and the run goes on."""
    import json

    source = new_database()
    deep = '{"role": "user", "c": ' + "[" * depth + "]" * depth + "}"
    fine = json.dumps([{"role": "user", "content": "hi"}])
    _single_row_source(source, [("a", fine), ("b", "[" + deep + "]"), ("c", fine)])
    report = store.import_single_row(
        source,
        "chats",
        id_column="id",
        history_column="history",
        tenant_id="acme",
        on_error="skip",
    )
    assert (report.sessions, report.turns) == (2, 2)
    assert [s.source for s in report.skipped] == ["row id='b'"]
    assert {s.metadata["external_id"] for s in store.sessions(tenant_id="acme")} == {"a", "c"}
    with pytest.raises(shardstore.ImportRejected, match="row id='b'"):
        store.import_single_row(
            source, "chats", id_column="id", history_column="history", tenant_id="acme"
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    "when",
    [
        "9999-12-31T23:59:59+00:00",
        "9999-12-31T23:59:59.999999-14:00",
        "0001-01-01T00:00:00+00:00",
        "0001-01-01T00:00:00+14:00",
    ],
)
@pytest.mark.parametrize("where", ["turn", "session"])
def test_jsonl_import_of_an_extreme_date_is_import_rejected(
    store: shardstore.Store, dsn: str, when: str, where: str
) -> None:
    """Issue 34: a turn dated 9999-12-31T23:59:59+00:00 raised OverflowError out of
    ``import_jsonl``. Now the line is refused (``ImportRejected`` naming it) or imported,
    and a refused session writes nothing."""
    import io
    import json

    sid = uuid.uuid4()
    ok = "2026-01-01T00:00:00+00:00"
    lines = [
        {
            "kind": "session",
            "format": "shardstore.jsonl",
            "version": 1,
            "session_id": str(sid),
            "tenant_id": "acme",
            "subject_id": None,
            "agent_id": None,
            "metadata": {},
            "created_at": when if where == "session" else ok,
        },
        {
            "kind": "turn",
            "turn_seq": 0,
            "created_at": when if where == "turn" else ok,
            "idempotency_key": None,
            "tokens": 3,
            "message": {"role": "user", "content": "x"},
        },
        {"kind": "end", "session_id": str(sid), "turns": 1},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    before = db_state(dsn)
    try:
        report = store.import_jsonl(io.StringIO(text))
    except shardstore.ImportRejected as exc:
        assert str(exc).startswith("line 2:" if where == "turn" else "line 1:"), exc
        assert db_state(dsn) == before
    else:
        assert (report.sessions, report.turns) == (1, 1)
        (turn,) = store.history(sid)
        assert turn.message == {"role": "user", "content": "x"}
        assert turn.created_at == datetime.fromisoformat(lines[1]["created_at"])  # type: ignore[arg-type]
        assert store.session(sid).created_at == datetime.fromisoformat(lines[0]["created_at"])  # type: ignore[arg-type]
