"""Runs (shardstore/state/runs.py): the lifecycle and its errors, idempotent
opens, the awaiting index, purge / retention / RLS coverage through the registry, the
asyncio store, hostile input, an in-memory model (hypothesis), and a writer killed with
SIGKILL in the middle of run updates."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

import shardstore
from shardstore.cli import main
from shardstore.core.sql import query
from shardstore.schema import rls
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

REPO = Path(__file__).resolve().parents[2]


def _runs_digest(dsn: str) -> Any:
    """Every row of shardstore.runs, as the superuser sees them (a digest)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), md5(coalesce(string_agg(r::text, ',' ORDER BY r::text), ''))"
            " FROM shardstore.runs r"
        ).fetchone()
    return row


def _count(dsn: str, sid: uuid.UUID) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.runs WHERE session_id = %s", (sid,)
        ).fetchone()
    assert row is not None
    return int(row[0])


# ---------------------------------------------------------------- lifecycle


def test_lifecycle(store: shardstore.Store) -> None:
    sid = store.create_session("acme", "user:1", "bot")
    run = store.open_run(sid, framework="langgraph", thread_key="thread-1", metadata={"m": [1]})
    assert isinstance(run, shardstore.Run)
    assert (run.session_id, run.tenant_id, run.framework, run.thread_key) == (
        sid,
        "acme",
        "langgraph",
        "thread-1",
    )
    assert (run.status, run.steps, run.usd_cost, run.metadata) == ("running", 0, 0.0, {"m": [1]})
    assert run.awaiting is None and run.awaiting_since is None and run.closed_at is None
    assert not run.closed and run.created_at == run.updated_at

    stepped = store.record_step(run.run_id, usd_cost=0.25)
    stepped = store.record_step(str(run.run_id), steps=3, usd_cost=1)
    assert (stepped.steps, stepped.usd_cost) == (4, 1.25)
    assert store.record_step(run.run_id, steps=0).steps == 4

    waiting = store.mark_awaiting(run.run_id, {"tool": "refund", "amount": 12.5, "k": "\x00"})
    assert waiting.status == "awaiting_human"
    assert waiting.awaiting == {"tool": "refund", "amount": 12.5, "k": "\x00"}
    assert waiting.awaiting_since is not None and waiting.awaiting_since >= run.created_at
    assert store.runs(tenant_id="acme", status="awaiting_human") == [waiting]
    again = store.mark_awaiting(run.run_id, {"tool": "other"})  # replaces what it waits for
    assert again.awaiting == {"tool": "other"}
    assert again.awaiting_since is not None and again.awaiting_since >= waiting.awaiting_since
    assert store.record_step(run.run_id).status == "awaiting_human"  # steps while waiting

    resumed = store.resume_run(run.run_id)
    assert (resumed.status, resumed.awaiting, resumed.awaiting_since) == ("running", None, None)
    assert store.resume_run(run.run_id) == resumed  # a repeated resume changes nothing
    assert store.runs(tenant_id="acme", status="awaiting_human") == []

    done = store.close_run(run.run_id, "done")
    assert done.status == "done" and done.closed and done.closed_at is not None
    assert (done.steps, done.usd_cost, done.error) == (5, 1.25, None)
    assert store.get_run(run.run_id) == done
    assert store.get_run(str(run.run_id)) == done

    failed = store.open_run(sid, framework="openai-agents", thread_key="t2")
    failed = store.close_run(failed.run_id, "failed", error="model timed out")
    assert (failed.status, failed.error) == ("failed", "model timed out")
    assert (
        store.close_run(store.open_run(sid, framework="x", thread_key="t3").run_id, "failed").error
        is None
    )


