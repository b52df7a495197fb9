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
            out.append({"role": "assistant", "content": None,
                        "tool_calls": [{"id": f"c{i}", "type": "function",
                                        "function": {"name": "f", "arguments": "{}"}}]})
        elif i % 5 == 4:
            out.append({"role": "tool", "tool_call_id": f"c{i - 1}", "content": f"r{i}{tag}"})
        else:
            out.append({"role": "user" if i % 2 else "assistant", "content": f"m{i}{tag} é ☃"})
    return out


def make_source(dsn: str, rows: list[tuple[Any, ...]], *, column_type: str = "jsonb",
                id_type: str = "text", table: str = "agent_sessions") -> None:
    """A source table (id, conversation_history, tenant, subject, created)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL(
            "CREATE TABLE {} (session_id {} PRIMARY KEY, conversation_history {}, "
            "tenant text, subject text, created timestamptz)"
        ).format(psycopg.sql.Identifier(table), psycopg.sql.SQL(id_type),
                 psycopg.sql.SQL(column_type)))
        for row in rows:
            values = list(row) + [None] * (5 - len(row))
            if values[1] is not None and not isinstance(values[1], str):
                values[1] = json.dumps(values[1])
            conn.execute(psycopg.sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s)").format(
                psycopg.sql.Identifier(table)), values)


@pytest.fixture
def source(new_database: Callable[[], str]) -> str:
    return new_database()


def sid_of(row_id: str, tenant: str = "acme", table: str = "agent_sessions") -> uuid.UUID:
    return external_session_id(f"table:{table}", tenant, row_id)


def history(store: shardstore.Store, sid: uuid.UUID) -> list[dict[str, Any]]:
    return [t.message for t in store.history(sid)]


def run_import(store: shardstore.Store, src: str, **kw: Any) -> shardstore.ImportReport:
    args: dict[str, Any] = {"id_column": "session_id",
                            "history_column": "conversation_history", "tenant_id": "acme"}
    args.update(kw)
    return store.import_single_row(src, "agent_sessions", **args)


def test_rows_become_sessions_in_order(store: shardstore.Store, source: str) -> None:
    u = str(uuid.uuid4())
    rows = [("a1", chat(37), None, "user:1", "2024-01-02T03:04:05+00"),
            (u, {"messages": chat(12, "x"), "other": 1}, None, None, None),
            ("empty", [])]
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
        conn.execute("UPDATE agent_sessions SET conversation_history = %s WHERE session_id = 'a1'",
                     (json.dumps(chat(40)),))
    grown = run_import(store, source, **cols)
    assert (grown.sessions, grown.turns, grown.unchanged) == (1, 3, 2)
    assert history(store, a1) == chat(40)
