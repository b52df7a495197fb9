"""A write the server picks as a deadlock's victim is run again (core.rerun.rerun_on_deadlock):
the victim statement was rolled back whole, so nothing of it was written, and the store
reruns it instead of raising ``Conflict`` at the caller. Each test builds a real deadlock
with a transaction of its own (X) that holds what the store's statement needs and then
waits for what that statement holds; the store's statement waited first, so its deadlock
check finds the cycle and it is the victim. The order of the two checks is set, not left to
timing: the store's connections check after 3 s (the cycle is closed by then, however loaded
the machine), X's after a minute (in CI, with both at the default 1 s on a loaded machine,
X was the victim of both flush tests: probably its wait began after the store's one check).
Setting ``deadlock_timeout`` needs a superuser; elsewhere the tests skip. Sync and asyncio
stores run the same ops. (test_rewind's concurrency test met such a deadlock once in a full
suite run: a writer's append_turn raised ``Conflict('deadlock detected')``.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore

MODES = ["sync", "async"]
STORE_CHECKS_AFTER = "3s"  # the store's deadlock check: its statement is the victim
X_CHECKS_AFTER = "60s"


def _holder(dsn: str) -> psycopg.Connection[Any]:
    """X: a connection (its own transaction) whose deadlock check waits a minute."""
    conn = psycopg.connect(dsn)
    try:
        conn.execute(f"SET deadlock_timeout = '{X_CHECKS_AFTER}'")
    except psycopg.errors.InsufficientPrivilege:
        conn.close()
        pytest.skip("ordering the deadlock checks (deadlock_timeout) needs a superuser")
    return conn


def _deadlocks(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _in_background(
    mode: str, dsn: str, call: Callable[[Any], Any]
) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``call(store)`` on a thread, with a sync store or inside asyncio.run with an
    AsyncStore (``call`` returns an awaitable then); the outcome lands in the dict."""
    out: dict[str, Any] = {}
    dsn = make_conninfo(dsn, options=f"-c deadlock_timeout={STORE_CHECKS_AFTER}")

    def sync() -> None:
        store = shardstore.connect(dsn)
        try:
            out["value"] = call(store)
        except BaseException as exc:  # reported by the test
            out["error"] = exc
        finally:
            store.close()

    def in_asyncio() -> None:
        async def run() -> None:
            store = await shardstore.connect_async(dsn)
            try:
                out["value"] = await call(store)
            except BaseException as exc:
                out["error"] = exc
            finally:
                await store.close()

        asyncio.run(run())

    thread = threading.Thread(target=sync if mode == "sync" else in_asyncio)
    thread.start()
    return thread, out


