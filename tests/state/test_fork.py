"""store.fork(session, at_turn_seq=N | checkpoint_id=C): a new session whose history is the
parent's turns 0..N, shared (one row written), read as one history with the fork's own
turns; copy-on-write keeps a fork's history when an ancestor is rewound or range-purged
below the fork point; a GDPR purge of an ancestor erases the shared turns from every fork."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.cli.app import main as cli_main
from shardstore.schema import rls
from tests.embedders import HashEmbedder
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

StoreFactory = Callable[..., shardstore.Store]
SMALL: dict[str, Any] = {
    "chunk_tokens": 60,
    "partition_interval": timedelta(days=3650),
    "premake": 0,
}
WORDS = ["refund", "kernel", "ticket", "ocean", "pixel", "quartz", "lemon", "zebra"]


def msg(i: int, tag: str = "p") -> dict[str, Any]:
    words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 5))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag}{i} {words}"}


def shape(store: shardstore.Store, sid: Any) -> list[tuple[Any, ...]]:
    """chunks() without the partition name (a buffered chunk has none; its copy does)."""
    return [
        (c.chunk_seq, c.first_turn_seq, c.turn_count, c.token_count, c.byte_count, c.is_open)
        for c in store.chunks(sid)
    ]


def view(store: shardstore.Store, sid: Any) -> dict[str, Any]:
    """Everything a reader sees of a session's history."""
    return {
        "history": [(t.turn_seq, t.idempotency_key, t.message) for t in store.history(sid)],
        "tails": [[(t.turn_seq, t.message) for t in store.tail(sid, n=n)] for n in (1, 3, 7, 500)],
        "tokens": [[t.turn_seq for t in store.tail(sid, max_tokens=m)] for m in (10, 40, 10**6)],
        "chunks": shape(store, sid),
        "last2": shape(store, sid)[-2:]
        == [
            (c.chunk_seq, c.first_turn_seq, c.turn_count, c.token_count, c.byte_count, c.is_open)
            for c in store.chunks(sid, last=2)
        ],
        "restore": [(t.turn_seq, t.message) for t in store.restore(sid).turns],
        "turn_count": store.session(sid).turn_count,
    }


def count(dsn: str, sql: str, *params: Any) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def grow(store: shardstore.Store, sid: Any, first: int, n: int, tag: str = "p") -> list[Any]:
    """Append turns first..first+n-1 one by one (sealing chunks on the way), flush half way
    so the history has folded, flushed and buffered parts."""
    sent = [msg(i, tag) for i in range(first, first + n)]
    for j, m in enumerate(sent):
        store.append_turn(sid, m)
        if j == n // 2:
            store.flush(sid)
    return sent


def assert_chunk_rules(store: shardstore.Store, sid: Any) -> None:
    """A fork's chunks read as one session's: seqs gap-free, turns consecutive."""
    chunks = store.chunks(sid)
    seqs = [c.chunk_seq for c in chunks]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True
    nxt = chunks[0].first_turn_seq if chunks else 0
    for c in chunks:
        assert c.first_turn_seq == nxt and c.turn_count > 0
        nxt += c.turn_count
    assert nxt == store.session(sid).turn_count


# ---------------------------------------------------------------- fork points


