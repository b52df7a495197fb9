"""Listing sessions (``store.sessions()``): newest first, filters,
keyset paging, purged sessions hidden, last activity, the indexes used, hostile input, the
asyncio store, Row-Level Security and the ``shardstore sessions`` command."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.cli import main
from shardstore.core.sql import query
from shardstore.schema import rls
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role


def _make(store: shardstore.Store) -> list[uuid.UUID]:
    """Six sessions, oldest first: acme (subjects u1/u2, agents a/b) and globex."""
    owners = [
        ("acme", "u1", "a"),
        ("acme", "u2", "a"),
        ("globex", "u1", "a"),
        ("acme", "u1", "b"),
        ("acme", None, None),
        ("globex", "u9", "b"),
    ]
    return [store.create_session(*o) for o in owners]


def test_newest_first_with_filters_counts_and_activity(store: shardstore.Store) -> None:
    ids = _make(store)
    store.append_turns(ids[0], [{"role": "user", "content": f"m{i}"} for i in range(3)])
    everything = store.sessions()
    assert [s.session_id for s in everything] == ids[::-1]
    first = next(s for s in everything if s.session_id == ids[0])
    assert first.turn_count == 3 and first.chunk_count == 1 and not first.purged
    assert first.last_turn_at is not None and first.last_turn_at >= first.created_at
    assert all(s.last_turn_at is None for s in everything if s.session_id != ids[0])
    assert store.session(ids[0]).last_turn_at == first.last_turn_at  # same field in session()

    def listed(**filters: Any) -> list[uuid.UUID]:
        return [s.session_id for s in store.sessions(**filters)]

    assert listed(tenant_id="acme") == [ids[4], ids[3], ids[1], ids[0]]
    assert listed(tenant_id="acme", subject_id="u1") == [ids[3], ids[0]]
    assert listed(tenant_id="acme", agent_id="a") == [ids[1], ids[0]]
    assert listed(tenant_id="acme", subject_id="u1", agent_id="b") == [ids[3]]
    assert listed(subject_id="u1") == [ids[3], ids[2], ids[0]]
    assert listed(tenant_id="nobody") == []
    assert listed(tenant_id="acme", limit=2) == [ids[4], ids[3]]
    cut = store.session(ids[3]).created_at
    assert listed(since=cut) == [ids[5], ids[4], ids[3]]
    assert listed(since=cut.astimezone(timezone_plus_two())) == [ids[5], ids[4], ids[3]]
    assert listed(since=datetime.now(UTC) + timedelta(days=1)) == []


def timezone_plus_two() -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=2))


def test_keyset_paging_by_info_or_id(store: shardstore.Store) -> None:
    ids = [store.create_session("acme", f"u{i}") for i in range(7)]
    pages: list[list[uuid.UUID]] = []
    before: Any = None
    while True:
        page = store.sessions(tenant_id="acme", limit=3, before=before)
        if not page:
            break
        pages.append([s.session_id for s in page])
        before = page[-1]
    assert pages == [ids[6:3:-1], ids[3:0:-1], ids[0:1]]
    # by session id (what the CLI's --before passes), as a UUID or its text
    assert [s.session_id for s in store.sessions(before=ids[4])] == ids[3::-1]
    assert [s.session_id for s in store.sessions(before=str(ids[1]), limit=5)] == [ids[0]]
    # a session created meanwhile does not shift the next page
    page = store.sessions(tenant_id="acme", limit=2)
    store.create_session("acme")
    after = store.sessions(tenant_id="acme", limit=2, before=page[-1])
    assert [s.session_id for s in after] == [ids[4], ids[3]]
    with pytest.raises(shardstore.SessionNotFound):
        store.sessions(before=uuid.uuid4())


def test_equal_creation_times_page_exactly(store: shardstore.Store, dsn: str) -> None:
    ids = [store.create_session("acme") for _ in range(5)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE shardstore.sessions SET created_at = '2026-01-01T00:00Z' "
            "WHERE session_id = ANY(%s)",
            (ids,),
        )
    seen: list[uuid.UUID] = []
    before: Any = None
    while page := store.sessions(limit=2, before=before):
        seen += [s.session_id for s in page]
        before = page[-1]
    assert seen == sorted(ids, reverse=True)


def test_purged_sessions_are_not_listed(store: shardstore.Store) -> None:
    ids = _make(store)
    store.purge_session(ids[1])
    store.purge_subject("acme", "u1")
    assert [s.session_id for s in store.sessions(tenant_id="acme")] == [ids[4]]
    assert {s.session_id for s in store.sessions()} == {ids[2], ids[4], ids[5]}
    # a purged session still works as a cursor: the page continues after it
    assert [s.session_id for s in store.sessions(before=ids[3])] == [ids[2]]


def test_listing_reads_the_indexes(store: shardstore.Store, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO shardstore.sessions (session_id, tenant_id, subject_id, agent_id,"
            " created_at) SELECT gen_random_uuid(), 't' || (i % 30), 's' || (i % 7),"
            " 'a' || (i % 5), now() - i * interval '1 second' FROM generate_series(1, 6000) i"
        )
        conn.execute("ANALYZE shardstore.sessions")
        cases = {
            "sessions_list": {"tenant": "t3"},
            "sessions_list_subject": {"tenant": "t3", "subject": "s3"},
            "sessions_list_agent": {"tenant": "t3", "agent": "a3"},
            "sessions_list_all": {},
        }
        for index, given in cases.items():
            params: dict[str, Any] = {
                "tenant": None,
                "subject": None,
                "agent": None,
                "since": None,
                "external": None,
                "before_at": datetime.now(UTC),
                "before_id": uuid.uuid4(),
                "limit": 10,
                **given,
            }
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query("session_list"), params))
            assert f"Index Scan using {index} on" in plan, (index, plan)
            assert "Sort" not in plan, plan  # read in index order: no sort, stops at LIMIT
            assert "Index Cond: " in plan and "ROW(created_at, session_id) <" in plan, plan


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"tenant_id": 7}, "tenant_id"),
        ({"tenant_id": ""}, "tenant_id"),
        ({"tenant_id": "x" * 100_000}, "tenant_id"),
        ({"tenant_id": "a\x00b"}, "tenant_id"),
        ({"subject_id": b"u1"}, "subject_id"),
        ({"subject_id": "\ud800"}, "subject_id"),
        ({"agent_id": ["a"]}, "agent_id"),
        ({"since": datetime(2026, 1, 1)}, "since"),
        ({"since": "2026-01-01T00:00Z"}, "since"),
        ({"since": 1_700_000_000}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 2**40}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"before": "not-a-uuid"}, "before"),
        ({"before": 12}, "before"),
        ({"before": ("2026-01-01", uuid.uuid4())}, "before"),
        ({"external_id": ""}, "external_id"),
        ({"external_id": 7}, "external_id"),
        ({"external_id": "a\x00b"}, "external_id"),
    ],
)
def test_hostile_input_is_a_typed_error(
    store: shardstore.Store, kwargs: dict[str, Any], what: str
) -> None:
    with pytest.raises(shardstore.InvalidInput, match=what):
        store.sessions(**kwargs)


def test_positional_filters_are_refused(store: shardstore.Store) -> None:
    with pytest.raises(TypeError):
        store.sessions("acme")  # type: ignore[misc]


def test_async_store_lists_the_same(store: shardstore.Store, dsn: str) -> None:
    ids = _make(store)

    async def listing() -> tuple[list[uuid.UUID], list[uuid.UUID]]:
        astore = await shardstore.connect_async(dsn)
        try:
            page = await astore.sessions(tenant_id="acme", limit=2)
            rest = await astore.sessions(tenant_id="acme", before=page[-1])
            return [s.session_id for s in page], [s.session_id for s in rest]
        finally:
            await astore.close()

    page, rest = asyncio.run(listing())
    assert page == [ids[4], ids[3]] and rest == [ids[1], ids[0]]
    assert [s.session_id for s in store.sessions(tenant_id="acme")] == page + rest


@pytest.mark.slow
def test_sessions_by_framework_id(store: shardstore.Store, dsn: str, capsys: Any) -> None:
    """The session an adapter made for a framework id is found by it, in every tenant that
    has one, by the API (sync and asyncio) and the CLI."""
    from shardstore.integrations.ids import external_metadata, external_session_id

    made = {}
    for tenant in ("acme", "globex"):
        sid = external_session_id("langgraph", tenant, "thread-1")
        made[tenant] = store.create_session(
            tenant, session_id=sid, metadata=external_metadata("langgraph", "thread-1")
        )
    store.create_session("acme", metadata=external_metadata("langgraph", "thread-2"))
    store.create_session("acme")
    assert {s.session_id for s in store.sessions(external_id="thread-1")} == set(made.values())
    [one] = store.sessions(tenant_id="acme", external_id="thread-1")
    assert one.session_id == made["acme"] and one.metadata["framework"] == "langgraph"
    assert store.sessions(external_id="thread-9") == []

    async def listing() -> list[uuid.UUID]:
        astore = await shardstore.connect_async(dsn)
        try:
            return [s.session_id for s in await astore.sessions(external_id="thread-1")]
        finally:
            await astore.close()

    assert set(asyncio.run(listing())) == set(made.values())
    rc, out, _ = _cli(dsn, capsys, "sessions", "--external-id", "thread-1", "--json")
    assert rc == 0 and {d["session_id"] for d in json.loads(out)} == {str(v) for v in made.values()}


def test_tenant_store_under_rls_lists_only_its_tenant(store: shardstore.Store, dsn: str) -> None:
    ids = _make(store)
    role = make_tenant_role(dsn)
    try:
        with as_tenant(dsn, role, "acme") as conn:
            tenant_store = rls.connect_tenant(conn)
            assert [s.session_id for s in tenant_store.sessions()] == [
                ids[4],
                ids[3],
                ids[1],
                ids[0],
            ]
            assert tenant_store.sessions(tenant_id="globex") == []
            assert tenant_store.sessions(subject_id="u9") == []
            with pytest.raises(shardstore.SessionNotFound):  # another tenant's cursor
                tenant_store.sessions(before=ids[5])
    finally:
        drop_tenant_role(dsn, role)


# ---------------------------------------------------------------- the command


def _cli(dsn: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--dsn", dsn, *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.slow
def test_cli_sessions_text_and_json(
    store: shardstore.Store,
    dsn: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    ids = _make(store)
    store.append_turns(ids[0], [{"role": "user", "content": "hi"}] * 2)
    rc, out, _ = _cli(dsn, capsys, "sessions", "--tenant", "acme")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["session", "tenant", "subject"]
    assert [line.split()[0] for line in lines[1:5]] == [
        str(i) for i in (ids[4], ids[3], ids[1], ids[0])
    ]
    assert "2" in lines[4].split()  # the turn count of ids[0]
    rc, out, _ = _cli(dsn, capsys, "sessions", "--json", "--tenant", "acme", "--subject", "u1")
    docs = json.loads(out)
    assert rc == 0 and [d["session_id"] for d in docs] == [str(ids[3]), str(ids[0])]
    assert docs[1]["turn_count"] == 2 and docs[1]["last_turn_at"] is not None
    assert docs[0]["last_turn_at"] is None and docs[0]["agent_id"] == "b"
    assert set(docs[0]) >= {"tenant_id", "subject_id", "created_at", "chunk_count", "metadata"}
    rc, out, _ = _cli(dsn, capsys, "sessions", "--agent", "b", "--json")
    assert [d["session_id"] for d in json.loads(out)] == [str(ids[5]), str(ids[3])]
    # paging: a full page says how to get the next one
    rc, out, _ = _cli(dsn, capsys, "sessions", "--limit", "2")
    assert rc == 0 and f"--before {ids[4]}" in out
    rc, out, _ = _cli(dsn, capsys, "sessions", "--limit", "2", "--before", str(ids[4]), "--json")
    assert [d["session_id"] for d in json.loads(out)] == [str(ids[3]), str(ids[2])]
    # since: an age or an ISO time
    rc, out, _ = _cli(dsn, capsys, "sessions", "--since", "1 hour", "--json")
    assert len(json.loads(out)) == 6
    rc, out, _ = _cli(dsn, capsys, "sessions", "--since", "2999-01-01", "--json")
    assert json.loads(out) == []
    rc, out, _ = _cli(dsn, capsys, "sessions", "--tenant", "nobody")
    assert rc == 0 and out.strip() == "no sessions"
    # bad input: exit 2 with a message, not found: 4
    rc, _, err = _cli(dsn, capsys, "sessions", "--limit", "0")
    assert rc == 2
    rc, _, err = _cli(dsn, capsys, "sessions", "--since", "yesterday-ish")
    assert rc == 2 and "cannot read time" in err
    rc, _, err = _cli(dsn, capsys, "sessions", "--before", str(uuid.uuid4()))
    assert rc == 4 and "does not exist" in err