def _wait_until_blocked(dsn: str, pattern: str) -> None:
    """Until a backend running a statement LIKE ``pattern`` waits on a lock (at most 10 s)."""
    deadline = time.monotonic() + 10
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE %s AND pid <> pg_backend_pid()",
                (pattern,),
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.01)
    raise AssertionError(f"no statement like {pattern!r} waited on a lock")


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 2])
@pytest.mark.parametrize("checkpoint", [None, {"step": 7}])
def test_an_append_picked_as_a_deadlock_victim_is_run_again(
    make_store: Callable[..., shardstore.Store],
    dsn: str,
    mode: str,
    size: int,
    checkpoint: dict[str, Any] | None,
) -> None:
    """One turn (append_one_v2's fast path: the head update, then the key) and a batch
    (append_v2: the session locked, then the keys), each also with a checkpoint
    (append_checkpoint_v2 / append_checkpoint_v1)."""
    store = make_store()
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "first"})
    before = _deadlocks(dsn)
    with _holder(dsn) as x:
        # X holds the key the batch will insert (uncommitted): the batch, holding the
        # session row, waits for X
        x.execute(
            "INSERT INTO shardstore.turn_keys (session_id, idempotency_key, turn_seq, chunk_seq,"
            " tokens, created_at, tenant_id) VALUES (%s, 'held', 99, 0, 1, now(), 'acme')",
            (sid,),
        )
        batch = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}][-size:]
        keys = [None, "held"][-size:]
        thread, out = _in_background(
            mode,
            dsn,
            lambda s: s.append_turns(sid, batch, idempotency_keys=keys, checkpoint=checkpoint),
        )
        statement = {
            (1, False): "append_one_v2",
            (2, False): "append_v2",
            (1, True): "append_checkpoint_v2",
            (2, True): "append_checkpoint_v1",
        }[size, checkpoint is not None]
        _wait_until_blocked(dsn, f"%{statement}%")
        # ... and X waits for the session row: a cycle, found by the batch's check
        x.execute("SELECT 1 FROM shardstore.sessions WHERE session_id = %s FOR UPDATE", (sid,))
        x.rollback()  # the key goes; the rerun goes on
        thread.join(30)
    assert not thread.is_alive()
    assert "error" not in out, out["error"]
    assert [(r.turn_seq, r.duplicate) for r in out["value"]] == [
        (1 + i, False) for i in range(size)
    ]
    assert _deadlocks(dsn) > before  # the server did pick a victim
    turns = list(store.history(sid))
    assert [t.message["content"] for t in turns] == ["first", *(m["content"] for m in batch)]
    assert [t.idempotency_key for t in turns] == [None, *keys]
    if checkpoint is not None:  # the checkpoint committed with the turns, once
        restored = store.restore(sid)
        assert restored.checkpoint is not None
        assert (restored.checkpoint.state, restored.checkpoint.turn_seq) == (checkpoint, size)
        assert {r.checkpoint_id for r in out["value"]} == {restored.checkpoint.checkpoint_id}
    # the key is the append's now: a retry is a duplicate
    again = store.append_turn(sid, {"role": "assistant", "content": "b"}, idempotency_key="held")
    assert again.duplicate and again.turn_seq == size


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_flush_picked_as_a_deadlock_victim_is_run_again(
    make_store: Callable[..., shardstore.Store], dsn: str, mode: str
) -> None:
    store = make_store(background_fold=False)
    sid = store.create_session("acme")
    store.append_turns(sid, [{"role": "user", "content": f"turn {i}"} for i in range(3)])
    before = _deadlocks(dsn)
    with _holder(dsn) as x:
        # X locks the buffered rows the flush's fold deletes: the flush, holding the
        # session row, waits for X
        x.execute("SELECT 1 FROM shardstore.turn_buffer WHERE session_id = %s FOR UPDATE", (sid,))
        thread, out = _in_background(mode, dsn, lambda s: s.flush(sid))
        _wait_until_blocked(dsn, "%flush_v1%")
        x.execute("SELECT 1 FROM shardstore.sessions WHERE session_id = %s FOR UPDATE", (sid,))
        x.rollback()
        thread.join(30)
    assert not thread.is_alive()
    assert "error" not in out, out["error"]
    assert out["value"] == 3
    assert _deadlocks(dsn) > before
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.turn_buffer WHERE session_id = %s", (sid,)
        ).fetchone()
    assert row == (0,)
    assert [t.message["content"] for t in store.history(sid)] == ["turn 0", "turn 1", "turn 2"]


@pytest.mark.slow
def test_a_write_still_deadlocking_after_its_reruns_raises_conflict(
    make_store: Callable[..., shardstore.Store], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no reruns left the victim's Conflict reaches the caller, and nothing of the
    batch was written."""
    from shardstore.core import rerun

    monkeypatch.setattr(rerun, "_DEADLOCK_RERUNS", 0)
    store = make_store()
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "first"})
    with _holder(dsn) as x:
        x.execute(
            "INSERT INTO shardstore.turn_keys (session_id, idempotency_key, turn_seq, chunk_seq,"
            " tokens, created_at, tenant_id) VALUES (%s, 'held', 99, 0, 1, now(), 'acme')",
            (sid,),
        )
        thread, out = _in_background(
            "sync",
            dsn,
            lambda s: s.append_turns(
                sid, [{"role": "user", "content": m} for m in "ab"], idempotency_keys=[None, "held"]
            ),
        )
        _wait_until_blocked(dsn, "%append_v2%")
        x.execute("SELECT 1 FROM shardstore.sessions WHERE session_id = %s FOR UPDATE", (sid,))
        x.rollback()
        thread.join(30)
    assert isinstance(out.get("error"), shardstore.errors.Conflict), out
    assert [t.message["content"] for t in store.history(sid)] == ["first"]
    assert store.session(sid).turn_count == 1


def test_the_rerun_statement_is_the_statement_with_the_deadlock_recovered() -> None:
    """rerun_on_deadlock builds its guarded Q field by field (cheaper than
    dataclasses.replace): it must carry every field of the statement it guards."""
    import dataclasses

    from shardstore.core import rerun
    from shardstore.core.steps import Q

    q = Q("SELECT %s", (1,), fetch="one", prepare=False, recover=frozenset({"23505"}), named=True)
    op = rerun.rerun_on_deadlock(q)
    guarded = op.send(None)
    assert guarded == dataclasses.replace(q, recover=frozenset({"23505", "40P01"}))
    assert [f.name for f in dataclasses.fields(Q)] == [
        "sql",
        "params",
        "fetch",
        "prepare",
        "recover",
        "named",
    ]
    op.close()
