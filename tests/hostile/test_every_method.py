"""Every public entry point of Store and AsyncStore, called with hostile values: each call
succeeds or raises a ShardstoreError (never RecursionError, OverflowError, ValueError,
TypeError or a raw psycopg error), and a refused call writes nothing.

The methods are enumerated from the classes, so a new method fails
:func:`test_every_public_method_has_arguments` until :func:`valid_calls` gives it a valid
call, naming every parameter; hypothesis then replaces one argument (or a value inside a
JSON argument) with something hostile: JSON nested past any limit, out-of-range ints,
NaN and infinities, dates at year 1 and 9999 (in UTC and at +/-14:00), overlong strings,
NUL characters, lone surrogates and wrong types. The importers also get hostile sources
(a JSONL file with a hostile field, a single-row table holding a hostile history).
Helpers and strategies are tests/hostile/test_input_values.py's."""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import math
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import hypothesis.strategies as st
import psycopg
import pytest
from hypothesis import given, settings

import shardstore
from shardstore.core.bind import AsyncReader
from shardstore.models import Turn
from tests.embedders import HashEmbedder
from tests.hostile.test_input_values import FIXTURE_OK, Opaque, _insert, _nest, db_state

# methods that take no data from the caller (lifecycle), with why they are not walked
NO_USER_DATA = {
    "close": "ends the store",
    "drain_folds": "waits for the background folder; takes no argument",
}
JSON_PARAMS = {"message", "messages", "state", "metadata", "value", "awaiting", "checkpoint"}

PLUS14 = timezone(timedelta(hours=14))
MINUS14 = timezone(timedelta(hours=-14))
# by name: hypothesis prints what it draws, and Python's repr of a value nested 5,000
# levels deep is itself a RecursionError
HOSTILE: dict[str, Callable[[], Any]] = {
    "list nested 300": lambda: _nest(300, "list"),
    "dict nested 2000": lambda: _nest(2_000, "dict"),
    "mixed nested 5000": lambda: _nest(5_000, "mixed"),
    "2**31": lambda: 2**31,
    "2**63": lambda: 2**63,
    "-2**63-1": lambda: -(2**63) - 1,
    "-1": lambda: -1,
    "0": lambda: 0,
    "10**5000": lambda: 10**5000,
    "nan": lambda: math.nan,
    "inf": lambda: math.inf,
    "-inf": lambda: -math.inf,
    "1e308": lambda: 1e308,
    "-0.0": lambda: -0.0,
    "year 1 UTC": lambda: datetime(1, 1, 1, tzinfo=UTC),
    "year 1 +14:00": lambda: datetime(1, 1, 1, tzinfo=PLUS14),
    "year 9999 UTC": lambda: datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    "year 9999 -14:00": lambda: datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=MINUS14),
    "naive datetime": lambda: datetime(2020, 1, 1),
    "timedelta.max": lambda: timedelta.max,
    "timedelta.min": lambda: timedelta.min,
    "timedelta -1 day": lambda: timedelta(days=-1),
    "timedelta 0": lambda: timedelta(0),
    "100k chars": lambda: "x" * 100_000,
    "NUL": lambda: "a\x00b",
    "lone surrogate": lambda: "\ud800",
    "empty string": lambda: "",
    "blank": lambda: " ",
    "sql": lambda: "'; DROP TABLE shardstore.sessions; --",
    "date string 9999": lambda: "9999-12-31T23:59:59+00:00",
    "string nan": lambda: "nan",
    "bytes": lambda: b"bytes",
    "bytearray": lambda: bytearray(b"x"),
    "set": lambda: {1, 2},
    "object": Opaque,
    "None": lambda: None,
    "True": lambda: True,
    "False": lambda: False,
    "empty list": list,
    "empty dict": dict,
    "empty tuple": tuple,
    "1.5": lambda: 1.5,
    "uuid": uuid.uuid4,
    "Decimal NaN": lambda: Decimal("NaN"),
    "complex": lambda: 1 + 2j,
    "[None]": lambda: [None],
    "[NUL, surrogate]": lambda: ["\x00", "\ud800"],
    "[nan]": lambda: [math.nan],
    "int key": lambda: {1: "int key"},
    "message with nan": lambda: {"role": "user", "c": math.nan},
    "message nested 5000": lambda: {"role": "user", "c": _nest(5_000, "list")},
    "pair": lambda: ("not-a-uuid", 2**70),
    "a generator": lambda: (x for x in [1]),
}
hostile_value = st.sampled_from(sorted(HOSTILE))