def test_listing_filters_and_order(store: shardstore.Store) -> None:
    a = store.create_session("acme")
    b = store.create_session("acme")
    g = store.create_session("globex")
    r1 = store.open_run(a, framework="langgraph", thread_key="1")
    r2 = store.open_run(a, framework="openai", thread_key="2")
    r3 = store.open_run(b, framework="langgraph", thread_key="3")
    r4 = store.open_run(g, framework="langgraph", thread_key="4")
    store.mark_awaiting(r3.run_id, {"n": 3})
    store.mark_awaiting(r1.run_id, {"n": 1})
    store.close_run(r2.run_id, "done")

    def ids(**kw: Any) -> list[uuid.UUID]:
        return [r.run_id for r in store.runs(**kw)]

    # waiting ones first, the longest wait first; then the others newest first
    assert ids(tenant_id="acme") == [r3.run_id, r1.run_id, r2.run_id]
    assert ids(tenant_id="acme", status="awaiting_human") == [r3.run_id, r1.run_id]
    assert ids(tenant_id="acme", status="awaiting_human", limit=1) == [r3.run_id]
    assert ids(status="awaiting_human", session_id=a) == [r1.run_id]
    assert ids(tenant_id="acme", status="awaiting_human", framework="openai") == []
    assert ids(session_id=a) == [r1.run_id, r2.run_id]
    assert ids(session_id=a, status="done") == [r2.run_id]
    assert ids(session_id=str(a), tenant_id="globex") == []
    assert ids(tenant_id="globex") == [r4.run_id]
    assert ids(framework="openai") == [r2.run_id]
    assert ids(status="running") == [r4.run_id]
    assert set(ids()) == {r1.run_id, r2.run_id, r3.run_id, r4.run_id}
    assert ids(limit=2) == [r3.run_id, r1.run_id]
    assert ids(tenant_id="nobody") == []


# ---------------------------------------------------------------- errors


