"""store.import_single_row / ``shardstore import single-row``: a table with one row per
conversation, its whole history in one JSON column, imported into sessions (real source
tables on the test server; hostile shapes and names; resume; asyncio)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.errors import DatabaseUnavailable, ImportRejected, InvalidInput
from shardstore.integrations.ids import external_metadata, external_session_id


def chat(n: int, tag: str = "") -> list[dict[str, Any]]:
    """n chat messages with a tool pair every 5th turn."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 5 == 3:
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
            )
        elif i % 5 == 4:
            out.append({"role": "tool", "tool_call_id": f"c{i - 1}", "content": f"r{i}{tag}"})
        else:
            out.append({"role": "user" if i % 2 else "assistant", "content": f"m{i}{tag} é ☃"})
    return out


def make_source(
    dsn: str,
    rows: list[tuple[Any, ...]],
    *,
    column_type: str = "jsonb",
    id_type: str = "text",
    table: str = "agent_sessions",
) -> None:
    """A source table (id, conversation_history, tenant, subject, created)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL(
                "CREATE TABLE {} (session_id {} PRIMARY KEY, conversation_history {}, "
                "tenant text, subject text, created timestamptz)"
            ).format(
                psycopg.sql.Identifier(table),
                psycopg.sql.SQL(id_type),
                psycopg.sql.SQL(column_type),
            )
        )
        for row in rows:
            values = list(row) + [None] * (5 - len(row))
            if values[1] is not None and not isinstance(values[1], str):
                values[1] = json.dumps(values[1])
            conn.execute(
                psycopg.sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s)").format(
                    psycopg.sql.Identifier(table)
                ),
                values,
            )


@pytest.fixture
def source(new_database: Callable[[], str]) -> str:
    return new_database()


def sid_of(row_id: str, tenant: str = "acme", table: str = "agent_sessions") -> uuid.UUID:
    return external_session_id(f"table:{table}", tenant, row_id)


def history(store: shardstore.Store, sid: uuid.UUID) -> list[dict[str, Any]]:
    return [t.message for t in store.history(sid)]


def run_import(store: shardstore.Store, src: str, **kw: Any) -> shardstore.ImportReport:
    args: dict[str, Any] = {
        "id_column": "session_id",
        "history_column": "conversation_history",
        "tenant_id": "acme",
    }
    args.update(kw)
    return store.import_single_row(src, "agent_sessions", **args)


@pytest.mark.slow
def test_rows_become_sessions_in_order(store: shardstore.Store, source: str) -> None:
    u = str(uuid.uuid4())
    rows = [
        ("a1", chat(37), None, "user:1", "2024-01-02T03:04:05+00"),
        (u, {"messages": chat(12, "x"), "other": 1}, None, None, None),
        ("empty", []),
    ]
    make_source(source, rows)
    cols = {"subject_column": "subject", "created_column": "created"}
    report = run_import(store, source, batch_size=7, **cols)
    assert (report.sessions, report.turns, report.unchanged, report.skipped) == (3, 49, 0, ())
    assert report.bytes > 0
    a1 = sid_of("a1")
    assert history(store, a1) == chat(37)
    info = store.session(a1)
    assert info.subject_id == "user:1" and info.tenant_id == "acme"
    assert info.metadata == external_metadata("table:agent_sessions", "a1")
    assert info.created_at.isoformat() == "2024-01-02T03:04:05+00:00"
    # a UUID id is the session id itself
    assert history(store, uuid.UUID(u)) == chat(12, "x")
    assert store.session(sid_of("empty")).turn_count == 0
    # a re-run writes nothing; a row that grew gets only its new elements
    again = run_import(store, source, **cols)
    assert (again.sessions, again.turns, again.unchanged) == (0, 0, 3)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(
            "UPDATE agent_sessions SET conversation_history = %s WHERE session_id = 'a1'",
            (json.dumps(chat(40)),),
        )
    grown = run_import(store, source, **cols)
    assert (grown.sessions, grown.turns, grown.unchanged) == (1, 3, 2)
    assert history(store, a1) == chat(40)


BAD_ROWS: list[tuple[str, Any, str]] = [
    ("null", None, "the history is NULL"),
    ("scalar", 42, "is a JSON number, not an array"),
    ("string", "[1]", "is a JSON string, not an array"),
    ("nokey", {"msgs": []}, "an object without a 'messages' member"),
    ("notarray", {"messages": {"role": "user"}}, "'messages' member is a JSON object"),
    ("element", [{"role": "user", "content": "ok"}, [1, 2]], "element 1: a array"),
    ("norole", [{"content": "no role"}], "element 0: a message needs a non-empty string"),
    (
        "huge",
        [{"role": "user", "content": "ok"}, {"role": "user", "content": "x" * 5000}],
        "element 1: 50",
    ),
    ("big", [{"role": "user", "content": "é" * 600}], "element 0: the message is"),
]


def _bad_rows(only: str | None = None) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = [("good1", chat(6))]
    for name, value, _ in BAD_ROWS:
        if only is None or name == only:
            rows.append((name, json.dumps(value) if name == "string" else value))
    if only is None:
        rows.append(("zgood2", chat(3)))
    return rows


def _bad_source(source: str) -> None:
    make_source(source, _bad_rows())


@pytest.mark.slow
def test_bad_rows_raise_naming_the_row_and_write_nothing_of_it(
    make_store: Callable[..., shardstore.Store], source: str
) -> None:
    store = make_store(chunk_max_bytes=1024)
    for name, _, reason in BAD_ROWS:
        make_source(source, _bad_rows(name), table="agent_sessions")
        with pytest.raises(ImportRejected) as caught:
            run_import(store, source)
        assert f"row session_id={name!r}" in str(caught.value) and reason in str(caught.value)
        assert history(store, sid_of("good1")) == chat(6)  # the row before it stays
        with pytest.raises(shardstore.SessionNotFound):
            store.session(sid_of(name))
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("DROP TABLE agent_sessions")
    assert store.stats().turns == 6


@pytest.mark.slow
def test_skip_reports_each_bad_row_and_imports_the_rest(
    make_store: Callable[..., shardstore.Store], source: str
) -> None:
    store = make_store(chunk_max_bytes=1024)
    _bad_source(source)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agent_sessions (session_id, conversation_history, tenant) "
            "VALUES ('notenant', '[]', NULL)"
        )
    report = run_import(store, source, tenant_id=None, tenant_column="tenant", on_error="skip")
    reasons = {s.source: s.reason for s in report.skipped}
    assert set(reasons) == {f"row session_id={n!r}" for n, _, _ in BAD_ROWS} | {
        "row session_id='good1'",
        "row session_id='zgood2'",
        "row session_id='notenant'",
    }
    # good1 and zgood2 have no tenant either: every row is skipped with its reason
    assert all(
        "tenant column is NULL" in reasons[f"row session_id={n!r}"]
        for n in ("good1", "zgood2", "notenant")
    )
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE agent_sessions SET tenant = 'acme'")
    report = run_import(store, source, tenant_id=None, tenant_column="tenant", on_error="skip")
    assert report.sessions == 3 and report.turns == 9
    for name, _, reason in BAD_ROWS:
        assert (
            reason in dict((s.source, s.reason) for s in report.skipped)[f"row session_id={name!r}"]
        )
    assert store.stats().sessions == 3 and store.stats().turns == 9


@pytest.mark.slow
def test_text_and_json_columns(store: shardstore.Store, new_database: Callable[[], str]) -> None:
    text_src, json_src = new_database(), new_database()
    make_source(
        text_src,
        [
            ("a", chat(4)),
            ("b", "not json"),
            ("c", "[NaN]"),
            ("d", '[{"role": "user", "content": "\\u0000"}]'),
        ],
        column_type="text",
    )
    report = run_import(store, text_src, on_error="skip")
    assert report.sessions == 1 and history(store, sid_of("a")) == chat(4)
    assert {s.source for s in report.skipped} == {
        "row session_id='b'",
        "row session_id='c'",
        "row session_id='d'",
    }
    assert all("cannot be read as JSON" in s.reason for s in report.skipped)
    make_source(json_src, [("j", {"messages": chat(5)})], column_type="json")
    assert run_import(store, json_src).turns == 5
    assert history(store, sid_of("j")) == chat(5)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"table": "nope"}, ImportRejected),
        ({"table": "agent_sessions; DROP TABLE agent_sessions"}, ImportRejected),
        ({"table": 'agent_sessions" --'}, ImportRejected),
        ({"table": "a.b.c"}, InvalidInput),
        ({"table": ""}, InvalidInput),
        ({"table": "x\x00"}, InvalidInput),
        ({"id_column": "nope"}, ImportRejected),
        ({"history_column": "session_id) FROM pg_shadow --"}, ImportRejected),
        ({"subject_column": "nope"}, ImportRejected),
        ({"created_column": "subject"}, ImportRejected),  # text, not a time
        ({"history_column": "created"}, ImportRejected),  # cannot be jsonb
        ({"tenant_column": "tenant"}, InvalidInput),  # and tenant_id: give one
        ({"tenant_id": None}, InvalidInput),  # neither
        ({"batch_size": 0}, InvalidInput),
        ({"on_error": "ignore"}, InvalidInput),
        ({"progress": "yes"}, InvalidInput),
        ({"messages_key": 3}, InvalidInput),
        ({"source": ""}, InvalidInput),
        ({"source": "host=127.0.0.1 port=1 dbname=x connect_timeout=1"}, DatabaseUnavailable),
        ({"source": "not a dsn = = ="}, InvalidInput),
    ],
)
def test_hostile_arguments_write_nothing(
    store: shardstore.Store, source: str, args: dict[str, Any], error: type[Exception]
) -> None:
    make_source(source, [("a", chat(3), "acme", "s", "2024-01-01T00:00:00+00")])
    kw: dict[str, Any] = {
        "id_column": "session_id",
        "history_column": "conversation_history",
        "tenant_id": "acme",
    }
    kw.update(args)
    dsn = kw.pop("source", source)
    table = kw.pop("table", "agent_sessions")
    with pytest.raises(error):
        store.import_single_row(dsn, table, **kw)
    assert store.stats().sessions == 0
    with psycopg.connect(source) as conn:  # the source is untouched
        assert conn.execute("SELECT count(*) FROM agent_sessions").fetchone() == (1,)


def test_sql_shaped_names_are_names(store: shardstore.Store, source: str) -> None:
    """A table and columns whose names are SQL: quoted, they just work."""
    evil = 'x"; DROP TABLE agent_sessions; --'
    make_source(source, [("a", chat(3))])
    make_source(source, [("b", chat(2))], table=evil)
    report = store.import_single_row(
        source, evil, id_column="session_id", history_column="conversation_history", tenant_id="t"
    )
    assert report.turns == 2
    assert history(store, sid_of("b", "t", evil)) == chat(2)


@pytest.mark.slow
def test_owner_conflict_and_purged_sessions(store: shardstore.Store, source: str) -> None:
    make_source(source, [("a", chat(3)), ("b", chat(2))])
    store.create_session("acme", "someone-else", session_id=sid_of("a"))
    store.create_session("acme", session_id=sid_of("b"))
    store.purge_session(sid_of("b"))
    report = run_import(store, source, on_error="skip")
    reasons = {s.source: s.reason for s in report.skipped}
    assert "already exists with" in reasons["row session_id='a'"]
    assert "purged" in reasons["row session_id='b'"]
    assert store.stats().turns == 0


@pytest.mark.slow
def test_long_history_streams_in_batches(
    make_store: Callable[..., shardstore.Store], source: str
) -> None:
    """3,000 elements, 64 per round trip, chunks sealed and folded in the transaction."""
    store = make_store(chunk_tokens=500)
    make_source(source, [("long", chat(3000))])
    report = run_import(store, source, batch_size=64)
    assert report.turns == 3000
    sid = sid_of("long")
    assert history(store, sid) == chat(3000)
    chunks = store.chunks(sid)
    assert len(chunks) > 10 and all(c.partition for c in chunks[:-1])  # folded
    assert [t.message for t in store.tail(sid, n=3)] == chat(3000)[-3:]


@pytest.mark.slow
def test_async_store_imports_the_same(dsn: str, source: str) -> None:
    make_source(source, [("a", chat(20)), ("b", {"messages": chat(7)}), ("c", 5)])

    async def go() -> shardstore.ImportReport:
        astore = await shardstore.connect_async(dsn)
        try:
            return await astore.import_single_row(
                source,
                "agent_sessions",
                id_column="session_id",
                history_column="conversation_history",
                tenant_id="acme",
                on_error="skip",
            )
        finally:
            await astore.close()

    report = asyncio.run(go())
    assert (report.sessions, report.turns) == (2, 27)
    assert [s.source for s in report.skipped] == ["row session_id='c'"]
    with shardstore.connect(dsn) as store:
        assert history(store, sid_of("a")) == chat(20)
        assert history(store, sid_of("b")) == chat(7)


@pytest.mark.slow
def test_cli(dsn: str, source: str, capsys: pytest.CaptureFixture[str]) -> None:
    from shardstore.cli import main

    make_source(source, [("a", chat(5), "t1"), ("b", chat(2), "t2"), ("c", json.dumps("x"), "t1")])
    base = [
        "--dsn",
        dsn,
        "import",
        "single-row",
        "--source-dsn",
        source,
        "--table",
        "agent_sessions",
        "--id-column",
        "session_id",
        "--history-column",
        "conversation_history",
        "--tenant-column",
        "tenant",
    ]
    assert main([*base, "--json"]) == 2
    err = json.loads(capsys.readouterr().err)["error"]
    assert err["type"] == "ImportRejected" and "row session_id='c'" in err["message"]
    with shardstore.connect(dsn) as store:  # the rows before the bad one are in
        assert store.stats().turns == 7
    assert main([*base, "--on-error", "skip", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "imported 0 sessions, 0 turns" in out and "2 already complete, 1 skipped" in out
    assert "skipped row session_id='c': the history is a JSON string" in out
    assert main([*base, "--on-error", "skip", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unchanged"] == 2 and doc["turns"] == 0 and len(doc["skipped"]) == 1
    assert main([*base[:-2], "--tenant", "x", "--tenant-column", "tenant"]) == 2  # usage


def test_progress_bar_on_stderr_only_when_asked(
    store: shardstore.Store, source: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """progress=True draws a tqdm bar of turns on stderr; progress=False draws nothing."""
    make_source(source, [("a", chat(7)), ("b", chat(4))])
    capfd.readouterr()
    report = run_import(store, source, progress=True)
    bar = capfd.readouterr().err
    assert (report.sessions, report.turns) == (2, 11)
    assert "turn" in bar and "11" in bar, bar
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(
            "UPDATE agent_sessions SET conversation_history = %s WHERE session_id = 'b'",
            (json.dumps(chat(6)),),
        )
    assert run_import(store, source, progress=False).turns == 2
    assert capfd.readouterr().err == ""