class Summarizer:
    model = "stub"

    def __call__(self, turns: list[Turn]) -> str:
        return f"{len(turns)} turns"


class World:
    """What a valid call names: a session with turns, a checkpoint, a run, an artifact
    and a fact of tenant acme, and the database as an import source."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.tenant = "acme"
        self.n = 0

    def build(self, store: shardstore.Store) -> None:
        self.sid = store.create_session(self.tenant, "u", "a")
        store.append_turns(self.sid, [{"role": "user", "content": f"turn {i}"} for i in range(4)])
        self.checkpoint_id = store.checkpoint(self.sid, {"step": 1}).checkpoint_id
        self.run_id = store.open_run(self.sid, framework="f", thread_key="t").run_id
        self.ref = store.put_artifact(self.tenant, b"artifact", content_type="text/plain")
        store.remember(self.tenant, "u", "k", "v", source=(self.sid, 0))
        self.turns = store.tail(self.sid)
        self.info = store.session(self.sid)

    def fresh(self) -> str:
        self.n += 1
        return f"{self.n}"

    def jsonl(self, field: str | None = None, raw: str = "") -> io.StringIO:
        """A JSONL export of one new session; ``field`` of its turn line replaced by the
        JSON text ``raw``."""
        sid = str(uuid.uuid4())
        head = {
            "kind": "session",
            "format": "shardstore.jsonl",
            "version": 1,
            "session_id": sid,
            "tenant_id": self.tenant,
            "subject_id": None,
            "agent_id": None,
            "metadata": {},
            "created_at": "2026-01-01T00:00:00+00:00",
        }
        turn: dict[str, Any] = {
            "kind": "turn",
            "turn_seq": 0,
            "created_at": "2026-01-01T00:00:01+00:00",
            "idempotency_key": None,
            "tokens": 3,
            "message": {"role": "user", "content": "x"},
        }
        lines = [json.dumps(head), json.dumps(turn)]
        if field is not None:
            marker = '"@@"'
            turn[field] = "@@"
            lines[1] = json.dumps(turn).replace(marker, raw, 1)
        lines.append(json.dumps({"kind": "end", "session_id": sid, "turns": 1}))
        return io.StringIO("\n".join(lines) + "\n")

    def table(self, history: tuple[str, Any] | None = None) -> str:
        """A new single-row source table in the test database (schema public, outside
        what db_state watches) with one row; ``history``: (SQL giving its jsonb history,
        that SQL's parameter), else a valid history."""
        name = f"src_{self.fresh()}"
        sql, value = history or ("%s::jsonb", json.dumps([{"role": "user", "content": "hi"}]))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {name} (id text PRIMARY KEY, history jsonb)")
            conn.execute(f"INSERT INTO {name} VALUES (%s, {sql})", (self.fresh(), value))
        return name


def valid_calls(w: World) -> dict[str, dict[str, Any]]:
    """A valid call of every walked method, by keyword, every parameter named."""
    sid, tenant = w.sid, w.tenant
    msg = {"role": "user", "content": "hi"}
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return {
        "append_turn": dict(
            session_id=sid, message=msg, idempotency_key=None, retry=False, checkpoint=None
        ),
        "append_turns": dict(
            session_id=sid, messages=[msg], idempotency_keys=None, retry=False, checkpoint=None
        ),
        "attach_payload": dict(
            span=None,
            data=b"payload",
            name="p",
            content_type="text/plain",
            tenant_id=tenant,
            session_id=sid,
        ),
        "checkpoint": dict(
            session_id=sid,
            state={"s": 1},
            tool_calls=None,
            tool_results=None,
            sub_step=None,
            parent_id=None,
            idempotency_key=None,
            metadata=None,
            artifacts=None,
        ),
        "checkpoints": dict(session_id=sid, limit=None, before=None),
        "chunks": dict(session_id=sid, last=None),
        "close_run": dict(run_id=w.run_id, status="done", error=None),
        "configure_text_search": dict(language="english"),
        "configure_sealed_vectors": dict(enabled=True),
        "context": dict(
            session_id=sid,
            max_tokens=1000,
            recent_min_tokens=None,
            summaries=True,
            recall=None,
            k=5,
            facts_subject=None,
            tokenizer=None,
        ),
        "create_session": dict(
            tenant_id=tenant, subject_id=None, agent_id=None, session_id=None, metadata=None
        ),
        "distribute": dict(delegate=True),
        "embed": dict(limit=None, batch_size=16, progress=False, session_id=None),
        "expand": dict(turns=w.turns),
        "export_sessions": dict(
            session_ids=[sid],
            tenant_id=None,
            subject_id=None,
            out=io.StringIO(),
            progress=False,
            no_artifact_bytes=False,
            report=None,
            decrypt=False,
        ),
        "fact_history": dict(tenant_id=tenant, subject="u", key="k"),
        "flush": dict(session_id=sid),
        "forget": dict(tenant_id=tenant, subject="u", key="k"),
        "fork": dict(
            session_id=sid, at_turn_seq=None, checkpoint_id=None, new_session_id=None, metadata=None
        ),
        "get_artifact": dict(tenant_id=tenant, artifact_id=w.ref.artifact_id),
        "get_run": dict(run_id=w.run_id),
        "history": dict(session_id=sid, from_seq=0, to_seq=None, expand=False),
        "import_jsonl": dict(
            source=w.jsonl(),
            on_existing="refuse",
            batch_size=500,
            progress=False,
            remap_ids=False,
            import_id=None,
            on_error="raise",
        ),
        "import_langgraph": dict(
            source_dsn=w.dsn,
            tenant_id=tenant,
            thread_id=None,
            channel="messages",
            batch_size=500,
            on_error="raise",
            progress=False,
        ),
        "import_single_row": dict(
            source_dsn=w.dsn,
            table=w.table(),
            id_column="id",
            history_column="history",
            tenant_id=tenant,
            tenant_column=None,
            subject_column=None,
            created_column=None,
            messages_key="messages",
            batch_size=500,
            on_error="raise",
            progress=False,
        ),
        "list_artifacts": dict(tenant_id=tenant, state=None, limit=None),
        "maintain": dict(
            dry_run=True,
            premake=None,
            retention=None,
            flush_idle=timedelta(seconds=300),
            lock_timeout=timedelta(seconds=1),
            archive=None,
            embed=False,
            keep_checkpoints=None,
            max_embed=None,
            embed_seconds=None,
            progress=False,
            artifact_grace=None,
        ),
        "mark_awaiting": dict(run_id=w.run_id, awaiting={"tool": "x"}),
        "open_artifact": dict(tenant_id=tenant, artifact_id=w.ref.artifact_id),
        "open_run": dict(
            session_id=sid, framework="f", thread_key=w.fresh(), run_id=None, metadata=None
        ),
        "premake_partitions": dict(premake=None),
        "purge_before": dict(
            timestamp=datetime(2001, 1, 1, tzinfo=UTC),
            tenant_id=None,
            dry_run=True,
            vacuum=False,
            batch_size=100,
            progress=False,
            truncate_partitions=True,
        ),
        "purge_range": dict(
            session_id=sid, before_turn_seq=1, before=None, dry_run=True, vacuum=False
        ),
        "purge_session": dict(session_id=sid, dry_run=True, vacuum=False, shred=False),
        "purge_subject": dict(
            tenant_id=tenant,
            subject_id="u",
            dry_run=True,
            vacuum=False,
            batch_size=100,
            progress=False,
            shred=False,
        ),
        "purge_tenant": dict(
            tenant_id=tenant,
            dry_run=True,
            vacuum=False,
            batch_size=100,
            progress=False,
            shred=False,
        ),
        "put_artifact": dict(
            tenant_id=tenant,
            data=b"bytes",
            content_type="text/plain",
            required_for_resume=False,
            owner=None,
        ),
        "recall": dict(tenant_id=tenant, subject="u", keys=None, as_of=None),
        "rotate_data_key": dict(tenant_id=tenant, subject_id="u", session_id=None, batch_size=100),
        "record_step": dict(run_id=w.run_id, steps=1, usd_cost=None),
        "reembed": dict(model=None, progress=False, batch_size=16),
        "ref_artifact": dict(
            tenant_id=tenant,
            artifact_id=w.ref.artifact_id,
            owner_type="external",
            owner_id="o",
            required_for_resume=False,
            expires_at=None,
        ),
        "remember": dict(
            tenant_id=tenant,
            subject="u",
            key="k2",
            value={"v": 1},
            source=(sid, 0),
            confidence=None,
            valid_from=None,
        ),
        "restore": dict(session_id=sid, checkpoint_id=None, n=None, max_tokens=None),
        "resume_run": dict(run_id=w.run_id),
        "rewind": dict(session_id=sid, to_turn_seq=3),
        "runs": dict(tenant_id=tenant, session_id=None, status=None, framework=None, limit=None),
        "search": dict(
            query="turn",
            session_id=sid,
            tenant_id=None,
            agent_id=None,
            since=None,
            until=None,
            k=5,
            mode="vector",
        ),
        "session": dict(session_id=sid),
        "sessions": dict(
            tenant_id=tenant,
            subject_id=None,
            agent_id=None,
            since=at,
            before=None,
            limit=None,
            external_id=None,
        ),
        "stats": dict(),
        "summaries": dict(session_id=sid),
        "summarize": dict(
            summarizer=Summarizer(), session_id=sid, tenant_id=None, limit=None, progress=False
        ),
        "sweep_artifacts": dict(grace=None, dry_run=True),
        "tail": dict(session_id=sid, n=None, max_tokens=None, expand=False),
        "tail_explained": dict(session_id=sid, n=None, max_tokens=None),
        "text_search_language": dict(),
        "sealed_vectors": dict(),
        "unref_artifact": dict(
            tenant_id=tenant,
            artifact_id=w.ref.artifact_id,
            owner_type="external",
            owner_id="nobody",
        ),
    }


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    """Every public method of ``cls`` with its parameters (less the store)."""
    out = {}
    for name, member in inspect.getmembers(cls, callable):
        if name.startswith("_") or name in NO_USER_DATA:
            continue
        sig = inspect.signature(member)
        out[name] = sig.replace(parameters=list(sig.parameters.values())[1:])
    return out


def test_every_public_method_has_arguments(dsn: str) -> None:
    """The walk covers every public method, sync and asyncio, with every parameter; a new
    method or parameter fails here until valid_calls() names it."""
    world = World(dsn)
    with shardstore.connect(dsn) as store:
        world.build(store)
        calls = valid_calls(world)
    sync, aio = public_methods(shardstore.Store), public_methods(shardstore.AsyncStore)
    assert set(sync) == set(aio), "Store and AsyncStore differ: bind the method in both"
    missing = sorted(set(sync) - set(calls))
    assert not missing, f"add a valid call for {missing} to valid_calls() (or NO_USER_DATA)"
    assert not set(calls) - set(sync), f"valid_calls() names gone methods {set(calls) - set(sync)}"
    for name, sig in sync.items():
        assert list(aio[name].parameters) == list(sig.parameters), name
        named, wanted = set(calls[name]), set(sig.parameters)
        assert named == wanted, (
            f"valid_calls()[{name!r}] must name each parameter: add {sorted(wanted - named)},"
            f" drop {sorted(named - wanted)}"
        )


# ---------------------------------------------------------------- calling, sync and asyncio


def call_sync(store: shardstore.Store, name: str, kwargs: dict[str, Any]) -> Any:
    result = getattr(store, name)(**kwargs)
    if isinstance(result, Iterator):
        return list(result)
    if isinstance(result, io.BufferedReader):
        with result:
            return result.read()
    return result


async def call_async(store: shardstore.AsyncStore, name: str, kwargs: dict[str, Any]) -> Any:
    result = getattr(store, name)(**kwargs)
    if inspect.isasyncgen(result):
        return [item async for item in result]
    result = await result
    if isinstance(result, AsyncReader):
        async with result:
            return await result.read()
    return result


@st.composite
def hostile_call(draw: st.DrawFn, names: list[str]) -> tuple[str, str, Any]:
    """(method, parameter, how): the parameter's value replaced by a hostile one, or (for
    JSON parameters) a hostile value put inside the valid one; the importers' source
    given hostile content."""
    name = draw(st.sampled_from(names))
    params = list(inspect.signature(getattr(shardstore.Store, name)).parameters)[1:]
    if not params:
        return name, "", None
    param = draw(st.sampled_from(params))
    if param in JSON_PARAMS and draw(st.booleans()):
        poison = draw(hostile_value)
        return name, param, ("inside", poison, draw(st.lists(st.integers(0, 7), max_size=4)))
    if name == "import_jsonl" and param == "source" and draw(st.booleans()):
        field = draw(
            st.sampled_from(
                ["created_at", "turn_seq", "tokens", "message", "idempotency_key", "kind"]
            )
        )
        raw = draw(st.sampled_from(sorted(HOSTILE_JSON_TEXT)))
        return name, param, ("jsonl", field, raw)
    if name == "import_single_row" and param == "table" and draw(st.booleans()):
        return name, param, ("table", draw(st.sampled_from(sorted(HOSTILE_HISTORY))))
    return name, param, ("value", draw(hostile_value))


def _deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


# a JSONL turn line's field as raw JSON text, by name
HOSTILE_JSON_TEXT = {
    "array nested 5000": _deep_text(5_000),
    "message nested 5000": '{"role": "user", "c": ' + _deep_text(5_000) + "}",
    "9999 UTC": '"9999-12-31T23:59:59+00:00"',
    "year 1 +14:00": '"0001-01-01T00:00:00+14:00"',
    "year 1 -14:00": '"0001-01-01T00:00:00-14:00"',
    "9999 -14:00": '"9999-12-31T23:59:59.999999-14:00"',
    "naive": '"2026-01-01T00:00:00"',
    "not a date": '"not a date"',
    "5000 digits": "1" * 5_000,
    "-30 digits": "-" + "9" * 30,
    "2**64": str(2**64),
    "1e999": "1e999",
    "NaN": "NaN",
    "-Infinity": "-Infinity",
    "NUL": '"\\u0000"',
    "surrogate": '"\\ud800"',
    "null": "null",
    "[]": "[]",
    "role 5": '{"role": 5}',
    "message with 5000 digits": '{"role": "user", "n": ' + "1" * 5_000 + "}",
}
# a single-row history, by name: (SQL giving the jsonb, its parameter)
HOSTILE_HISTORY: dict[str, tuple[str, Any]] = {
    "element nested 5000": ("%s::jsonb", '[{"role": "user", "c": ' + _deep_text(5_000) + "}]"),
    "element nested 1500": ("%s::jsonb", '[{"role": "user", "c": ' + _deep_text(1_500) + "}]"),
    "5000 digits": ("%s::jsonb", '[{"role": "user", "n": ' + "1" * 5_000 + "}]"),
    "1e400": ("%s::jsonb", '[{"role": "user", "n": 1e400}]'),
    "ints": ("%s::jsonb", "[1, 2]"),
    "messages 5": ("%s::jsonb", '{"messages": 5}'),
    "string": ("%s::jsonb", '"just a string"'),
    "NULL": ("%s::jsonb", None),
    "array nested 3000": ("%s::jsonb", _deep_text(3_000)),
    "3 MB element": (
        "jsonb_build_array(jsonb_build_object('role', 'user', 'c', repeat('x', %s)))",
        3_000_000,
    ),
}


def make_kwargs(w: World, name: str, param: str, how: Any) -> dict[str, Any]:
    kwargs = valid_calls(w)[name]
    if how is None:
        return kwargs
    if how[0] == "value":
        kwargs[param] = HOSTILE[how[1]]()
    elif how[0] == "inside":
        kwargs[param] = _insert(
            kwargs[param] if kwargs[param] is not None else {"role": "u"},
            HOSTILE[how[1]](),
            [0, *how[2]],
        )
    elif how[0] == "jsonl":
        kwargs[param] = w.jsonl(how[1], HOSTILE_JSON_TEXT[how[2]])
    else:
        kwargs[param] = w.table(HOSTILE_HISTORY[how[1]])
    return kwargs


FORBIDDEN = (RecursionError, OverflowError, ValueError, TypeError, psycopg.Error)


def check(outcome: BaseException | None, before: Any, dsn: str, what: str) -> None:
    """A refused call raised a ShardstoreError and wrote nothing."""
    if outcome is None:
        return
    if not isinstance(outcome, shardstore.ShardstoreError):
        raise AssertionError(f"{what} raised {type(outcome).__name__}") from outcome
    assert db_state(dsn) == before, f"{what} raised {outcome!r:.200} but wrote"


WALKED = sorted(public_methods(shardstore.Store))


@pytest.fixture
def world(
    dsn: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[World, shardstore.Store]]:
    monkeypatch.chdir(tmp_path)  # export_sessions(out=<hostile string>) writes that file
    store = shardstore.connect(
        dsn, offload_over=256, embedding_model=HashEmbedder(), background_fold=False
    )
    w = World(dsn)
    w.build(store)
    try:
        yield w, store
    finally:
        store.close()


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=FIXTURE_OK)
@given(call=hostile_call(WALKED))
def test_every_method_refuses_hostile_values_typed_and_writes_nothing(
    world: tuple[World, shardstore.Store], call: tuple[str, str, Any]
) -> None:
    w, store = world
    name, param, how = call
    kwargs = make_kwargs(w, name, param, how)
    before = db_state(w.dsn)
    outcome: BaseException | None = None
    try:
        call_sync(store, name, kwargs)
    except Exception as exc:  # checked: a ShardstoreError, nothing written
        outcome = exc
    check(outcome, before, w.dsn, f"{name}({param}={how!r:.120})")


