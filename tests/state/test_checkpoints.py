"""Checkpoints and restore (shardstore/state/checkpoints.py): positions,
idempotency, atomicity with appends, size, hostile input, purge / retention / RLS, asyncio,
a stateful model, and kills of the writer process and of the server."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import shardstore
from shardstore.schema import rls
from tests.checkpoint_writer import check, run_kills
from tests.faults import CrashableServer, holding, wait_for_backend
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

HOSTILE = {
    "nul": "a\x00b",
    "lone": "x\ud800y",
    "mark": "\ue000starts with the marker",
    "big": 1e300,
    "neg0": -0.0,
    "nested": [{"k": ["\udfff", None, True, 3]}],
    "\x00key": "value",
}


def user(i: int, extra: str = "") -> dict[str, Any]:
    return {"role": "user", "content": f"question {i} {extra}"}


def rows(dsn: str, sql: str, *params: Any) -> list[Any]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def count_checkpoints(dsn: str, sid: Any = None) -> int:
    if sid is None:
        return int(rows(dsn, "SELECT count(*) FROM shardstore.checkpoints")[0][0])
    return int(
        rows(dsn, "SELECT count(*) FROM shardstore.checkpoints WHERE session_id = %s", sid)[0][0]
    )


# ---------------------------------------------------------------- behaviour


def test_checkpoint_restore_and_list(store: shardstore.Store) -> None:
    sid = store.create_session("acme", "user:1")
    empty = store.restore(sid)
    assert empty == shardstore.Restored(checkpoint=None, turns=[])
    first = store.checkpoint(sid, {"step": 0})
    assert first.turn_seq == -1 and first.session_id == sid and first.metadata == {}
    store.append_turns(sid, [user(0), {"role": "assistant", "content": "a0"}])
    second = store.checkpoint(
        sid,
        {"step": 1, "scratch": HOSTILE},
        tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
        tool_results={"c1": HOSTILE},
        sub_step=2,
        parent_id=first.checkpoint_id,
        metadata={"who": "planner", "odd": "\x00"},
    )
    assert second.turn_seq == 1 and second.parent_id == first.checkpoint_id
    store.append_turn(sid, user(2))  # after the checkpoint: not part of its restore
    got = store.restore(sid)
    assert got.checkpoint == second
    assert [t.turn_seq for t in got.turns] == [0, 1]
    # exact round trip of every field, through the table
    listed = store.checkpoints(sid)
    assert listed == [second, first]
    assert listed[0].state["scratch"] == HOSTILE
    assert str(listed[0].state["scratch"]["neg0"]) == "-0.0"
    assert store.restore(sid, first.checkpoint_id) == shardstore.Restored(first, [])
    assert store.restore(sid, str(second.checkpoint_id)).checkpoint == second
    assert store.checkpoints(sid, limit=1) == [second]
    assert store.checkpoints(sid, before=second.checkpoint_id) == [first]
    assert store.checkpoints(sid, before=first.checkpoint_id) == []
    later = datetime.now(UTC) + timedelta(days=1)
    assert store.checkpoints(sid, before=later) == [second, first]
    assert store.checkpoints(sid, before=first.created_at) == []


def test_newest_is_exact_under_equal_timestamps(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = shardstore.connect(conn)
        sid = store.create_session("acme")
        with conn.transaction():  # statement_timestamp() differs; make created_at equal
            made = [store.checkpoint(sid, {"i": i}) for i in range(5)]
            conn.execute("UPDATE shardstore.checkpoints SET created_at = %s", (made[0].created_at,))
        assert store.restore(sid).checkpoint is not None
        assert store.restore(sid).checkpoint.state == {"i": 4}  # type: ignore[union-attr]
        assert [c.state["i"] for c in store.checkpoints(sid)] == [4, 3, 2, 1, 0]
        store.close()


@pytest.mark.slow
def test_restore_positions_across_chunks_and_tails(make_store: Callable[..., Any]) -> None:
    """Restore at old positions, with turns folded in chunks, partly flushed, buffered; a
    tail by n / max_tokens ends at the checkpoint and keeps tool pairs whole."""
    store = make_store(chunk_tokens=120)
    sid = store.create_session("acme")
    marks: list[shardstore.Checkpoint] = []
    seq = 0
    for i in range(30):
        if i % 5 == 3:
            call = {"role": "assistant", "content": None, "tool_calls": [{"id": f"t{i}"}]}
            result = {"role": "tool", "tool_call_id": f"t{i}", "content": "r" * 30}
            store.append_turns(sid, [call, result])
            seq += 2
        else:
            store.append_turn(sid, user(i, "w " * 20))
            seq += 1
        if i % 4 == 0:
            marks.append(store.checkpoint(sid, {"i": i}))
        if i == 17:
            store.flush(sid)
    store.drain_folds()
    assert len(store.chunks(sid)) > 3
    everything = list(store.history(sid))
    for cp in marks:
        full = store.restore(sid, cp.checkpoint_id)
        assert full.turns == everything[: cp.turn_seq + 1]
        for n in (1, 2, 3, 7):
            got = store.restore(sid, cp.checkpoint_id, n=n).turns
            want = everything[max(0, cp.turn_seq + 1 - n) : cp.turn_seq + 1]
            while want and want[0].message["role"] == "tool":
                want = want[1:]
            assert got == want, (cp.turn_seq, n)
        for budget in (1, 50, 200, 10_000):
            got = store.restore(sid, cp.checkpoint_id, max_tokens=budget).turns
            window: list[shardstore.Turn] = []
            for turn in reversed(everything[: cp.turn_seq + 1]):
                if sum(t.tokens for t in window) + turn.tokens > budget:
                    break
                window.insert(0, turn)
            while window and window[0].message["role"] == "tool":
                window = window[1:]
            assert got == window, (cp.turn_seq, budget)
            assert not got or got[0].message["role"] != "tool"
    # the newest: same as tail
    newest = store.checkpoint(sid, {"end": True})
    assert store.restore(sid, n=6).turns == store.tail(sid, n=6)
    assert newest.turn_seq == seq - 1


def test_no_checkpoint_restores_the_history(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    store.append_turns(sid, [user(i) for i in range(5)])
    got = store.restore(sid)
    assert got.checkpoint is None and got.turns == list(store.history(sid))
    assert store.restore(sid, n=2).turns == store.tail(sid, n=2)


def test_checkpoint_idempotency(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")
    store.append_turn(sid, user(0))
    one = store.checkpoint(sid, {"v": 1}, idempotency_key="k", tool_calls=[1])
    store.append_turn(sid, user(1))
    again = store.checkpoint(sid, {"v": 1}, idempotency_key="k", tool_calls=[1])
    assert again == one and again.turn_seq == 0
    # different content, same key: the first, as stored; nothing written
    other = store.checkpoint(sid, {"v": 2}, idempotency_key="k", metadata={"x": 1})
    assert other == one
    assert count_checkpoints(dsn, sid) == 1
    # a turn key and a checkpoint key of the same text do not collide
    r = store.append_turn(sid, user(2), idempotency_key="k", checkpoint={"with": "turn"})
    assert r.checkpoint_id not in (None, one.checkpoint_id)
    assert count_checkpoints(dsn, sid) == 2
    # keys are per session
    sid2 = store.create_session("acme")
    assert store.checkpoint(sid2, {"v": 1}, idempotency_key="k").checkpoint_id != one.checkpoint_id


def test_concurrent_retries_store_one_checkpoint(make_store: Callable[..., Any], dsn: str) -> None:
    store = make_store()
    sid = store.create_session("acme")

    async def main() -> list[shardstore.Checkpoint]:
        astore = await shardstore.connect_async(dsn)
        try:
            return await asyncio.gather(
                *(astore.checkpoint(sid, {"i": i}, idempotency_key="same") for i in range(8))
            )
        finally:
            await astore.close()

    got = asyncio.run(main())
    assert len({c.checkpoint_id for c in got}) == 1
    assert count_checkpoints(dsn, sid) == 1


def test_append_turn_with_checkpoint(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")
    r = store.append_turn(sid, user(0), idempotency_key="u0", checkpoint={"phase": "model"})
    assert r.turn_seq == 0 and r.checkpoint_id is not None and not r.duplicate
    got = store.restore(sid)
    assert got.checkpoint is not None
    assert got.checkpoint.checkpoint_id == r.checkpoint_id and got.checkpoint.turn_seq == 0
    assert got.checkpoint.state == {"phase": "model"}
    # the retry: no second turn, no second checkpoint, the first id
    again = store.append_turn(sid, user(0), idempotency_key="u0", checkpoint={"phase": "other"})
    assert again.duplicate and again.checkpoint_id == r.checkpoint_id
    assert count_checkpoints(dsn, sid) == 1
    # retry=True goes through the same path
    third = store.append_turn(
        sid, user(1), idempotency_key="u1", checkpoint={"phase": "x"}, retry=True
    )
    assert third.checkpoint_id is not None and third.turn_seq == 1
    # a first append without a checkpoint, retried with one: nothing new
    plain = store.append_turn(sid, user(2), idempotency_key="u2")
    dup = store.append_turn(sid, user(2), idempotency_key="u2", checkpoint={"late": 1})
    assert dup.duplicate and dup.checkpoint_id is None and plain.checkpoint_id is None
    # without a key: each call stores a turn and a checkpoint
    a = store.append_turn(sid, user(3), checkpoint={"n": 1})
    b = store.append_turn(sid, user(3), checkpoint={"n": 1})
    assert a.checkpoint_id != b.checkpoint_id and b.turn_seq == a.turn_seq + 1
    # batches: one checkpoint after the last turn, named by every result
    rs = store.append_turns(
        sid, [user(4), user(5), user(6)], ["b4", "b5", "b6"], checkpoint={"batch": True}
    )
    assert len({x.checkpoint_id for x in rs}) == 1 and rs[0].checkpoint_id is not None
    cp = store.restore(sid).checkpoint
    assert cp is not None and cp.turn_seq == rs[-1].turn_seq and cp.state == {"batch": True}
    again_rs = store.append_turns(
        sid, [user(4), user(5), user(6)], ["b4", "b5", "b6"], checkpoint={"batch": 2}
    )
    assert all(x.duplicate for x in again_rs) and again_rs[0].checkpoint_id == rs[0].checkpoint_id
    n = count_checkpoints(dsn, sid)
    with pytest.raises(shardstore.InvalidInput):
        store.append_turns(sid, [], checkpoint={"x": 1})
    assert count_checkpoints(dsn, sid) == n


@pytest.mark.slow
def test_append_with_checkpoint_seals_and_folds(make_store: Callable[..., Any]) -> None:
    """The general path (append_v2 inside): seals, folds, partitions all as without one."""
    store = make_store(chunk_tokens=60)
    sid = store.create_session("acme")
    for i in range(40):
        r = store.append_turn(sid, user(i, "w " * 15), idempotency_key=f"k{i}", checkpoint={"i": i})
        assert r.turn_seq == i
    store.drain_folds()
    assert len(store.chunks(sid)) > 5
    got = store.restore(sid)
    assert got.checkpoint is not None and got.checkpoint.state == {"i": 39}
    assert [t.turn_seq for t in got.turns] == list(range(40))


def test_turn_and_checkpoint_commit_together(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = shardstore.connect(conn)
        sid = store.create_session("acme")
        # bad state: refused client-side, the turn is not stored either
        for bad in ({"x": float("nan")}, ["not", "a", "dict"], {1: "int key"}):
            with pytest.raises(shardstore.InvalidInput):
                store.append_turn(sid, user(0), idempotency_key="u0", checkpoint=bad)  # type: ignore[arg-type]
        assert store.session(sid).turn_count == 0
        # the checkpoint rejected by the server after the turn's insert: neither stays
        conn.execute("ALTER TABLE shardstore.checkpoints ADD CONSTRAINT t_ok CHECK (state ? 'ok')")
        for key in ("u0", None):
            with pytest.raises(shardstore.DatabaseError):
                store.append_turn(sid, user(0), idempotency_key=key, checkpoint={"no": 1})
            with pytest.raises(shardstore.DatabaseError):
                store.append_turns(sid, [user(0), user(1)], checkpoint={"no": 1})
        assert store.session(sid).turn_count == 0
        assert count_checkpoints(dsn) == 0
        r = store.append_turn(sid, user(0), idempotency_key="u0", checkpoint={"ok": 1})
        assert r.turn_seq == 0 and not r.duplicate  # the key was never taken
        conn.execute("ALTER TABLE shardstore.checkpoints DROP CONSTRAINT t_ok")
        # inside a caller's transaction that rolls back: both are gone
        with pytest.raises(RuntimeError), conn.transaction():
            store.append_turn(sid, user(1), idempotency_key="u1", checkpoint={"tx": 1})
            store.checkpoint(sid, {"tx": 2})
            raise RuntimeError("the caller fails")
        assert store.session(sid).turn_count == 1
        assert count_checkpoints(dsn) == 1
        with conn.transaction():
            r = store.append_turn(sid, user(1), idempotency_key="u1", checkpoint={"tx": 3})
            cp = store.checkpoint(sid, {"tx": 4}, idempotency_key="c")
            assert cp.turn_seq == 1  # sees its own transaction's turn
        assert store.restore(sid).checkpoint == cp
        store.close()


@pytest.mark.slow
def test_size_does_not_depend_on_history_length(store: shardstore.Store, dsn: str) -> None:
    state = {"plan": ["search", "answer"], "scratch": "s" * 500}
    sizes = {}
    for length in (10, 2000):
        sid = store.create_session("acme")
        for start in range(0, length, 500):
            batch = [user(i, "w " * 30) for i in range(start, min(length, start + 500))]
            store.append_turns(sid, batch)
        cp = store.checkpoint(sid, state, tool_calls=[{"id": "x"}], sub_step=1)
        r = store.append_turn(sid, user(length), checkpoint=state)
        sizes[length] = rows(
            dsn,
            "SELECT pg_column_size(c.*) FROM shardstore.checkpoints c WHERE session_id = %s"
            " ORDER BY seq",
            sid,
        )
        assert cp.turn_seq == length - 1 and r.checkpoint_id is not None
    assert sizes[10] == sizes[2000]


# ---------------------------------------------------------------- hostile input


@pytest.mark.slow
def test_hostile_input_writes_nothing(store: Any, dsn: str) -> None:
    sid = store.create_session("acme")
    store.append_turn(sid, user(0))
    good = store.checkpoint(sid, {"ok": True})
    other = store.create_session("acme")
    foreign = store.checkpoint(other, {"other": True})
    before = count_checkpoints(dsn)
    bad_calls: list[tuple[Callable[[], Any], type[Exception]]] = [
        (lambda: store.checkpoint(sid, "state"), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, None), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {"x": float("inf")}), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {"x": object()}), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {(1, 2): 1}), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {"x": b"bytes"}), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, tool_calls=[float("nan")]), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, tool_results={1: 2}), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, metadata=["x"]), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, sub_step=-1), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, sub_step=True), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, sub_step="1"), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, sub_step=2**40), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, parent_id="nope"), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, parent_id=uuid.uuid4()), shardstore.CheckpointNotFound),
        (
            lambda: store.checkpoint(sid, {}, parent_id=foreign.checkpoint_id),
            shardstore.CheckpointNotFound,
        ),
        (lambda: store.checkpoint(sid, {}, idempotency_key=""), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, idempotency_key="a\x00"), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {}, idempotency_key="k" * 600), shardstore.InvalidInput),
        (lambda: store.checkpoint(sid, {"s": "x" * (17 << 20)}), shardstore.InvalidInput),
        (lambda: store.checkpoint("not-a-uuid", {}), shardstore.InvalidInput),
        (lambda: store.checkpoint(uuid.uuid4(), {}), shardstore.SessionNotFound),
        (lambda: store.restore(sid, uuid.uuid4()), shardstore.CheckpointNotFound),
        (lambda: store.restore(sid, foreign.checkpoint_id), shardstore.CheckpointNotFound),
        (lambda: store.restore(sid, 42), shardstore.InvalidInput),
        (lambda: store.restore(sid, n=0), shardstore.InvalidInput),
        (lambda: store.restore(sid, max_tokens=-1), shardstore.InvalidInput),
        (lambda: store.restore(uuid.uuid4()), shardstore.SessionNotFound),
        (lambda: store.checkpoints(sid, limit=0), shardstore.InvalidInput),
        (lambda: store.checkpoints(sid, before=uuid.uuid4()), shardstore.CheckpointNotFound),
        (lambda: store.checkpoints(sid, before=datetime(2020, 1, 1)), shardstore.InvalidInput),
        (lambda: store.checkpoints(uuid.uuid4()), shardstore.SessionNotFound),
        (lambda: store.append_turn(sid, user(1), checkpoint="x"), shardstore.InvalidInput),
        (lambda: store.maintain(keep_checkpoints=-1), shardstore.InvalidInput),
    ]
    for call, kind in bad_calls:
        with pytest.raises(kind):
            call()
    assert count_checkpoints(dsn) == before
    assert store.session(sid).turn_count == 1
    assert store.restore(sid).checkpoint == good
    assert issubclass(shardstore.CheckpointNotFound, LookupError)
    store.purge_session(sid)
    for call in (
        lambda: store.checkpoint(sid, {}),
        lambda: store.restore(sid),
        lambda: store.checkpoints(sid),
        lambda: store.append_turn(sid, user(1), checkpoint={}),
    ):
        with pytest.raises(shardstore.SessionPurged):
            call()


# ---------------------------------------------------------------- purge, retention, RLS


def test_purges_remove_checkpoints(make_store: Callable[..., Any], dsn: str) -> None:
    store = make_store(chunk_tokens=100)
    a = store.create_session("acme", "user:1")
    b = store.create_session("acme", "user:2")
    c = store.create_session("globex", "user:3")
    for sid in (a, b, c):
        for i in range(12):
            store.append_turn(sid, user(i, "w " * 20), checkpoint={"secret": f"m-{sid}-{i}"})
    store.drain_folds()
    # a range purge: the checkpoints positioned before the cut go, the others stay
    report = store.purge_range(a, before_turn_seq=5)
    assert report.tables["shardstore.checkpoints"].rows == 5
    assert [cp.turn_seq for cp in store.checkpoints(a)] == list(range(11, 4, -1))
    got = store.restore(a)
    assert got.checkpoint is not None and got.checkpoint.turn_seq == 11
    assert [t.turn_seq for t in got.turns] == list(range(5, 12))
    oldest = store.checkpoints(a)[-1]
    assert [t.turn_seq for t in store.restore(a, oldest.checkpoint_id).turns] == [5]
    assert [t.turn_seq for t in store.restore(a, oldest.checkpoint_id, n=3).turns] == [5]
    store.purge_session(b)
    assert count_checkpoints(dsn, b) == 0
    store.purge_subject("acme", "user:1")
    assert count_checkpoints(dsn, a) == 0
    store.purge_tenant("globex")
    assert count_checkpoints(dsn) == 0
    text = rows(dsn, "SELECT coalesce(string_agg(c::text, ''), '') FROM shardstore.checkpoints c")
    assert "m-" not in text[0][0]


def test_a_checkpoint_before_any_turn_goes_with_the_first_range_purge(
    store: shardstore.Store,
) -> None:
    sid = store.create_session("acme")
    store.checkpoint(sid, {"empty": True})
    store.append_turns(sid, [user(i) for i in range(3)])
    kept = store.checkpoint(sid, {"three": True})
    store.purge_range(sid, before_turn_seq=1)
    assert store.checkpoints(sid) == [kept]


@pytest.mark.slow
def test_retention_and_keep_checkpoints(make_store: Callable[..., Any], dsn: str) -> None:
    store = make_store()
    old = store.create_session("acme")
    live = store.create_session("acme")
    for i in range(6):
        store.append_turn(old, user(i), checkpoint={"i": i})
        store.append_turn(live, user(i), checkpoint={"i": i})
        store.checkpoint(live, {"extra": i}, sub_step=0)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the old session went quiet long ago
        conn.execute(
            "UPDATE shardstore.sessions SET last_turn_at = now() - interval '400 days',"
            " created_at = now() - interval '400 days' WHERE session_id = %s",
            (old,),
        )
        conn.execute(
            "UPDATE shardstore.turn_buffer SET created_at = now() - interval '400 days'"
            " WHERE session_id = %s",
            (old,),
        )
    report = store.maintain(retention=timedelta(days=365), embed=False)
    assert report.sessions_expired == 1 and report.checkpoints_removed is None
    assert count_checkpoints(dsn, old) == 0 and count_checkpoints(dsn, live) == 12
    newest = store.checkpoints(live, limit=3)
    report = store.maintain(keep_checkpoints=3, embed=False)
    assert report.checkpoints_removed == 9
    assert store.checkpoints(live) == newest
    assert store.maintain(keep_checkpoints=3, embed=False).checkpoints_removed == 0
    assert store.maintain(keep_checkpoints=0, embed=False).checkpoints_removed == 3
    assert store.restore(live).checkpoint is None


def test_keep_checkpoints_visits_every_session(make_store: Callable[..., Any], dsn: str) -> None:
    from shardstore.state import checkpoints as cp_ops

    store = make_store()
    sids = [store.create_session("acme") for _ in range(7)]
    for sid in sids:
        for i in range(3):
            store.checkpoint(sid, {"i": i})
    old = cp_ops.KEEP_BATCH
    cp_ops.KEEP_BATCH = 2  # several batches
    try:
        assert store.maintain(keep_checkpoints=1, embed=False).checkpoints_removed == 14
    finally:
        cp_ops.KEEP_BATCH = old
    assert all([c.state for c in store.checkpoints(sid)] == [{"i": 2}] for sid in sids)


@pytest.mark.slow
def test_rls_scopes_checkpoints(dsn: str) -> None:
    owner = shardstore.connect(dsn)
    acme = owner.create_session("acme")
    globex = owner.create_session("globex")
    theirs = owner.checkpoint(globex, {"secret": "globex"})
    owner.append_turn(globex, user(0), checkpoint={"secret": "globex"})
    role = make_tenant_role(dsn)
    try:
        with as_tenant(dsn, role, "acme") as conn:
            tenant = rls.connect_tenant(conn)
            mine = tenant.checkpoint(acme, {"mine": True})
            r = tenant.append_turn(acme, user(0), checkpoint={"mine": 2})
            assert tenant.restore(acme).checkpoint is not None
            assert tenant.restore(acme).checkpoint.checkpoint_id == r.checkpoint_id  # type: ignore[union-attr]
            assert [c.checkpoint_id for c in tenant.checkpoints(acme)][-1] == mine.checkpoint_id
            seen = conn.execute("SELECT DISTINCT tenant_id FROM shardstore.checkpoints").fetchall()
            assert seen == [("acme",)]
            for call in (
                lambda: tenant.checkpoints(globex),
                lambda: tenant.restore(globex),
                lambda: tenant.checkpoint(globex, {"x": 1}),
                lambda: tenant.append_turn(globex, user(1), checkpoint={"x": 1}),
            ):
                with pytest.raises(shardstore.SessionNotFound):
                    call()
            assert (
                conn.execute(
                    "DELETE FROM shardstore.checkpoints WHERE session_id = %s", (globex,)
                ).rowcount
                == 0
            )
            with pytest.raises(shardstore.ShardstoreError):
                tenant.purge_session(globex)
            tenant.close()
        assert owner.checkpoints(globex)[-1] == theirs and count_checkpoints(dsn, globex) == 2
    finally:
        owner.close()
        drop_tenant_role(dsn, role)


# ---------------------------------------------------------------- asyncio


@pytest.mark.slow
def test_async_store(dsn: str) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn, chunk_tokens=80)
        try:
            sid = await store.create_session("acme")
            first = await store.checkpoint(sid, {"a": 1}, idempotency_key="k")
            assert (await store.checkpoint(sid, {"a": 2}, idempotency_key="k")) == first
            for i in range(10):
                r = await store.append_turn(
                    sid, user(i, "w " * 10), idempotency_key=f"u{i}", checkpoint={"i": i}
                )
            rs = await store.append_turns(sid, [user(10), user(11)], checkpoint={"i": 11})
            assert rs[-1].checkpoint_id is not None and r.checkpoint_id is not None
            got = await store.restore(sid)
            assert got.checkpoint is not None and got.checkpoint.state == {"i": 11}
            assert [t.turn_seq for t in got.turns] == list(range(12))
            assert (await store.restore(sid, r.checkpoint_id, n=2)).turns[-1].turn_seq == 9
            listed = await store.checkpoints(sid, limit=2)
            assert [c.state for c in listed] == [{"i": 11}, {"i": 9}]
            with pytest.raises(shardstore.CheckpointNotFound):
                await store.restore(sid, uuid.uuid4())
            report = await store.maintain(keep_checkpoints=1, embed=False)
            assert report.checkpoints_removed == 11
        finally:
            await store.close()

    asyncio.run(main())


# ---------------------------------------------------------------- a stateful model


class CheckpointMachine(RuleBasedStateMachine):
    """Checkpoints interleaved with appends (with and without a checkpoint, retried),
    range purges and a session purge, held to an in-memory model."""

    store: shardstore.Store

    @initialize()
    def start(self) -> None:
        self.sid = self.store.create_session("acme")
        self.turns: dict[int, dict[str, Any]] = {}  # turn_seq -> message
        self.next_seq = 0
        self.cps: list[tuple[uuid.UUID, int, dict[str, Any]]] = []  # oldest first
        self.keys: dict[str, tuple[int, uuid.UUID | None]] = {}
        self.purged = False
        self.i = 0

    def _msg(self) -> dict[str, Any]:
        self.i += 1
        role = "tool" if self.i % 4 == 0 else "user"
        return {"role": role, "content": f"m{self.i} " + "w " * (self.i % 30)}

    @rule(with_checkpoint=st.booleans(), keyed=st.booleans())
    def append(self, with_checkpoint: bool, keyed: bool) -> None:
        if self.purged:
            return
        msg = self._msg()
        key = f"k{self.i}" if keyed else None
        state = {"after": self.i} if with_checkpoint else None
        r = self.store.append_turn(self.sid, msg, idempotency_key=key, checkpoint=state)
        assert r.turn_seq == self.next_seq and not r.duplicate
        self.turns[r.turn_seq] = msg
        self.next_seq += 1
        if state is not None:
            assert r.checkpoint_id is not None
            self.cps.append((r.checkpoint_id, r.turn_seq, state))
        if key is not None:
            self.keys[key] = (r.turn_seq, r.checkpoint_id)

    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        if self.purged or not self.keys:
            return
        key = data.draw(st.sampled_from(sorted(self.keys)))
        seq, cid = self.keys[key]
        r = self.store.append_turn(
            self.sid, {"role": "user", "content": "retry"}, key, checkpoint={"r": 1}
        )
        assert r.duplicate and r.turn_seq == seq and r.checkpoint_id == cid

    @rule(sub=st.none() | st.integers(0, 3))
    def checkpoint(self, sub: int | None) -> None:
        if self.purged:
            return
        self.i += 1
        cp = self.store.checkpoint(self.sid, {"cp": self.i}, sub_step=sub)
        assert cp.turn_seq == self.next_seq - 1
        self.cps.append((cp.checkpoint_id, cp.turn_seq, {"cp": self.i}))

    @rule(back=st.integers(0, 6))
    def purge_range(self, back: int) -> None:
        if self.purged or self.next_seq == 0:
            return
        cut = max(0, self.next_seq - back)
        self.store.purge_range(self.sid, before_turn_seq=cut)
        self.turns = {s: m for s, m in self.turns.items() if s >= cut}
        self.cps = [c for c in self.cps if c[1] >= cut]
        self.keys = {k: v for k, v in self.keys.items() if v[0] >= cut}

    @rule()
    def purge_session(self) -> None:
        if self.i % 7 != 3:  # rarely
            return
        self.store.purge_session(self.sid)
        self.purged = True

    @rule(n=st.none() | st.integers(1, 8))
    def restore(self, n: int | None) -> None:
        if self.purged:
            with pytest.raises(shardstore.SessionPurged):
                self.store.restore(self.sid)
            return
        got = self.store.restore(self.sid, n=n)
        upto = self.cps[-1][1] if self.cps else self.next_seq - 1
        want = [self.turns[s] for s in sorted(self.turns) if s <= upto]
        if n is not None:
            want = want[-n:]
            while want and want[0]["role"] == "tool":
                want = want[1:]
        assert [t.message for t in got.turns] == want
        if self.cps:
            assert got.checkpoint is not None
            assert (
                got.checkpoint.checkpoint_id,
                got.checkpoint.turn_seq,
                got.checkpoint.state,
            ) == self.cps[-1]
        else:
            assert got.checkpoint is None

    @invariant()
    def listed(self) -> None:
        if self.purged:
            return
        listed = self.store.checkpoints(self.sid)
        assert [c.checkpoint_id for c in listed] == [c[0] for c in reversed(self.cps)]
        assert all(c.turn_seq <= self.next_seq - 1 for c in listed)


@pytest.mark.slow
def test_stateful_model(make_store: Callable[..., Any]) -> None:
    store = make_store(chunk_tokens=120)

    class Machine(CheckpointMachine):
        pass

    Machine.store = store
    Machine.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    Machine.TestCase().runTest()


# ---------------------------------------------------------------- crashes

WRITER_KILLS = 120


@pytest.mark.slow
def test_sigkilled_agent_resumes_from_restore(dsn: str, tmp_path: Path) -> None:
    """THE crash flow: an agent appends the user turn with a checkpoint, calls the model (a
    sleep), appends the reply with a key derived from the checkpoint; it is SIGKILLed at
    random moments and restarted from restore() each time."""
    with shardstore.connect(dsn) as store:
        sid = str(store.create_session("crash", "user:1"))
    # no deadline: every kill is made however slow the machine is (a kill waits on the
    # agent's restore, not on the clock), and the test's timeout bounds the whole run
    run = run_kills(dsn, sid, tmp_path / "acks", WRITER_KILLS, seed=11)
    assert run.kills == WRITER_KILLS and run.restores == run.kills
    with shardstore.connect(dsn) as store:
        steps = check(store, dsn, sid, run)
        assert steps > run.kills // 2  # the agent made progress between kills
        acked = [a for a in run.acks if a[0] == "U"]
        cp = store.restore(sid).checkpoint
        assert cp is not None and int(cp.state["step"]) >= int(acked[-1][1])
        assert acked[-1][2] in {str(c.checkpoint_id) for c in store.checkpoints(sid)}
        assert any(a[0] == "A" and a[3] == "1" for a in run.acks)  # a regenerated reply


@pytest.fixture(scope="module")
def server() -> Iterator[CrashableServer]:
    srv = CrashableServer()
    yield srv
    srv.close()


def _blocked(call: Callable[[], Any]) -> tuple[Any, list[BaseException]]:
    import threading

    errors: list[BaseException] = []

    def body() -> None:
        try:
            call()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, errors


@pytest.mark.slow
def test_server_killed_mid_checkpoint(server: CrashableServer) -> None:
    """The server dies while a checkpoint (alone, or with its turn) is written but not
    committed: after recovery neither is there, and the retry stores each exactly once."""
    dsn = server.create_database()
    with shardstore.connect(dsn) as store:
        sid = store.create_session("crash")
        store.append_turn(sid, user(0), idempotency_key="u0", checkpoint={"step": 0})
        before = store.restore(sid)
        for round_ in range(4):
            with_turn = round_ % 2 == 0
            key = f"k{round_}"

            def write(with_turn: bool = with_turn, key: str = key, round_: int = round_) -> Any:
                if with_turn:
                    return store.append_turn(
                        sid, user(round_ + 1), idempotency_key=key, checkpoint={"r": round_}
                    )
                return store.checkpoint(sid, {"r": round_}, idempotency_key=key)

            with holding(dsn, "LOCK TABLE shardstore.checkpoints IN EXCLUSIVE MODE"):
                thread, errors = _blocked(write)
                # one turn: append_checkpoint_v2, one statement
                wait_for_backend(
                    dsn, "append_checkpoint_v2" if with_turn else "checkpoint_v1", waiting=True
                )
                server.crash()
            thread.join(60)
            assert errors and isinstance(errors[0], shardstore.DatabaseUnavailable)
            assert store.restore(sid) == before  # nothing of the interrupted call
            done = write()
            again = write()
            if with_turn:
                assert not done.duplicate and again.duplicate
                assert again.checkpoint_id == done.checkpoint_id
            else:
                assert again == done
            before = store.restore(sid)
            assert before.checkpoint is not None and before.checkpoint.state == {"r": round_}
        assert count_checkpoints(dsn, sid) == 5
        assert store.session(sid).turn_count == 3


# ---------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli(store: shardstore.Store, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    from shardstore.cli import main

    sid = store.create_session("acme")
    assert main(["--dsn", dsn, "checkpoints", str(sid)]) == 0
    assert "no checkpoints" in capsys.readouterr().out
    store.append_turns(sid, [user(i) for i in range(4)])
    first = store.checkpoint(sid, {"plan": "a"}, tool_calls=[{"id": "1"}])
    store.append_turn(sid, user(4), checkpoint={"plan": "b"})
    assert main(["--dsn", dsn, "checkpoints", str(sid), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [c["state"] for c in listed] == [{"plan": "b"}, {"plan": "a"}]
    assert listed[1]["checkpoint_id"] == str(first.checkpoint_id) and listed[1]["turn_seq"] == 3
    assert main(["--dsn", dsn, "checkpoints", str(sid), "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "plan" in out and str(first.checkpoint_id) not in out
    argv = ["--dsn", dsn, "restore", str(sid), "--checkpoint", str(first.checkpoint_id)]
    assert main([*argv, "--n", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["checkpoint"]["state"] == {"plan": "a"}
    assert [t["turn_seq"] for t in doc["turns"]] == [2, 3]
    assert main(["--dsn", dsn, "restore", str(sid)]) == 0
    assert "at turn 4" in capsys.readouterr().out
    assert main(["--dsn", dsn, "restore", str(sid), "--checkpoint", str(uuid.uuid4())]) != 0
    assert main(["--dsn", dsn, "restore", str(sid), "--n", "1", "--max-tokens", "5"]) == 2
