"""An import stopped by a bad source row (on_error="raise") says what it imported and
committed before it: the error's message and its ``report`` (API and CLI), and a re-run
after the row is fixed completes the rest without duplicates."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import psycopg
import pytest

import shardstore
from shardstore.cli import main
from shardstore.errors import ImportRejected

GOOD = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def _source(dsn: str) -> None:
    """rows a, b good; c not a list of messages; d good (rows are imported in id order)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE chats (id text PRIMARY KEY, history jsonb)")
        for key, value in (("a", GOOD), ("b", GOOD), ("c", {"not": "a list"}), ("d", GOOD)):
            conn.execute("INSERT INTO chats VALUES (%s, %s)", (key, json.dumps(value)))


ARGS = {"id_column": "id", "history_column": "history", "tenant_id": "acme"}


@pytest.mark.slow
def test_the_error_says_what_was_committed_before_it(
    store: shardstore.Store, new_database: Callable[[], str]
) -> None:
    source = new_database()
    _source(source)
    with pytest.raises(ImportRejected, match=r"row id='c'.*2 sessions \(4 turns\)") as caught:
        store.import_single_row(source, "chats", **ARGS)
    report = caught.value.report
    assert (report.sessions, report.turns) == (2, 4)
    assert len(store.sessions(tenant_id="acme")) == 2  # a and b stay, d was never reached
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE chats SET history = %s WHERE id = 'c'", (json.dumps(GOOD),))
    again = store.import_single_row(source, "chats", **ARGS)
    assert (again.sessions, again.turns, again.unchanged) == (2, 4, 2)


@pytest.mark.slow
def test_nothing_before_it_is_said_too(
    store: shardstore.Store, new_database: Callable[[], str]
) -> None:
    source = new_database()
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE chats (id text PRIMARY KEY, history jsonb)")
        conn.execute("INSERT INTO chats VALUES ('a', '42')")
    with pytest.raises(ImportRejected, match="nothing was imported before it") as caught:
        store.import_single_row(source, "chats", **ARGS)
    assert caught.value.report.sessions == 0


@pytest.mark.slow
def test_async_import_says_the_same(dsn: str, new_database: Callable[[], str]) -> None:
    source = new_database()
    _source(source)

    async def scenario() -> ImportRejected:
        store = await shardstore.connect_async(dsn)
        try:
            await store.import_single_row(source, "chats", **ARGS)
        except ImportRejected as exc:
            return exc
        finally:
            await store.close()
        raise AssertionError("the bad row did not stop the import")

    assert asyncio.run(scenario()).report.sessions == 2


@pytest.mark.slow
def test_cli_prints_it(
    dsn: str, new_database: Callable[[], str], capsys: pytest.CaptureFixture[str]
) -> None:
    source = new_database()
    _source(source)
    argv = ["--dsn", dsn, "import", "single-row", "--source-dsn", source, "--table", "chats"]
    argv += ["--id-column", "id", "--history-column", "history", "--tenant", "acme"]
    assert main(argv) == 2
    assert "2 sessions (4 turns) imported before it stay committed" in capsys.readouterr().err