@pytest.fixture
def aworld(
    dsn: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[World, shardstore.AsyncStore, asyncio.AbstractEventLoop]]:
    monkeypatch.chdir(tmp_path)  # export_sessions(out=<hostile string>) writes that file
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(
        shardstore.connect_async(
            dsn, offload_over=256, embedding_model=HashEmbedder(), background_fold=False
        )
    )
    w = World(dsn)
    with shardstore.connect(dsn, offload_over=256, embedding_model=HashEmbedder()) as sync:
        w.build(sync)
    try:
        yield w, store, loop
    finally:
        loop.run_until_complete(store.close())
        loop.close()


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURE_OK)
@given(call=hostile_call(WALKED))
def test_every_async_method_refuses_hostile_values_typed_and_writes_nothing(
    aworld: tuple[World, shardstore.AsyncStore, asyncio.AbstractEventLoop],
    call: tuple[str, str, Any],
) -> None:
    w, store, loop = aworld
    name, param, how = call
    kwargs = make_kwargs(w, name, param, how)
    before = db_state(w.dsn)
    outcome: BaseException | None = None
    try:
        loop.run_until_complete(call_async(store, name, kwargs))
    except Exception as exc:  # checked: a ShardstoreError, nothing written
        outcome = exc
    check(outcome, before, w.dsn, f"async {name}({param}={how!r:.120})")
