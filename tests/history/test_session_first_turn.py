"""The first turn a session still holds (``SessionInfo.first_turn_seq``) beside its write head
(``turn_count``): a range purge moves it, never back; a fork inherits it; a rewind cannot go
below it; an export and import keep it; the migration that added it fills it in for sessions
range-purged before. Compared with a plain model: the history is always the turns
``first_turn_seq .. turn_count - 1``."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from importlib import resources

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.cli import main
from shardstore.schema.sqlsplit import split_statements


def _session_with(store: shardstore.Store, turns: int) -> str:
    sid = str(store.create_session(tenant_id="acme"))
    store.append_turns(sid, [{"role": "user", "content": f"m{i}"} for i in range(turns)])
    return sid


def test_a_range_purge_before_an_earlier_cut_reports_where_the_history_starts(
    store: shardstore.Store,
) -> None:
    sid = _session_with(store, 10)
    assert store.purge_range(sid, before_turn_seq=6).cut_turn_seq == 6
    again = store.purge_range(sid, before_turn_seq=3)
    assert again.cut_turn_seq == 6 and again.rows == 0
    info = store.session(sid)
    assert (info.turn_count, info.first_turn_seq, info.stored_turns) == (10, 6, 4)
    assert [t.turn_seq for t in store.history(sid)] == [6, 7, 8, 9]
    (listed,) = [s for s in store.sessions(tenant_id="acme") if str(s.session_id) == sid]
    assert (listed.first_turn_seq, listed.stored_turns) == (6, 4)
    # a cut past the head keeps nothing: the history starts at the head
    assert store.purge_range(sid, before_turn_seq=50).cut_turn_seq == 10
    info = store.session(sid)
    assert (info.turn_count, info.first_turn_seq, info.stored_turns) == (10, 10, 0)
    assert list(store.history(sid)) == []


def test_a_fork_and_a_rewind_keep_the_first_turn(store: shardstore.Store) -> None:
    sid = _session_with(store, 10)
    store.purge_range(sid, before_turn_seq=4)
    child = store.fork(sid, at_turn_seq=7)
    info = store.session(child)
    assert (info.turn_count, info.first_turn_seq, info.stored_turns) == (8, 4, 4)
    assert [t.turn_seq for t in store.history(child)] == [4, 5, 6, 7]
    with pytest.raises(shardstore.InvalidInput, match="first turn"):
        store.rewind(sid, 2)
    assert store.rewind(sid, 5) == 5
    info = store.session(sid)
    assert (info.turn_count, info.first_turn_seq, info.stored_turns) == (5, 4, 1)


def test_purged_session_holds_nothing(store: shardstore.Store) -> None:
    sid = _session_with(store, 3)
    store.purge_session(sid)
    info = store.session(sid)
    assert info.purged and info.stored_turns == 0


@pytest.mark.slow
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 6)),
            st.tuples(st.just("purge"), st.integers(0, 40)),
            st.tuples(st.just("rewind"), st.integers(0, 40)),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_history_is_always_first_turn_to_head(
    store: shardstore.Store, steps: list[tuple[str, int]]
) -> None:
    """A model of the two numbers: an append moves the head; a range purge moves the first
    turn to max(first, min(cut, head)); a rewind to ``to`` is refused below the first turn
    and otherwise moves the head back."""
    sid = _session_with(store, 0)
    first = head = 0
    for kind, value in steps:
        if kind == "append":
            store.append_turns(sid, [{"role": "user", "content": str(i)} for i in range(value)])
            head += value
        elif kind == "purge":
            cut = store.purge_range(sid, before_turn_seq=value).cut_turn_seq
            first = max(first, min(value, head))
            assert cut == first
        elif value > head or value < first:
            with pytest.raises(shardstore.InvalidInput):
                store.rewind(sid, value)
        else:
            store.rewind(sid, value)
            head = value
        info = store.session(sid)
        assert (info.first_turn_seq, info.turn_count) == (first, head)
        assert info.stored_turns == head - first
        assert [t.turn_seq for t in store.history(sid)] == list(range(first, head))


def test_async_store_reports_the_same(dsn: str) -> None:
    async def scenario() -> tuple[int | None, int | None, shardstore.SessionInfo]:
        store = await shardstore.connect_async(dsn)
        try:
            sid = await store.create_session(tenant_id="acme")
            await store.append_turns(sid, [{"role": "user", "content": str(i)} for i in range(5)])
            first = (await store.purge_range(sid, before_turn_seq=2)).cut_turn_seq
            again = (await store.purge_range(sid, before_turn_seq=1)).cut_turn_seq
            return first, again, await store.session(sid)
        finally:
            await store.close()

    first, again, info = asyncio.run(scenario())
    assert (first, again) == (2, 2)
    assert (info.turn_count, info.first_turn_seq, info.stored_turns) == (5, 2, 3)


@pytest.mark.slow
def test_cli_shows_stored_turns_apart_from_the_head(
    store: shardstore.Store, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = _session_with(store, 10)
    store.purge_range(sid, before_turn_seq=6)
    capsys.readouterr()
    assert main(["--dsn", dsn, "session", sid]) == 0
    text = capsys.readouterr().out
    assert "4 (turns 6 to 9)" in text and "next turn" in text
    assert main(["--dsn", dsn, "--json", "session", sid]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["turn_count"], doc["first_turn_seq"], doc["stored_turns"]) == (10, 6, 4)
    assert main(["--dsn", dsn, "sessions", "--tenant", "acme"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(sid))
    assert row.split()[4] == "4"  # the turns column: what is stored, not the head


@pytest.mark.slow
def test_export_and_import_keep_the_first_turn(
    make_store: Callable[..., shardstore.Store],
    new_database: Callable[[], str],
) -> None:
    source = make_store()
    sid = _session_with(source, 8)
    source.purge_range(sid, before_turn_seq=5)
    out = io.StringIO()
    source.export_sessions(sid, out=out)
    target = shardstore.connect(new_database())
    try:
        target.import_jsonl(io.StringIO(out.getvalue()))
        info = target.session(sid)
        assert (info.turn_count, info.first_turn_seq, info.stored_turns) == (8, 5, 3)
        assert [t.turn_seq for t in target.history(sid)] == [5, 6, 7]
    finally:
        target.close()


def test_the_migration_fills_in_sessions_range_purged_before_it(
    store: shardstore.Store, dsn: str
) -> None:
    """The column's backfill, run on sessions as an older shardstore left them: the first
    turn of the oldest chunk kept (the head when nothing is), 0 for an untouched session."""
    cut = _session_with(store, 10)
    store.purge_range(cut, before_turn_seq=6)
    emptied = _session_with(store, 4)
    store.purge_range(emptied, before_turn_seq=4)
    whole = _session_with(store, 3)
    folded = _session_with(store, 30)
    store.flush(folded)
    store.purge_range(folded, before_turn_seq=12)
    migration = next(
        f
        for f in resources.files("shardstore.migrations").iterdir()
        if f.name.endswith("_session_first_turn.sql")
    )
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("ALTER TABLE shardstore.sessions DROP COLUMN first_turn_seq")
        for statement in split_statements(migration.read_text()):
            conn.execute(statement)
    got = {str(s): store.session(s).first_turn_seq for s in (cut, emptied, whole, folded)}
    assert got == {cut: 6, emptied: 4, whole: 0, folded: 12}
    assert [c.first_turn_seq for c in store.chunks(folded)][:1] == [12]