def test_every_error(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")
    run = store.open_run(sid, framework="f", thread_key="t")
    unknown = uuid.uuid4()
    before = _runs_digest(dsn)
    for call in (
        lambda: store.get_run(unknown),
        lambda: store.mark_awaiting(unknown, {}),
        lambda: store.resume_run(unknown),
        lambda: store.record_step(unknown),
        lambda: store.close_run(unknown, "done"),
    ):
        with pytest.raises(shardstore.RunNotFound):
            call()
    with pytest.raises(shardstore.SessionNotFound):
        store.open_run(uuid.uuid4(), framework="f", thread_key="t")
    # unknown status, or an error for a run that did not fail
    for status in ("running", "awaiting_human", "DONE", "", None, 1):
        with pytest.raises(shardstore.InvalidInput):
            store.close_run(run.run_id, status)  # type: ignore[arg-type]
    with pytest.raises(shardstore.InvalidInput):
        store.close_run(run.run_id, "done", error="no")
    with pytest.raises(shardstore.InvalidInput):
        store.runs(status="paused")
    assert _runs_digest(dsn) == before

    closed = store.close_run(run.run_id, "done")
    before = _runs_digest(dsn)
    for call in (
        lambda: store.close_run(run.run_id, "done"),
        lambda: store.close_run(run.run_id, "failed", error="late"),
        lambda: store.mark_awaiting(run.run_id, {"x": 1}),
        lambda: store.resume_run(run.run_id),
        lambda: store.record_step(run.run_id),
    ):
        with pytest.raises(shardstore.RunClosed) as info:
            call()
        assert not info.value.retryable
    assert _runs_digest(dsn) == before
    assert store.get_run(run.run_id) == closed
    assert issubclass(shardstore.RunNotFound, LookupError)
    assert issubclass(shardstore.RunClosed, shardstore.ShardstoreError)

    store.purge_session(sid)
    with pytest.raises(shardstore.SessionPurged):
        store.open_run(sid, framework="f", thread_key="t")
    with pytest.raises(shardstore.RunNotFound):
        store.get_run(run.run_id)


def test_open_with_a_run_id_is_idempotent(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")
    other = store.create_session("acme")
    rid = uuid.uuid4()
    first = store.open_run(sid, framework="lg", thread_key="t", run_id=rid, metadata={"a": 1})
    assert first.run_id == rid
    assert store.open_run(sid, framework="lg", thread_key="t", run_id=str(rid)) == first
    stepped = store.record_step(rid, steps=2)
    # a retry after progress returns the run as it is now (and ignores its metadata)
    assert store.open_run(sid, framework="lg", thread_key="t", run_id=rid, metadata={}) == stepped
    before = _runs_digest(dsn)
    for kw in (
        {"session_id": other, "framework": "lg", "thread_key": "t"},
        {"session_id": sid, "framework": "other", "thread_key": "t"},
        {"session_id": sid, "framework": "lg", "thread_key": "t2"},
    ):
        with pytest.raises(shardstore.RunConflict, match=str(rid)):
            store.open_run(kw.pop("session_id"), run_id=rid, **kw)
    assert _runs_digest(dsn) == before
    closed = store.close_run(rid, "done")
    assert store.open_run(sid, framework="lg", thread_key="t", run_id=rid) == closed


@pytest.mark.slow
def test_concurrent_opens_of_one_id_make_one_run(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store()
    sessions = [store.create_session("acme") for _ in range(4)]
    rid = uuid.uuid4()

    async def race() -> list[Any]:
        stores = [await shardstore.connect_async(dsn) for _ in sessions]
        try:
            return await asyncio.gather(
                *(
                    s.open_run(sid, framework="f", thread_key="t", run_id=rid)
                    for s, sid in zip(stores, sessions, strict=True)
                ),
                return_exceptions=True,
            )
        finally:
            for s in stores:
                await s.close()

    results = asyncio.run(race())
    opened = [r for r in results if isinstance(r, shardstore.Run)]
    assert len(opened) == 1
    assert all(isinstance(r, shardstore.RunConflict) for r in results if r not in opened)
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM shardstore.runs WHERE run_id = %s", (rid,)
        ).fetchone() == (1,)


# ---------------------------------------------------------------- the awaiting index


@pytest.mark.slow
def test_awaiting_query_uses_its_index(store: shardstore.Store, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # 40,000 runs of 200 tenants, ~1% waiting on a human
        conn.execute(
            "INSERT INTO shardstore.runs (session_id, run_id, tenant_id, framework, thread_key,"
            " status, awaiting, awaiting_since, metadata, created_at, updated_at, closed_at)"
            " SELECT gen_random_uuid(), gen_random_uuid(), 't' || (g % 200), 'lg', 'k' || g,"
            "        CASE WHEN g % 97 = 0 THEN 'awaiting_human'"
            "             WHEN g % 3 = 0 THEN 'running' ELSE 'done' END,"
            "        CASE WHEN g % 97 = 0 THEN '{}'::jsonb END,"
            "        CASE WHEN g % 97 = 0 THEN now() - g * interval '1 s' END,"
            "        '{}', now(), now(),"
            "        CASE WHEN g % 97 <> 0 AND g % 3 <> 0 THEN now() END"
            "   FROM generate_series(1, 40000) g"
        )
        conn.execute("ANALYZE shardstore.runs")
        with conn.cursor() as cur:
            names = {
                r[0]
                for r in cur.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = 'shardstore'"
                    " AND tablename = 'runs'"
                )
            }
        assert {"runs_pkey", "runs_run_id", "runs_awaiting", "runs_tenant_status"} <= names
        params = {
            "tenant": "t0",
            "status": "awaiting_human",
            "framework": None,
            "session": None,
            "limit": None,
        }
        plan = json.dumps(
            conn.execute("EXPLAIN (FORMAT JSON) " + query("run_list_awaiting"), params).fetchone()
        )
        assert "runs_awaiting" in plan and "Seq Scan" not in plan, plan
        # and the generic plan of the prepared statement (psycopg prepares after 5 runs)
        text = query("run_list_awaiting")
        for i, name in enumerate(("tenant", "framework", "session", "limit"), start=1):
            text = text.replace(f"%({name})s", f"${i}")
        conn.execute(f"PREPARE runs_awaiting_q AS {text}")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        plan = json.dumps(
            conn.execute(
                "EXPLAIN (FORMAT JSON) EXECUTE runs_awaiting_q('t0', NULL, NULL, NULL)"
            ).fetchone()
        )
        assert "runs_awaiting" in plan and "Seq Scan" not in plan, plan
        conn.execute("RESET plan_cache_mode")
        plan = json.dumps(
            conn.execute("EXPLAIN (FORMAT JSON) " + query("run_get"), (uuid.uuid4(),)).fetchone()
        )
        assert "runs_run_id" in plan, plan
    waiting = store.runs(tenant_id="t0", status="awaiting_human")
    assert len(waiting) == 2  # g = 19,400 and 38,800
    assert [r.awaiting_since for r in waiting] == sorted(r.awaiting_since for r in waiting)  # type: ignore[type-var]


# ---------------------------------------------------------------- purge and retention


def test_purges_remove_runs(store: shardstore.Store, dsn: str) -> None:
    def session_with_runs(tenant: str, subject: str) -> uuid.UUID:
        sid = store.create_session(tenant, subject)
        store.append_turn(sid, {"role": "user", "content": "hi"})
        for i in range(3):
            store.open_run(sid, framework="f", thread_key=f"SECRET-{subject}-{i}")
        store.mark_awaiting(store.runs(session_id=sid)[0].run_id, {"why": f"SECRET-{subject}"})
        return sid

    one = session_with_runs("acme", "user:1")
    two = session_with_runs("acme", "user:2")
    three = session_with_runs("acme", "user:2")
    keep = session_with_runs("globex", "user:2")

    report = store.purge_session(one)
    assert report.tables["shardstore.runs"].rows == 3
    assert _count(dsn, one) == 0 and _count(dsn, two) == 3
    report = store.purge_subject("acme", "user:2")
    assert report.tables["shardstore.runs"].rows == 6
    assert _count(dsn, two) == _count(dsn, three) == 0
    assert _count(dsn, keep) == 3
    dry = store.purge_tenant("globex", dry_run=True)
    assert dry.tables["shardstore.runs"].rows == 3 and _count(dsn, keep) == 3
    store.purge_tenant("globex")
    assert _count(dsn, keep) == 0
    with psycopg.connect(dsn) as conn:
        leftover = conn.execute(
            "SELECT count(*) FROM shardstore.runs r WHERE r::text LIKE '%SECRET%'"
        ).fetchone()
    assert leftover == (0,)
    for sid in (one, two, keep):
        assert store.runs(session_id=sid) == []
        with pytest.raises(shardstore.SessionPurged):
            store.open_run(sid, framework="f", thread_key="late")


@pytest.mark.slow
def test_retention_removes_runs_with_their_sessions(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(partition_interval=timedelta(seconds=1), premake=2)
    old = store.create_session("acme")
    store.append_turn(old, {"role": "user", "content": "old"})
    old_runs = [store.open_run(old, framework="f", thread_key=str(i)) for i in range(2)]
    store.mark_awaiting(old_runs[0].run_id, {"x": 1})
    time.sleep(3.2)
    new = store.create_session("acme")
    store.append_turn(new, {"role": "user", "content": "new"})
    new_run = store.open_run(new, framework="f", thread_key="n")

    report = store.maintain(retention=timedelta(seconds=2))

    assert report.errors == []
    assert report.sessions_expired == 1
    assert _count(dsn, old) == 0
    for r in old_runs:
        with pytest.raises(shardstore.RunNotFound):
            store.get_run(r.run_id)
    assert store.get_run(new_run.run_id) == new_run
    assert store.runs(tenant_id="acme") == [new_run]


# ---------------------------------------------------------------- row-level security


@pytest.mark.slow
def test_rls_scopes_runs_to_the_tenant(store: shardstore.Store, dsn: str) -> None:
    acme = store.create_session("acme")
    globex = store.create_session("globex")
    mine = store.open_run(acme, framework="f", thread_key="a")
    theirs = store.open_run(globex, framework="f", thread_key="g")
    store.mark_awaiting(theirs.run_id, {"x": 1})
    role = make_tenant_role(dsn)
    try:
        before = _runs_digest(dsn)
        theirs = store.get_run(theirs.run_id)
        with as_tenant(dsn, role, "acme") as conn:
            assert {r[0] for r in conn.execute("SELECT run_id FROM shardstore.runs")} == {
                mine.run_id
            }
            assert (
                conn.execute(
                    "UPDATE shardstore.runs SET steps = 99 WHERE tenant_id = 'globex'"
                ).rowcount
                == 0
            )
            assert (
                conn.execute(
                    "DELETE FROM shardstore.runs WHERE session_id = %s", (globex,)
                ).rowcount
                == 0
            )
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO shardstore.runs (session_id, run_id, tenant_id, framework,"
                    " thread_key, created_at, updated_at) VALUES (%s, %s, 'globex', 'f', 't',"
                    " now(), now())",
                    (globex, uuid.uuid4()),
                )
            tstore = rls.connect_tenant(conn)
            for call in (
                lambda: tstore.get_run(theirs.run_id),
                lambda: tstore.mark_awaiting(theirs.run_id, {"y": 2}),
                lambda: tstore.resume_run(theirs.run_id),
                lambda: tstore.record_step(theirs.run_id, steps=5),
                lambda: tstore.close_run(theirs.run_id, "failed", error="x"),
            ):
                with pytest.raises(shardstore.RunNotFound):
                    call()
            with pytest.raises(shardstore.SessionNotFound):
                tstore.open_run(globex, framework="f", thread_key="evil")
            with pytest.raises(shardstore.RunConflict):  # its own run id, another session
                tstore.open_run(acme, framework="f", thread_key="b", run_id=mine.run_id)
            assert tstore.runs() == [store.get_run(mine.run_id)]
            assert tstore.runs(tenant_id="globex", status="awaiting_human") == []
            assert tstore.runs(session_id=globex) == []
            assert _runs_digest(dsn) == before
            # its own runs work end to end
            run = tstore.open_run(acme, framework="f", thread_key="c")
            assert tstore.mark_awaiting(run.run_id, {"ok": True}).tenant_id == "acme"
            assert tstore.close_run(run.run_id, "done").status == "done"
            assert tstore.purge_tenant("globex").sessions_affected == 0
            tstore.close()
        assert store.get_run(theirs.run_id) == theirs
    finally:
        drop_tenant_role(dsn, role)


# ---------------------------------------------------------------- asyncio


def test_async_store_behaves_alike(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")

    async def flow() -> shardstore.Run:
        astore = await shardstore.connect_async(dsn)
        try:
            run = await astore.open_run(sid, framework="f", thread_key="t", metadata={"a": 1})
            assert (
                await astore.open_run(sid, framework="f", thread_key="t", run_id=run.run_id)
            ) == run
            waiting = await astore.mark_awaiting(run.run_id, {"approve": "refund"})
            assert await astore.runs(tenant_id="acme", status="awaiting_human") == [waiting]
            await astore.resume_run(run.run_id)
            stepped = await astore.record_step(run.run_id, steps=2, usd_cost=0.5)
            assert (stepped.steps, stepped.usd_cost) == (2, 0.5)
            done = await astore.close_run(run.run_id, "done")
            assert await astore.get_run(run.run_id) == done
            with pytest.raises(shardstore.RunClosed):
                await astore.close_run(run.run_id, "done")
            with pytest.raises(shardstore.RunNotFound):
                await astore.get_run(uuid.uuid4())
            with pytest.raises(shardstore.InvalidInput):
                await astore.record_step(run.run_id, steps=-1)
            return done
        finally:
            await astore.close()

    done = asyncio.run(flow())
    assert store.get_run(done.run_id) == done
    assert store.runs(session_id=sid) == [done]


# ---------------------------------------------------------------- hostile input


@pytest.mark.slow
def test_hostile_input_writes_nothing(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("acme")
    rid = store.open_run(sid, framework="f", thread_key="t").run_id
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    huge = "x" * 2_000_000
    bad: dict[str, Callable[[], Any]] = {
        "session not a uuid": lambda: store.open_run("nope", framework="f", thread_key="t"),
        "session int": lambda: store.open_run(5, framework="f", thread_key="t"),  # type: ignore[arg-type]
        "framework empty": lambda: store.open_run(sid, framework="", thread_key="t"),
        "framework int": lambda: store.open_run(sid, framework=1, thread_key="t"),  # type: ignore[arg-type]
        "framework NUL": lambda: store.open_run(sid, framework="a\x00b", thread_key="t"),
        "framework huge": lambda: store.open_run(sid, framework=huge, thread_key="t"),
        "thread surrogate": lambda: store.open_run(sid, framework="f", thread_key="\ud800"),
        "thread None": lambda: store.open_run(sid, framework="f", thread_key=None),  # type: ignore[arg-type]
        "run_id bad": lambda: store.open_run(sid, framework="f", thread_key="t", run_id="x"),
        "metadata list": lambda: store.open_run(sid, framework="f", thread_key="t", metadata=[]),  # type: ignore[arg-type]
        "metadata NaN": lambda: store.open_run(
            sid, framework="f", thread_key="t", metadata={"x": math.nan}
        ),
        "metadata set": lambda: store.open_run(
            sid, framework="f", thread_key="t", metadata={"x": {1, 2}}
        ),
        "metadata key": lambda: store.open_run(
            sid,
            framework="f",
            thread_key="t",
            metadata={1: "x"},  # type: ignore[dict-item]
        ),
        "metadata cycle": lambda: store.open_run(
            sid, framework="f", thread_key="t", metadata=cyclic
        ),
        "metadata huge": lambda: store.open_run(
            sid, framework="f", thread_key="t", metadata={"x": huge}
        ),
        "awaiting None": lambda: store.mark_awaiting(rid, None),  # type: ignore[arg-type]
        "awaiting str": lambda: store.mark_awaiting(rid, "approve"),  # type: ignore[arg-type]
        "awaiting inf": lambda: store.mark_awaiting(rid, {"x": math.inf}),
        "awaiting bytes": lambda: store.mark_awaiting(rid, {"x": b"raw"}),
        "awaiting huge": lambda: store.mark_awaiting(rid, {"x": huge}),
        "run id int": lambda: store.mark_awaiting(7, {}),  # type: ignore[arg-type]
        "steps negative": lambda: store.record_step(rid, steps=-1),
        "steps float": lambda: store.record_step(rid, steps=1.5),  # type: ignore[arg-type]
        "steps bool": lambda: store.record_step(rid, steps=True),
        "steps huge": lambda: store.record_step(rid, steps=2**63),
        "cost NaN": lambda: store.record_step(rid, usd_cost=math.nan),
        "cost inf": lambda: store.record_step(rid, usd_cost=math.inf),
        "cost negative": lambda: store.record_step(rid, usd_cost=-0.01),
        "cost str": lambda: store.record_step(rid, usd_cost="1"),  # type: ignore[arg-type]
        "cost bool": lambda: store.record_step(rid, usd_cost=True),
        "cost int huge": lambda: store.record_step(rid, usd_cost=10**400),
        "status None": lambda: store.close_run(rid, None),  # type: ignore[arg-type]
        "error NUL": lambda: store.close_run(rid, "failed", error="a\x00"),
        "error int": lambda: store.close_run(rid, "failed", error=1),  # type: ignore[arg-type]
        "error huge": lambda: store.close_run(rid, "failed", error=huge),
        "list tenant": lambda: store.runs(tenant_id=3),  # type: ignore[arg-type]
        "list session": lambda: store.runs(session_id="x"),
        "list status": lambda: store.runs(status=""),
        "list limit 0": lambda: store.runs(limit=0),
        "list limit str": lambda: store.runs(limit="5"),  # type: ignore[arg-type]
        "list framework NUL": lambda: store.runs(framework="\x00"),
    }
    before = _runs_digest(dsn)
    for name, call in bad.items():
        with pytest.raises(shardstore.InvalidInput):
            call()
        assert _runs_digest(dsn) == before, name
    # a cost sum that would overflow is refused by the server, and writes nothing
    store.record_step(rid, usd_cost=1.5e308)
    before = _runs_digest(dsn)
    with pytest.raises(shardstore.InvalidInput):
        store.record_step(rid, usd_cost=1.5e308)
    assert _runs_digest(dsn) == before
    assert store.get_run(rid).status == "running"


# ---------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_lists_runs(
    store: shardstore.Store, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = store.create_session("acme")
    run = store.open_run(sid, framework="langgraph", thread_key="t")
    store.mark_awaiting(run.run_id, {"approve": "refund \u00e9"})
    store.open_run(sid, framework="openai", thread_key="u")
    capsys.readouterr()
    assert (
        main(["--dsn", dsn, "runs", "--tenant", "acme", "--status", "awaiting_human", "--json"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert [d["run_id"] for d in doc] == [str(run.run_id)]
    assert doc[0]["awaiting"] == {"approve": "refund \u00e9"} and doc[0]["steps"] == 0
    assert main(["--dsn", dsn, "runs", "--session", str(sid), "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert "awaiting_human" in out and "openai" in out and str(run.run_id) in out
    assert main(["--dsn", dsn, "runs", "--framework", "none"]) == 0
    assert "no runs" in capsys.readouterr().out
    assert main(["--dsn", dsn, "runs", "--status", "paused"]) == 2
    assert main(["--dsn", dsn, "runs", "--session", "not-a-uuid"]) == 2


# ---------------------------------------------------------------- model (hypothesis)


@dataclass
class ModelRun:
    session: int
    framework: str
    thread_key: str
    status: str = "running"
    awaiting: dict[str, Any] | None = None
    steps: int = 0
    cost: float = 0.0


class RunsMachine(RuleBasedStateMachine):
    """The store against a dict of runs: transitions, errors, step and cost sums."""

    runs_b = Bundle("runs")

    def __init__(self, store: shardstore.Store) -> None:
        super().__init__()
        self.store = store
        self.tenant = f"t-{uuid.uuid4().hex[:8]}"
        self.sessions: list[uuid.UUID] = []
        self.model: dict[uuid.UUID, ModelRun] = {}
        self.purged: set[int] = set()

    @initialize()
    def sessions_(self) -> None:
        self.sessions = [self.store.create_session(self.tenant) for _ in range(2)]

    @rule(target=runs_b, session=st.integers(0, 1), framework=st.sampled_from(["a", "b"]))
    def open(self, session: int, framework: str) -> uuid.UUID:
        sid = self.sessions[session]
        if session in self.purged:
            with pytest.raises(shardstore.SessionPurged):
                self.store.open_run(sid, framework=framework, thread_key="k")
            return uuid.uuid4()  # an id the store never knew
        run = self.store.open_run(sid, framework=framework, thread_key=f"k{len(self.model)}")
        self.model[run.run_id] = ModelRun(session, framework, run.thread_key)
        return run.run_id

    @rule(rid=runs_b, framework=st.sampled_from(["a", "b"]))
    def reopen(self, rid: uuid.UUID, framework: str) -> None:
        m = self.model.get(rid)
        if m is None:
            return
        sid = self.sessions[m.session]
        if framework == m.framework:
            assert (
                self.store.open_run(
                    sid, framework=framework, thread_key=m.thread_key, run_id=rid
                ).run_id
                == rid
            )
        else:
            with pytest.raises(shardstore.RunConflict):
                self.store.open_run(sid, framework=framework, thread_key=m.thread_key, run_id=rid)

    def _expect(self, rid: uuid.UUID, call: Callable[[], shardstore.Run]) -> bool:
        """Run ``call``; True if the model says it must succeed (else check its error)."""
        m = self.model.get(rid)
        if m is None:
            with pytest.raises(shardstore.RunNotFound):
                call()
            return False
        if m.status in ("done", "failed"):
            with pytest.raises(shardstore.RunClosed):
                call()
            return False
        return True

    def _check(self, rid: uuid.UUID, run: shardstore.Run) -> None:
        m = self.model[rid]
        assert (run.status, run.awaiting, run.steps, run.usd_cost) == (
            m.status,
            m.awaiting,
            m.steps,
            m.cost,
        )
        assert run.session_id == self.sessions[m.session] and run.tenant_id == self.tenant

    @rule(rid=runs_b, what=st.dictionaries(st.sampled_from("xyz"), st.integers(), max_size=2))
    def mark(self, rid: uuid.UUID, what: dict[str, Any]) -> None:
        call = lambda: self.store.mark_awaiting(rid, what)  # noqa: E731
        if self._expect(rid, call):
            run = call()
            self.model[rid].status, self.model[rid].awaiting = "awaiting_human", what
            self._check(rid, run)

    @rule(rid=runs_b)
    def resume(self, rid: uuid.UUID) -> None:
        call = lambda: self.store.resume_run(rid)  # noqa: E731
        if self._expect(rid, call):
            run = call()
            self.model[rid].status, self.model[rid].awaiting = "running", None
            self._check(rid, run)

    @rule(
        rid=runs_b,
        steps=st.integers(0, 5),
        cost=st.none() | st.sampled_from([0, 0.1, 0.25, 1e-9, 3]),
    )
    def step(self, rid: uuid.UUID, steps: int, cost: float | None) -> None:
        call = lambda: self.store.record_step(rid, steps=steps, usd_cost=cost)  # noqa: E731
        if self._expect(rid, call):
            run = call()
            self.model[rid].steps += steps
            self.model[rid].cost += float(cost or 0)
            self._check(rid, run)

    @rule(rid=runs_b, status=st.sampled_from(["done", "failed"]))
    def close(self, rid: uuid.UUID, status: str) -> None:
        call = lambda: self.store.close_run(rid, status)  # noqa: E731
        if self._expect(rid, call):
            run = call()
            self.model[rid].status, self.model[rid].awaiting = status, None
            self._check(rid, run)
            assert run.closed_at is not None

    @rule(session=st.integers(0, 1))
    def purge(self, session: int) -> None:
        if session in self.purged:
            return
        self.store.purge_session(self.sessions[session])
        self.purged.add(session)
        for rid in [r for r, m in self.model.items() if m.session == session]:
            del self.model[rid]

    @invariant()
    def listings_match(self) -> None:
        if not self.sessions:
            return
        found = {r.run_id: r for r in self.store.runs(tenant_id=self.tenant)}
        assert set(found) == set(self.model)
        for rid, run in found.items():
            self._check(rid, run)
        waiting = self.store.runs(tenant_id=self.tenant, status="awaiting_human")
        assert {r.run_id for r in waiting} == {
            r for r, m in self.model.items() if m.status == "awaiting_human"
        }


@pytest.mark.slow
def test_store_matches_the_model(store: shardstore.Store) -> None:
    run_state_machine_as_test(
        lambda: RunsMachine(store),
        settings=settings(
            max_examples=15,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


# ---------------------------------------------------------------- crash (SIGKILL)

WRITER = textwrap.dedent(
    """
    import os, sys, uuid, json
    import shardstore
    dsn, log_path, sid, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    import random
    rnd = random.Random(seed)
    store = shardstore.connect(dsn, background_fold=False)
    log = open(log_path, "a", buffering=1)
    def note(line):
        log.write(line + "\\n"); log.flush(); os.fsync(log.fileno())
    runs = [uuid.UUID(int=i + 1) for i in range(4)]
    for rid in runs:
        store.open_run(sid, framework="crash", thread_key=str(rid), run_id=rid)
    print("ready", flush=True)
    n = seed * 1_000_000
    while True:
        rid = rnd.choice(runs)
        op = rnd.choice(["step", "step", "step", "await", "resume"])
        n += 1
        note(f"B {n} {rid} {op}")
        try:
            if op == "step":
                store.record_step(rid, steps=1, usd_cost=0.25)
            elif op == "await":
                store.mark_awaiting(rid, {"n": n})
            else:
                store.resume_run(rid)
        except shardstore.RunClosed:
            pass
        note(f"A {n} {rid} {op}")
    """
)


def _acked(log: str) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
    """Per run: acknowledged steps, begun-but-unacknowledged steps, and the last state op
    (await / resume) known to have landed: acknowledged, and no unacknowledged one after it."""
    begun: dict[int, tuple[str, str]] = {}
    acked_steps: dict[str, int] = {}
    last: dict[str, tuple[int, str]] = {}
    for line in log.splitlines():
        parts = line.split()
        if (
            len(parts) != 4
            or parts[0] not in ("A", "B")
            or len(parts[2]) != 36
            or parts[3] not in ("step", "await", "resume")
        ):
            continue  # a torn last line: its call was not acknowledged
        kind, n, rid, op = parts[0], int(parts[1]), parts[2], parts[3]
        if kind == "B":
            begun[n] = (rid, op)
            continue
        del begun[n]
        if op == "step":
            acked_steps[rid] = acked_steps.get(rid, 0) + 1
        else:
            last[rid] = (n, op)
    pending: dict[str, int] = {}
    for n, (rid, op) in begun.items():
        if op == "step":
            pending[rid] = pending.get(rid, 0) + 1
        elif rid in last and last[rid][0] < n:
            del last[rid]  # a later state change may or may not have landed
    return acked_steps, pending, {rid: op for rid, (_, op) in last.items()}


@pytest.mark.slow
def test_killed_writer_leaves_valid_runs(store: shardstore.Store, dsn: str, tmp_path: Path) -> None:
    sid = store.create_session("acme")
    log = tmp_path / "log"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rnd = random.Random(11)
    kills = 5
    for round_ in range(kills):
        proc = subprocess.Popen(
            [sys.executable, str(script), dsn, str(log), str(sid), str(round_)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(rnd.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    acked, pending, last = _acked(log.read_text())
    assert sum(acked.values()) > 20  # the writer got somewhere
    for i in range(4):
        rid = uuid.UUID(int=i + 1)
        run = store.get_run(rid)
        key = str(rid)
        # every acknowledged step is there; at most the in-flight ones on top
        assert acked.get(key, 0) <= run.steps <= acked.get(key, 0) + pending.get(key, 0)
        assert run.usd_cost == 0.25 * run.steps
        assert run.status in ("running", "awaiting_human")
        assert (run.awaiting is None) == (run.awaiting_since is None) == (run.status == "running")
        if key in last:
            assert run.status == {"await": "awaiting_human", "resume": "running"}[last[key]]
    # the runs still work, and nothing else was left half-written
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'"
        ).fetchone() == (0,)
    for i in range(4):
        assert store.close_run(uuid.UUID(int=i + 1), "done").status == "done"


@pytest.mark.slow
def test_server_killed_mid_update_leaves_valid_runs() -> None:
    """The whole server SIGKILLed (and restarted: crash recovery) while a writer updates
    runs: every acknowledged update survives, a call that failed may or may not have
    landed, and every run is valid."""
    from tests.faults import CrashableServer

    server = CrashableServer()
    try:
        dsn = server.create_database()
        store = shardstore.connect(dsn, background_fold=False)
        sid = store.create_session("acme")
        rids = [store.open_run(sid, framework="f", thread_key=str(i)).run_id for i in range(3)]
        acked = dict.fromkeys(rids, 0)
        unsure = dict.fromkeys(rids, 0)
        stop = threading.Event()

        def write() -> None:
            rnd = random.Random(5)
            while not stop.is_set():
                rid = rnd.choice(rids)
                try:
                    store.record_step(rid, steps=1, usd_cost=0.5)
                    acked[rid] += 1
                except (shardstore.DatabaseUnavailable, shardstore.Conflict):
                    unsure[rid] += 1
                    time.sleep(0.02)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            for _ in range(3):
                time.sleep(random.uniform(0.1, 0.3))
                server.crash()
            time.sleep(0.2)
        finally:
            stop.set()
            writer.join(timeout=60)
        assert sum(acked.values()) > 10
        for rid in rids:
            run = store.get_run(rid)
            assert acked[rid] <= run.steps <= acked[rid] + unsure[rid]
            assert run.usd_cost == 0.5 * run.steps and run.status == "running"
            assert store.close_run(rid, "done").closed
        store.close()
    finally:
        server.close()