@pytest.mark.parametrize("at", [-1, 0, 1, 9, 17, 28, 29])
def test_fork_at_a_point_reads_the_prefix(make_store: StoreFactory, at: int) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme", "alice", "bot")
    sent = grow(store, parent, 0, 30)
    child = store.fork(parent, at_turn_seq=at, metadata={"why": "retry"})
    info = store.session(child)
    assert (info.tenant_id, info.subject_id, info.agent_id) == ("acme", "alice", "bot")
    assert info.metadata == {"why": "retry"} and info.turn_count == at + 1
    got = view(store, child)
    assert [m for _s, _k, m in got["history"]] == sent[: at + 1]
    assert [s for s, _k, _m in got["history"]] == list(range(at + 1))
    assert got["tails"][1] == [(i, sent[i]) for i in range(max(0, at - 2), at + 1)]
    assert got["restore"] == [(i, sent[i]) for i in range(at + 1)]
    assert got["last2"]
    # the inherited chunks are the parent's, the one holding the fork point cut at it
    pchunks = shape(store, parent)
    for mine in got["chunks"]:
        theirs = next(c for c in pchunks if c[0] == mine[0])
        if theirs[1] + theirs[2] - 1 <= at:
            assert mine[:5] == theirs[:5]
        else:
            assert mine[1] == theirs[1] and mine[1] + mine[2] - 1 == at
    assert_chunk_rules(store, child)
    # appends go to the child only, from at + 1, in a chunk of its own
    r = store.append_turn(child, msg(0, "c"))
    assert r.turn_seq == at + 1
    assert r.chunk_seq == (got["chunks"][-1][0] + 1 if got["chunks"] else 0)
    assert store.session(parent).turn_count == 30
    assert [t.message for t in store.history(parent)] == sent
    assert store.tail(child, n=1)[0].message == msg(0, "c")
    assert_chunk_rules(store, child)


