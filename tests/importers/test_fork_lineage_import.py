"""Fork lineage survives an export and an import: forks (of forks), a fork whose parent was
rewound below its fork point (copy-on-write: copied turns and a lowered fork point) and one
whose parent was range-purged (all copied, no lineage left) come back as forks with the
same parents, fork points and copy origins, compared table by table; a purge of an origin
then erases the copied turns in the copy as in the source; under remapped ids the lineage
follows the new ids; a parent this database lacks gives a plain session, and a file whose
inherited turns differ from the parent's here is refused."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.errors import ImportRejected
from shardstore.importers.remap import IdMap

SMALL: dict[str, Any] = {"chunk_tokens": 120, "default_tail_turns": 1, "background_fold": False}
TENANT = "acme"


def say(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 6}


@pytest.fixture(scope="module")
def databases(_databases: Any, server_dsn: str) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        made.append(_databases.take())
        return make_conninfo(server_dsn, dbname=made[-1])

    yield make
    _databases.drop_later(made)


def build(store: shardstore.Store) -> dict[str, uuid.UUID]:
    main = store.create_session(TENANT, "alice", "agent")
    store.append_turns(main, [say(i) for i in range(40)])
    store.checkpoint(main, {"at": 39})
    a = store.fork(main, at_turn_seq=29, metadata={"branch": "a"})
    store.append_turns(a, [say(100 + i) for i in range(4)])
    store.checkpoint(a, {"branch": "a"})
    b = store.fork(a, at_turn_seq=31)  # a fork of a fork, inheriting a's own turns too
    store.append_turns(b, [say(200 + i) for i in range(3)])
    store.rewind(main, 25)  # below a's fork point: a gets copies, its fork point goes down
    store.append_turns(main, [say(300 + i) for i in range(2)])
    p = store.create_session(TENANT, "bob")
    store.append_turns(p, [say(i) for i in range(20)])
    d = store.fork(p, at_turn_seq=14)
    store.append_turns(d, [say(400 + i) for i in range(3)])
    store.purge_range(p, 5)  # d takes over every inherited turn: no lineage left
    store.drain_folds()
    return {"main": main, "a": a, "b": b, "p": p, "d": d}


def export(store: shardstore.Store) -> str:
    out = io.StringIO()
    store.export_sessions(tenant_id=TENANT, out=out)
    return out.getvalue()


@pytest.fixture(scope="module")
def source(databases: Callable[[], str]) -> tuple[str, dict[str, uuid.UUID], str]:
    dsn = databases()
    with shardstore.connect(dsn, **SMALL) as store:
        sids = build(store)
        text = export(store)
    return dsn, sids, text


SESSIONS = (
    "SELECT session_id, tenant_id, subject_id, agent_id, metadata, created_at, first_turn_seq, "
    "next_turn_seq, fork_parent, fork_at, fork_chunk FROM shardstore.sessions "
    "WHERE tenant_id = %s ORDER BY session_id"
)
COPIES = (
    "SELECT session_id, origin_session_id, min(first_turn_seq), max(last_turn_seq), "
    "sum(last_turn_seq - first_turn_seq + 1) FROM shardstore.fork_copies "
    "GROUP BY session_id, origin_session_id ORDER BY session_id, origin_session_id"
)
CHECKPOINTS = (
    "SELECT session_id, checkpoint_id, turn_seq, state FROM shardstore.checkpoints "
    "ORDER BY session_id, seq"
)


def tables(dsn: str) -> dict[str, list[Any]]:
    with psycopg.connect(dsn) as conn:
        return {
            "sessions": conn.execute(SESSIONS, (TENANT,)).fetchall(),
            "fork_copies": conn.execute(COPIES).fetchall(),
            "checkpoints": conn.execute(CHECKPOINTS).fetchall(),
        }


def turns(store: shardstore.Store, sids: dict[str, uuid.UUID]) -> dict[str, list[Any]]:
    return {
        name: [(t.turn_seq, t.created_at, t.idempotency_key, t.message) for t in store.history(sid)]
        for name, sid in sids.items()
    }


@pytest.mark.slow
def test_forks_rewinds_and_range_purges_round_trip_table_by_table(
    source: tuple[str, dict[str, uuid.UUID], str], databases: Callable[[], str]
) -> None:
    src, sids, text = source
    docs = [json.loads(line) for line in text.splitlines()]
    heads = {d["session_id"]: d for d in docs if d["kind"] == "session"}
    order = [d["session_id"] for d in docs if d["kind"] == "session"]
    # parents before their forks, though a tenant is listed newest first
    assert (
        order.index(str(sids["main"])) < order.index(str(sids["a"])) < order.index(str(sids["b"]))
    )
    assert order.index(str(sids["p"])) < order.index(str(sids["d"]))
    a, d = heads[str(sids["a"])], heads[str(sids["d"])]
    assert a["fork"]["parent"] == str(sids["main"]) and a["fork"]["at"] < 25 and a["copies"]
    assert d["fork"] is None and {c["origin"] for c in d["copies"]} == {str(sids["p"])}
    assert heads[str(sids["b"])]["fork"] == {"parent": str(sids["a"]), "at": 31}

    dst = databases()
    with shardstore.connect(dst, **SMALL) as b:
        report = b.import_jsonl(io.StringIO(text))
        assert (report.sessions, report.forks, report.skipped) == (5, 2, ())
        with shardstore.connect(src, **SMALL) as s:
            assert turns(b, sids) == turns(s, sids)
        assert b.export_sessions(tenant_id=TENANT, out=io.StringIO()).forks == 2
        again = export(b)
    want, got = tables(src), tables(dst)
    assert want["fork_copies"] and want["checkpoints"]
    for name in want:
        assert got[name] == want[name], name
    # the copy's export is the source's (but for its export line)
    assert again.splitlines()[1:] == text.splitlines()[1:]

    # a purge of the origin erases the turns copied from it, in the copy as in the source
    for dsn in (src, dst):
        with shardstore.connect(dsn, **SMALL) as store:
            store.purge_session(sids["p"])
    with shardstore.connect(src, **SMALL) as s, shardstore.connect(dst, **SMALL) as b:
        kept = turns(b, {"d": sids["d"]})
        assert kept == turns(s, {"d": sids["d"]})
        assert [t[0] for t in kept["d"]] == [15, 16, 17]


@pytest.mark.slow
def test_remapped_lineage_follows_the_new_ids(
    source: tuple[str, dict[str, uuid.UUID], str], databases: Callable[[], str]
) -> None:
    _src, sids, text = source
    dst = databases()
    with shardstore.connect(dst, **SMALL) as b:
        b.import_jsonl(io.StringIO(text))
        report = b.import_jsonl(io.StringIO(text), remap_ids=True, import_id="copy")
        assert (report.sessions, report.forks) == (5, 2)
        rerun = b.import_jsonl(io.StringIO(text), remap_ids=True, import_id="copy")
        assert (rerun.sessions, rerun.unchanged) == (0, 5)
    with psycopg.connect(dst) as conn:
        rows = conn.execute(
            "SELECT session_id, fork_parent FROM shardstore.sessions WHERE fork_parent IS NOT NULL"
        ).fetchall()
        origins = conn.execute(
            "SELECT DISTINCT session_id, origin_session_id FROM shardstore.fork_copies"
        ).fetchall()
    new = IdMap("copy").session
    want_lineage = {sids["a"]: sids["main"], sids["b"]: sids["a"]}
    want_lineage |= {new(child): new(parent) for child, parent in want_lineage.items()}
    assert dict(rows) == want_lineage
    want_origins = {(sids["a"], sids["main"]), (sids["d"], sids["p"])}
    want_origins |= {(new(held), new(origin)) for held, origin in want_origins}
    assert set(origins) == want_origins


@pytest.mark.slow
def test_a_parent_not_here_gives_a_plain_session_and_differing_turns_are_refused(
    source: tuple[str, dict[str, uuid.UUID], str], databases: Callable[[], str]
) -> None:
    src, sids, _text = source
    with shardstore.connect(src, **SMALL) as s:
        only_fork = io.StringIO()
        s.export_sessions([sids["b"]], out=only_fork)
        want = turns(s, {"b": sids["b"]})
    dst = databases()
    with shardstore.connect(dst, **SMALL) as b:
        report = b.import_jsonl(io.StringIO(only_fork.getvalue()))
        assert (report.sessions, report.forks) == (1, 0)
        assert turns(b, {"b": sids["b"]}) == want
        assert b.session(sids["b"]).turn_count == len(want["b"])

    # the parent here holds the fork's inherited turns, but the file says otherwise
    with shardstore.connect(src, **SMALL) as s:
        parent = io.StringIO()
        s.export_sessions([sids["a"]], out=parent)
    docs = [json.loads(line) for line in only_fork.getvalue().splitlines()]
    for doc in docs:
        if doc["kind"] == "turn" and doc["turn_seq"] == 31:
            doc["created_at"] = "2020-01-01T00:00:00+00:00"
    other = databases()
    with shardstore.connect(other, **SMALL) as c:
        assert c.import_jsonl(io.StringIO(parent.getvalue())).sessions == 1
        with pytest.raises(ImportRejected, match="inherited turns differ"):
            c.import_jsonl(io.StringIO("\n".join(json.dumps(d) for d in docs)))
    with psycopg.connect(other) as conn:
        there = conn.execute(
            "SELECT 1 FROM shardstore.sessions WHERE session_id = %s", (sids["b"],)
        ).fetchall()
    assert there == []  # nothing of the refused session written


def _with_head(text: str, sid: uuid.UUID, change: dict[str, Any]) -> str:
    docs = [json.loads(line) for line in text.splitlines()]
    for doc in docs:
        if doc["kind"] == "session" and doc["session_id"] == str(sid):
            doc.update(change)
    return "\n".join(json.dumps(d) for d in docs)


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, match",
    [
        ({"copies": {"origin": "x"}}, "copies must be a list"),
        ({"copies": ["x"]}, r"copies\[0\] must be an object"),
        ({"copies": [{"origin": "nope", "first": 0, "last": 1}]}, r"copies\[0\].origin"),
        ({"copies": [{"origin": str(uuid.uuid4()), "first": 3, "last": 1}]}, "ends before"),
        ({"copies": [{"origin": str(uuid.uuid4()), "first": -1, "last": 1}]}, "first"),
        ({"copies": [{"origin": str(uuid.uuid4()), "first": 0, "last": 2**70}]}, "last"),
        ({"copies": [{"origin": str(uuid.uuid4()), "first": 0, "last": 0}] * 10_001}, "more than"),
        ({"fork": {"parent": "p", "at": 3}}, "session_id"),
        ({"fork": {"parent": str(uuid.uuid4()), "at": -2}}, "fork.at"),
        ({"fork": [1]}, "fork must be an object"),
    ],
)
def test_hostile_lineage_fields_write_nothing(
    source: tuple[str, dict[str, uuid.UUID], str],
    databases: Callable[[], str],
    change: dict[str, Any],
    match: str,
) -> None:
    _src, sids, text = source
    dst = databases()
    with shardstore.connect(dst, **SMALL) as b:
        with pytest.raises(ImportRejected, match=match):
            b.import_jsonl(io.StringIO(_with_head(text, sids["a"], change)))
        with psycopg.connect(dst) as conn:
            there = conn.execute("SELECT session_id FROM shardstore.sessions").fetchall()
        assert (sids["a"],) not in there and (sids["main"],) in there  # the one before stays


@pytest.mark.slow
def test_copies_the_session_does_not_hold_or_from_elsewhere(
    source: tuple[str, dict[str, uuid.UUID], str], databases: Callable[[], str]
) -> None:
    _src, sids, text = source
    past_end = [{"origin": str(sids["p"]), "first": 900, "last": 901}]
    elsewhere = [{"origin": str(uuid.uuid4()), "first": 0, "last": 4}]
    dst = databases()
    with shardstore.connect(dst, **SMALL) as b:
        with pytest.raises(ImportRejected, match="not the session's"):
            b.import_jsonl(io.StringIO(_with_head(text, sids["d"], {"copies": past_end})))
        report = b.import_jsonl(
            io.StringIO(_with_head(text, sids["d"], {"copies": elsewhere})), on_existing="skip"
        )
        (why,) = [s.reason for s in report.skipped if "copied from" in s.reason]
        assert "lacks: imported as its own turns" in why
        assert [t.turn_seq for t in b.history(sids["d"])] == list(range(18))


@pytest.mark.slow
def test_async_import_restores_the_same_lineage(
    source: tuple[str, dict[str, uuid.UUID], str], databases: Callable[[], str]
) -> None:
    _src, _sids, text = source
    dst = databases()

    async def go() -> Any:
        astore = await shardstore.connect_async(dst, **SMALL)
        try:
            return await astore.import_jsonl(io.StringIO(text))
        finally:
            await astore.close()

    report = asyncio.run(go())
    assert (report.sessions, report.forks) == (5, 2)
    ref = databases()  # (the source's origin was purged by the round trip test)
    with shardstore.connect(ref, **SMALL) as b:
        b.import_jsonl(io.StringIO(text))
    assert tables(dst) == tables(ref)


@pytest.mark.slow
def test_a_parent_or_origin_of_another_tenant_is_never_linked(
    source: tuple[str, dict[str, uuid.UUID], str], databases: Callable[[], str]
) -> None:
    _src, sids, text = source
    dst = databases()
    with shardstore.connect(dst, **SMALL) as b:
        other = b.create_session("globex", "alice", "agent")  # same owners, another tenant
        b.append_turns(other, [say(i) for i in range(40)])
        hostile = _with_head(text, sids["a"], {"fork": {"parent": str(other), "at": 19}})
        hostile = _with_head(
            hostile, sids["d"], {"copies": [{"origin": str(other), "first": 0, "last": 14}]}
        )
        report = b.import_jsonl(io.StringIO(hostile))
        assert any(str(other) in s.reason for s in report.skipped)
        assert [t.turn_seq for t in b.history(other)] == list(
            range(40)
        )  # the other tenant's session as it was
    with psycopg.connect(dst) as conn:
        linked = conn.execute(
            "SELECT session_id FROM shardstore.sessions WHERE fork_parent = %s "
            "UNION SELECT session_id FROM shardstore.fork_copies WHERE origin_session_id = %s",
            (other, other),
        ).fetchall()
    assert linked == []