def test_fork_writes_one_row_whatever_the_length(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme")
    grow(store, parent, 0, 200)
    store.drain_folds()  # a background fold landing between the counts is not the fork's
    tables = ["agent_history", "chunk_map", "turn_buffer", "turn_keys", "fork_copies"]
    before = {t: count(dsn, f"SELECT count(*) FROM shardstore.{t}") for t in tables}
    store.fork(parent)
    store.fork(parent, at_turn_seq=100)
    assert {t: count(dsn, f"SELECT count(*) FROM shardstore.{t}") for t in tables} == before
    assert count(dsn, "SELECT count(*) FROM shardstore.sessions") == 3


def test_stats_count_shared_turns_once(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme")
    grow(store, parent, 0, 30)
    child = store.fork(parent, at_turn_seq=19)
    grow(store, child, 20, 5, tag="c")
    grandchild = store.fork(child)
    store.append_turn(grandchild, msg(25, "g"))
    assert store.stats().turns == 30 + 5 + 1
    store.rewind(parent, 10)  # copy-on-write: the child now stores the chunks holding 10..19
    fork_at = count(dsn, "SELECT fork_at FROM shardstore.sessions WHERE session_id = %s", child)
    assert fork_at < 10
    assert store.stats().turns == 10 + (25 - (fork_at + 1)) + 1


def test_default_fork_point_and_checkpoint(make_store: StoreFactory) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme")
    sent = grow(store, parent, 0, 12)
    cp = store.checkpoint(parent, {"step": 1})
    cp_before = store.checkpoint(parent, {"step": 0})
    grow(store, parent, 12, 5)
    whole = store.fork(parent)
    assert store.session(whole).turn_count == 17
    at_cp = store.fork(parent, checkpoint_id=cp.checkpoint_id)
    assert [t.message for t in store.history(at_cp)] == sent
    assert cp_before.turn_seq == 11
    # the fork's own checkpoints and restore
    store.append_turn(at_cp, msg(0, "c"))
    mine = store.checkpoint(at_cp, {"step": 2})
    assert mine.turn_seq == 12
    restored = store.restore(at_cp, n=4)
    assert restored.checkpoint is not None and restored.checkpoint.state == {"step": 2}
    assert [t.turn_seq for t in restored.turns] == [9, 10, 11, 12]
    assert store.restore(at_cp).turns[-1].message == msg(0, "c")
    # a checkpoint of the parent is not the fork's
    with pytest.raises(shardstore.CheckpointNotFound):
        store.restore(at_cp, cp.checkpoint_id)


def test_forks_of_forks_and_divergence(make_store: StoreFactory) -> None:
    store = make_store(**SMALL)
    a = store.create_session("acme")
    sa = grow(store, a, 0, 20, "a")
    b = store.fork(a, at_turn_seq=12)
    sb = sa[:13] + grow(store, b, 13, 10, "b")
    c = store.fork(b, at_turn_seq=18)  # inside b's own turns
    sc = sb[:19] + grow(store, c, 19, 6, "c")
    d = store.fork(c, at_turn_seq=5)  # inside the prefix c inherits from a (through b)
    sd = sa[:6] + grow(store, d, 6, 4, "d")
    sa += grow(store, a, 20, 5, "a")
    for sid, want in ((a, sa), (b, sb), (c, sc), (d, sd)):
        assert [t.message for t in store.history(sid)] == want
        assert [t.message for t in store.tail(sid, n=9)] == want[-9:]
        assert [t.message for t in store.history(sid, 3, 8)] == want[3:8]
        assert_chunk_rules(store, sid)


# ---------------------------------------------------------------- copy-on-write


@pytest.mark.parametrize("cut", [0, 1, 5, 10, 11])
def test_rewind_of_the_parent_keeps_the_fork(make_store: StoreFactory, dsn: str, cut: int) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme")
    grow(store, parent, 0, 20)
    child = store.fork(parent, at_turn_seq=11)
    grow(store, child, 12, 4, "c")
    grand = store.fork(child, at_turn_seq=13)
    before = {s: view(store, s) for s in (child, grand)}
    store.rewind(parent, cut)
    assert {s: view(store, s) for s in (child, grand)} == before
    assert count(dsn, "SELECT count(*) FROM shardstore.fork_copies") > 0
    # the parent really is rewound, and goes on alone
    assert store.session(parent).turn_count == cut
    store.append_turn(parent, msg(cut, "new"))
    assert {s: view(store, s) for s in (child, grand)} == before
    # and the fork still appends after its own turns
    assert store.append_turn(child, msg(99, "c")).turn_seq == 16


def test_rewind_of_the_fork_below_its_fork_point(make_store: StoreFactory) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme")
    sent = grow(store, parent, 0, 20)
    child = store.fork(parent, at_turn_seq=14)
    grow(store, child, 15, 5, "c")
    cp = store.checkpoint(child, {"at": 19})
    assert store.rewind(child, 8) == 12
    assert [t.message for t in store.history(child)] == sent[:8]
    assert store.checkpoints(child) == [] and cp.turn_seq == 19
    assert store.append_turn(child, msg(8, "c")).turn_seq == 8
    assert_chunk_rules(store, child)
    assert store.rewind(child, 0) == 9
    assert list(store.history(child)) == []
    assert store.append_turn(child, msg(0, "c")).turn_seq == 0
    assert [t.message for t in store.history(parent)] == sent


def test_range_purge_of_the_parent_keeps_the_fork(make_store: StoreFactory) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme")
    sent = grow(store, parent, 0, 20)
    child = store.fork(parent, at_turn_seq=12)
    before = view(store, child)
    dry = store.purge_range(parent, before_turn_seq=15, dry_run=True)
    assert dry.cut_turn_seq == 15
    assert view(store, child) == before
    store.purge_range(parent, before_turn_seq=15)
    assert view(store, child) == before
    assert [t.message for t in store.history(parent)] == sent[15:]
    # a fork that lets go of inherited turns by a range purge: only in the fork
    other = store.fork(child, at_turn_seq=12)
    store.purge_range(other, before_turn_seq=6)
    assert [t.turn_seq for t in store.history(other)] == list(range(6, 13))
    assert view(store, child) == before


# ---------------------------------------------------------------- purges


@pytest.mark.slow
def test_gdpr_purge_of_the_parent_erases_shared_turns_everywhere(
    make_store: StoreFactory, dsn: str
) -> None:
    store = make_store(embedding_model=HashEmbedder(window_tokens=8), **SMALL)
    parent = store.create_session("acme", "alice")
    for i in range(16):
        store.append_turn(parent, {"role": "user", "content": f"xylophone{i} secret"})
    store.flush(parent)
    child = store.fork(parent, at_turn_seq=11)
    store.append_turn(child, {"role": "user", "content": "mine alone"})
    store.rewind(parent, 4)  # copies 4..11 (and their chunk) into the child
    grand = store.fork(child, at_turn_seq=12)
    store.embed()
    assert store.search("xylophone9", session_id=grand, k=3)
    store.purge_session(parent)
    assert [t.message["content"] for t in store.history(child)] == ["mine alone"]
    assert [t.message["content"] for t in store.history(grand)] == ["mine alone"]
    assert [t.message["content"] for t in store.tail(child, n=50)] == ["mine alone"]
    assert all(
        "xylophone" not in t.message["content"]
        for h in store.search("xylophone9", session_id=child, k=20)
        for t in h.turns
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = conn.execute(
            "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'shardstore' AND c.relkind = 'r'"
        ).fetchall()
        for (name,) in names:
            rows = conn.execute(f"SELECT count(*) FROM {name} x WHERE x::text LIKE '%%xylophone%%'")
            assert rows.fetchone() == (0,), name


def test_purge_of_the_fork_leaves_the_parent(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme", "alice")
    sent = grow(store, parent, 0, 15)
    child = store.fork(parent, at_turn_seq=9)
    grow(store, child, 10, 3, "c")
    store.rewind(parent, 3)
    before = view(store, parent)
    store.purge_session(child)
    assert view(store, parent) == before
    assert [t.message for t in store.history(parent)] == sent[:3]
    with pytest.raises(shardstore.SessionPurged):
        store.tail(child)
    assert count(dsn, "SELECT count(*) FROM shardstore.fork_copies") == 0
    with pytest.raises(shardstore.SessionPurged):
        store.fork(child)


@pytest.mark.parametrize("middle_rewinds", [False, True])
def test_purge_of_a_middle_fork_keeps_what_it_held_for_its_parent(
    make_store: StoreFactory, dsn: str, middle_rewinds: bool
) -> None:
    """A fork holding copies of its parent's turns (the parent rewound below the fork point)
    is purged: its own fork keeps those turns, which were the parent's, and loses only the
    purged fork's own (found by the fork state machine: the grandchild read them through the
    purged fork's rows, and the copy record naming the purged fork covered them too). With
    the middle fork rewound first, its fork reads copies it made of them."""
    store = make_store(**SMALL)
    parent = store.create_session("acme", "alice")
    sent = grow(store, parent, 0, 12)
    middle = store.fork(parent, at_turn_seq=9)
    own = grow(store, middle, 10, 3, "m")
    store.rewind(parent, 2)  # turns 2..9 now live in the middle fork as copies
    grand = store.fork(middle, at_turn_seq=12)
    if middle_rewinds:
        store.rewind(middle, 11)  # the grandchild copies what it reads: 0..12
    assert [t.message for t in store.history(grand)] == sent[:10] + own
    store.purge_session(middle)
    assert [t.message for t in store.history(grand)] == sent[:10]
    assert [t.message for t in store.tail(grand, n=50)] == sent[:10]
    assert store.session(grand).turn_count == 13
    assert sum(c.turn_count for c in store.chunks(grand)) == 10
    assert [t.message for t in store.history(parent)] == sent[:2]
    assert (
        count(
            dsn,
            "SELECT count(*) FROM shardstore.fork_copies f JOIN shardstore.sessions s"
            " ON s.session_id = f.origin_session_id WHERE s.purged_at IS NOT NULL",
        )
        == 0
    )


@pytest.mark.parametrize("change", ["rewind", "purge_range"])
def test_a_change_of_the_grandparent_keeps_a_fork_of_a_purged_fork(
    make_store: StoreFactory, change: str
) -> None:
    """The grandchild reads the grandparent's turns through a purged middle fork: a rewind or
    range purge of the grandparent copies them into the grandchild first, as for a live
    fork (found by the fork state machine: copy-on-write skipped the purged fork and did
    not reach its forks)."""
    store = make_store(**SMALL)
    grandparent = store.create_session("acme", "alice")
    sent = grow(store, grandparent, 0, 10)
    middle = store.fork(grandparent, at_turn_seq=7)
    grow(store, middle, 8, 3, "m")
    grand = store.fork(middle, at_turn_seq=10)
    store.purge_session(middle)
    before = view(store, grand)
    assert [t.message for t in store.history(grand)] == sent[:8]
    if change == "rewind":
        store.rewind(grandparent, 2)
    else:
        store.purge_range(grandparent, before_turn_seq=9)
    assert view(store, grand) == before


def test_a_fork_at_an_erased_turn_inherits_the_turns_below_it(make_store: StoreFactory) -> None:
    """Forking a session at a turn that a GDPR purge of a fork in its lineage erased: the new
    fork inherits what the source still shows below that turn (it was created empty and
    unlinked, found by the fork state machine), and the owner's later turns never show
    through the link."""
    store = make_store(**SMALL)
    grandparent = store.create_session("acme", "alice")
    sent = grow(store, grandparent, 0, 6)
    middle = store.fork(grandparent, at_turn_seq=5)
    grow(store, middle, 6, 3, "m")
    child = store.fork(middle, at_turn_seq=8)
    store.purge_session(middle)
    assert [t.message for t in store.history(child)] == sent
    fork = store.fork(child, at_turn_seq=7)  # turn 7 was the purged middle fork's
    assert [t.message for t in store.history(fork)] == sent
    assert store.session(fork).turn_count == 8
    grow(store, grandparent, 6, 4, "g")  # the grandparent goes on: not inherited
    appended = store.append_turn(fork, {"role": "user", "content": "mine"})
    assert appended.turn_seq == 8
    assert [t.message["content"] for t in store.history(fork)] == [m["content"] for m in sent] + [
        "mine"
    ]
    assert [t.turn_seq for t in store.tail(fork, n=3)] == [4, 5, 8]


def test_purge_subject_erases_forks_of_the_subject(make_store: StoreFactory) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme", "alice")
    grow(store, parent, 0, 10)
    child = store.fork(parent, at_turn_seq=5)
    keep = store.create_session("acme", "bob")
    store.purge_subject("acme", "alice")
    for sid in (parent, child):
        with pytest.raises(shardstore.SessionPurged):
            store.history(sid).__next__()
    assert store.session(keep).turn_count == 0


# ---------------------------------------------------------------- errors


@pytest.mark.slow
def test_hostile_input_writes_nothing(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme")
    grow(store, parent, 0, 6)
    other = store.create_session("acme")
    cp_other = store.checkpoint(other, {"x": 1})
    purged = store.create_session("acme")
    store.purge_session(purged)
    existing = store.create_session("acme")

    def rows() -> int:
        return count(dsn, "SELECT count(*) FROM shardstore.sessions")

    n = rows()
    cases: list[tuple[type[Exception], dict[str, Any], Any]] = [
        (shardstore.SessionNotFound, {}, uuid.uuid4()),
        (shardstore.SessionPurged, {}, purged),
        (shardstore.InvalidInput, {}, "not-a-uuid"),
        (shardstore.InvalidInput, {}, None),
        (shardstore.InvalidInput, {"at_turn_seq": 6}, parent),
        (shardstore.InvalidInput, {"at_turn_seq": -2}, parent),
        (shardstore.InvalidInput, {"at_turn_seq": 2**63}, parent),
        (shardstore.InvalidInput, {"at_turn_seq": 1.0}, parent),
        (shardstore.InvalidInput, {"at_turn_seq": True}, parent),
        (shardstore.InvalidInput, {"at_turn_seq": "1"}, parent),
        (
            shardstore.InvalidInput,
            {"at_turn_seq": 1, "checkpoint_id": cp_other.checkpoint_id},
            parent,
        ),
        (shardstore.CheckpointNotFound, {"checkpoint_id": cp_other.checkpoint_id}, parent),
        (shardstore.CheckpointNotFound, {"checkpoint_id": uuid.uuid4()}, parent),
        (shardstore.InvalidInput, {"checkpoint_id": "x"}, parent),
        (shardstore.SessionConflict, {"new_session_id": existing}, parent),
        (shardstore.SessionConflict, {"new_session_id": parent}, parent),
        (shardstore.SessionPurged, {"new_session_id": purged}, parent),
        (shardstore.InvalidInput, {"new_session_id": 7}, parent),
        (shardstore.InvalidInput, {"metadata": []}, parent),
        (shardstore.InvalidInput, {"metadata": {"x": float("nan")} | {"y": object()}}, parent),
        (shardstore.InvalidInput, {"metadata": {1: 2}}, parent),
        (
            shardstore.InvalidInput,
            {"metadata": {"s": "\ud800" * 2 + "\x00" + "a" * 10, "o": {1}}},
            parent,
        ),
    ]
    for exc, kwargs, sid in cases:
        with pytest.raises(exc):
            store.fork(sid, **kwargs)
        assert rows() == n, (exc, kwargs)
    with pytest.raises(TypeError):
        store.fork(parent, 3)  # type: ignore[misc]
    assert store.session(parent).turn_count == 6


# ---------------------------------------------------------------- asyncio, RLS, CLI, search


def test_async_fork(dsn: str) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn, **SMALL)
        try:
            parent = await store.create_session("acme")
            await store.append_turns(parent, [msg(i) for i in range(15)])
            await store.flush(parent)
            child = await store.fork(parent, at_turn_seq=7)
            assert [t.turn_seq for t in await store.tail(child, n=3)] == [5, 6, 7]
            assert [t.turn_seq async for t in store.history(child)] == list(range(8))
            assert (await store.append_turn(child, msg(0, "c"))).turn_seq == 8
            await store.rewind(parent, 2)
            assert [t.message async for t in store.history(child)][:8] == [msg(i) for i in range(8)]
            with pytest.raises(shardstore.InvalidInput):
                await store.fork(parent, at_turn_seq=5)
            assert len(await store.chunks(child)) >= 2
        finally:
            await store.close()

    asyncio.run(main())


def test_rls_tenant_cannot_fork_another_tenant(dsn: str) -> None:
    owner = shardstore.connect(dsn, **SMALL)
    acme = owner.create_session("acme")
    globex = owner.create_session("globex")
    for sid in (acme, globex):
        owner.append_turns(sid, [msg(i) for i in range(10)])
    role = make_tenant_role(dsn)
    try:
        with as_tenant(dsn, role, "acme") as conn:
            tenant = rls.connect_tenant(conn, chunk_tokens=60)
            with pytest.raises(shardstore.SessionNotFound):
                tenant.fork(globex)
            mine = tenant.fork(acme, at_turn_seq=4)
            assert [t.turn_seq for t in tenant.history(mine)] == [0, 1, 2, 3, 4]
            tenant.append_turn(mine, msg(5, "c"))
            assert tenant.rewind(acme, 1) == 9
            assert [t.turn_seq for t in tenant.tail(mine, n=50)] == list(range(6))
            tenant.close()
        assert owner.session(mine).tenant_id == "acme"
        assert count(dsn, "SELECT count(*) FROM shardstore.sessions") == 3
    finally:
        owner.close()
        drop_tenant_role(dsn, role)


def test_cli_fork(make_store: StoreFactory, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = make_store()
    sid = store.create_session("acme")
    store.append_turns(sid, [msg(i) for i in range(5)])
    cp = store.checkpoint(sid, {"at": 4})
    assert cli_main(["--dsn", dsn, "fork", str(sid), "--at", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["parent"] == str(sid) and doc["turn_count"] == 3
    assert [t.turn_seq for t in store.history(doc["session_id"])] == [0, 1, 2]
    new = str(uuid.uuid4())
    assert (
        cli_main(
            [
                "--dsn",
                dsn,
                "fork",
                str(sid),
                "--checkpoint",
                str(cp.checkpoint_id),
                "--new-session",
                new,
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == new
    assert store.session(new).turn_count == 5
    assert cli_main(["--dsn", dsn, "fork", str(sid), "--at", "9"]) == 2
    assert "past the end" in capsys.readouterr().err
    assert cli_main(["--dsn", dsn, "fork", str(uuid.uuid4())]) == 4
    assert cli_main(["--dsn", dsn, "fork", str(sid), "--at", "-2"]) == 2
    assert (
        cli_main(
            ["--dsn", dsn, "fork", str(sid), "--at", "1", "--checkpoint", str(cp.checkpoint_id)]
        )
        == 2
    )
    assert count(dsn, "SELECT count(*) FROM shardstore.sessions") == 3


@pytest.mark.slow
def test_session_search_in_a_fork(make_store: StoreFactory) -> None:
    store = make_store(embedding_model=HashEmbedder(window_tokens=8), **SMALL)
    parent = store.create_session("acme")
    sent = [msg(i) for i in range(20)]
    sent[3] = {"role": "user", "content": "the secret word is xylophone"}
    sent[15] = {"role": "user", "content": "marmalade marmalade"}
    store.append_turns(parent, sent)
    store.flush(parent)
    child = store.fork(parent, at_turn_seq=10)
    store.append_turn(child, {"role": "user", "content": "walrus walrus"})
    store.flush(child)
    store.embed()
    hit = store.search("xylophone", session_id=child, k=1)[0]
    assert hit.session_id == child and hit.turns[0].turn_seq == 3
    assert store.search("walrus", session_id=child, k=1)[0].turns[0].turn_seq == 11
    # the parent's turns after the fork point are not the fork's
    found = store.search("marmalade", session_id=child, k=50)
    assert all(t.turn_seq <= 11 for h in found for t in h.turns)
    assert all(
        "walrus" not in t.message["content"]
        for h in store.search("walrus", session_id=parent, k=50)
        for t in h.turns
    )
    # after copy-on-write the fork's copies are embedded as its own
    store.rewind(parent, 1)
    store.embed()
    hit = store.search("xylophone", session_id=child, k=1)[0]
    assert hit.session_id == child and hit.turns[0].turn_seq == 3


def test_a_fact_sourced_at_an_inherited_turn_names_its_owner(make_store: StoreFactory) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme", "user:1")
    grow(store, parent, 0, 12)
    child = store.fork(parent, at_turn_seq=7)
    grow(store, child, 8, 3, tag="c")
    inherited = store.remember("acme", "user:1", "city", "Lisbon", source=(child, 3))
    own = store.remember("acme", "user:1", "pet", "cat", source=(child, 9))
    assert (inherited.source_session_id, inherited.source_turn_seq) == (parent, 3)
    assert (own.source_session_id, own.source_turn_seq) == (child, 9)
    with pytest.raises(shardstore.InvalidInput):
        store.remember("acme", "user:1", "x", 1, source=(child, 11))  # past the end
    store.purge_session(parent)  # erases turn 3 everywhere, and the fact drawn from it
    assert {f.key for f in store.recall("acme", "user:1")} == {"pet"}


@pytest.mark.slow
def test_retention_of_a_parent_leaves_its_fork_a_session_of_its_own(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    """Retention deletes a parent whose last turn is older than the boundary while a fork
    of it goes on: the fork's shared turns went with the parent, the fork no longer names a
    parent that does not exist, and it reads, appends and restores from its own turns."""
    import time

    store = make_store(partition_interval=timedelta(seconds=1), premake=2, chunk_tokens=300)
    parent = store.create_session("acme", "user:1")
    store.append_turns(
        parent, [{"role": "user", "content": f"parent {i} " + "w " * 40} for i in range(12)]
    )
    store.flush(parent)
    fork = store.fork(parent, at_turn_seq=8)
    time.sleep(4.5)  # the parent's turns end more than the retention below ago
    # the fork's new turn stays inside the retention even if a slow machine stalls here
    store.append_turn(fork, {"role": "user", "content": "the fork goes on"})
    report = store.maintain(retention=timedelta(seconds=3), embed=False)
    assert report.errors == [] and report.sessions_expired == 1
    with pytest.raises(shardstore.SessionNotFound):
        store.session(parent)
    with psycopg.connect(dsn) as conn:
        lineage = conn.execute(
            "SELECT fork_parent, fork_at, fork_chunk FROM shardstore.sessions"
            " WHERE session_id = %s",
            (fork,),
        ).fetchone()
    assert lineage == (None, None, None)
    assert [t.turn_seq for t in store.history(fork)] == [9]
    assert [t.turn_seq for t in store.tail(fork, n=20)] == [9]
    assert store.append_turn(fork, {"role": "user", "content": "and on"}).turn_seq == 10
    assert [t.turn_seq for t in store.restore(fork, n=5).turns] == [9, 10]
