"""Partition maintenance on a real PostgreSQL: premake, idle folds, retention with archive
hook, the advisory lock, dry run, the report and CLI, the in-database procedure, finishing an
interrupted detach, and appends under load while maintenance runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from partition_manager.plan import PartitionState
from shardstore.cli import main
from shardstore.core.executor import run_sync
from shardstore.history.ops import append_op
from shardstore.lifecycle import maintenance
from shardstore.lifecycle.maintenance import MAINTENANCE_LOCK_KEY, MaintenanceReport

SECOND = timedelta(seconds=1)
MakeStore = Callable[..., shardstore.Store]


def _wait_for_next_second(margin: float = 0.1) -> None:
    now = time.time()
    time.sleep(1 - (now % 1) + margin)


def _attached(conn: psycopg.Connection[Any]) -> list[tuple[str, bool]]:
    rows = conn.execute(
        "SELECT c.relname::text, i.inhdetachpending FROM pg_inherits i"
        " JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'shardstore.agent_history'::regclass ORDER BY 1"
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def _standalone(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute(
        "SELECT relname::text FROM pg_class WHERE relnamespace = 'shardstore'::regnamespace"
        " AND relkind = 'r' AND NOT relispartition AND relname LIKE 'agent\\_history\\_%'"
        " ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


@pytest.fixture
def admin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


# ---------------------------------------------------------------- premake


@pytest.mark.slow
def test_premake_creates_indexed_checked_partitions_ahead(
    make_store: MakeStore, admin: psycopg.Connection[Any]
) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    report = store.maintain(premake=6)
    assert report.healthy and not report.errors
    assert report.partitions_ahead >= 6 and report.current_attached
    assert len(report.partitions_created) >= 4
    for name in report.partitions_created:
        constraints = admin.execute(
            "SELECT conname, contype FROM pg_constraint"
            " WHERE conrelid = ('shardstore.' || quote_ident(%s))::regclass",
            (name,),
        ).fetchall()
        assert (f"{name}_bounds", "c") in constraints
        assert any(kind == "p" for _, kind in constraints)
    assert report.oldest_bound is not None and report.newest_bound is not None
    assert all(p.state is PartitionState.ATTACHED for p in report.partitions)
    # a second run has nothing to create
    again = store.maintain(premake=6)
    assert len(again.partitions_created) <= 1  # a second may have passed


# ---------------------------------------------------------------- folds


@pytest.mark.slow
def test_idle_sessions_are_folded_busy_ones_not(
    make_store: MakeStore, admin: psycopg.Connection[Any]
) -> None:
    store = make_store()
    idle = store.create_session("acme")
    busy = store.create_session("acme")
    for i in range(3):
        store.append_turn(idle, {"role": "user", "content": f"idle {i}"})
    time.sleep(1.2)
    store.append_turn(busy, {"role": "user", "content": "just now"})
    report = store.maintain(flush_idle=SECOND)
    assert (report.sessions_folded, report.turns_folded) == (1, 3)
    buffered = dict(
        admin.execute(
            "SELECT session_id, count(*) FROM shardstore.turn_buffer GROUP BY 1"
        ).fetchall()
    )
    assert idle not in buffered and buffered[busy] == 1
    (folded,) = admin.execute(
        "SELECT turn_count FROM shardstore.agent_history WHERE session_id = %s", (idle,)
    ).fetchone()  # type: ignore[misc]
    assert folded == 3
    # the open chunk stays open: the next turn joins it
    r = store.append_turn(idle, {"role": "user", "content": "back"})
    assert r.chunk_seq == 0
    assert [t.message["content"] for t in store.history(idle)] == [
        "idle 0",
        "idle 1",
        "idle 2",
        "back",
    ]


# ---------------------------------------------------------------- retention


@pytest.mark.slow
def test_retention_drops_old_partitions_sessions_and_buffered_turns(
    make_store: MakeStore, admin: psycopg.Connection[Any]
) -> None:
    store = make_store(partition_interval=SECOND, premake=2)
    old = store.create_session("acme", "user:old")
    mixed = store.create_session("acme", "user:mixed")
    _wait_for_next_second()
    store.append_turn(old, {"role": "user", "content": "old"}, idempotency_key="o-1")
    store.flush(old)
    store.append_turn(mixed, {"role": "user", "content": "mixed old folded"}, "m-1")
    store.flush(mixed)
    time.sleep(0.5)
    store.append_turn(mixed, {"role": "user", "content": "stuck"}, "m-2")  # stays buffered
    old_partition = admin.execute(
        "SELECT c.relname FROM shardstore.agent_history h JOIN pg_class c ON c.oid = h.tableoid"
        " WHERE h.session_id = %s",
        (old,),
    ).fetchone()
    assert old_partition is not None
    time.sleep(3.2)
    # seals the chunk holding "stuck" without folding it (as if the process died)
    recent = {"role": "user", "content": "recent"}
    run_sync(admin, append_op(store.ctx, mixed, [recent], ["m-3"]))
    archived: list[tuple[str, int]] = []

    def archive(table: str) -> None:
        with psycopg.connect(store.dsn or "", autocommit=True) as c:
            (n,) = c.execute(f"SELECT count(*) FROM {table}").fetchone()  # type: ignore[misc]
            archived.append((table, n))

    report = store.maintain(retention=timedelta(seconds=2), archive=archive)
    assert report.errors == []
    assert report.sessions_expired == 1
    assert report.buffered_turns_expired == 1
    assert old_partition[0] in report.partitions_dropped
    assert ("shardstore." + old_partition[0].replace("_p", "_r", 1), 2) in archived
    assert report.retention is not None and report.plan is not None
    boundary = report.plan.retention_before
    assert boundary is not None
    for p in report.partitions:
        assert p.upper > boundary
    # nothing of the dropped range is left anywhere
    assert _standalone(admin) == []
    with pytest.raises(shardstore.SessionNotFound):
        store.session(old)
    for table in ("turn_buffer", "chunk_map", "turn_keys"):
        (n,) = admin.execute(
            f"SELECT count(*) FROM shardstore.{table} WHERE session_id = %s", (old,)
        ).fetchone()  # type: ignore[misc]
        assert n == 0, table
    assert [t.message["content"] for t in store.history(mixed)] == ["recent"]
    keys = admin.execute(
        "SELECT idempotency_key FROM shardstore.turn_keys WHERE session_id = %s ORDER BY 1",
        (mixed,),
    ).fetchall()
    assert keys == [("m-3",)]
    (maps,) = admin.execute(
        "SELECT count(*) FROM shardstore.chunk_map WHERE chunk_start < %s", (boundary,)
    ).fetchone()  # type: ignore[misc]
    assert maps == 0
    # appending to the surviving session still works, in order
    r = store.append_turn(mixed, {"role": "user", "content": "after"})
    assert r.turn_seq == 3


@pytest.mark.slow
def test_failed_archive_keeps_the_table_for_the_next_run(
    make_store: MakeStore, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "x"})
    store.flush(sid)
    time.sleep(2.2)
    report = store.maintain(retention=SECOND, archive="exit 7")
    assert not report.healthy and report.partitions_dropped == []
    assert any("exited with status 7" in e for e in report.errors)
    retired = _standalone(admin)
    assert retired and all(name.startswith("agent_history_r") for name in retired)
    log = tmp_path / "archived.txt"
    report = store.maintain(retention=SECOND, archive=f"echo {{table}} >> {log}")
    assert report.errors == [], report.errors
    assert _standalone(admin) == []
    assert {f"shardstore.{n}" for n in retired} <= set(log.read_text().split())


# ---------------------------------------------------------------- lock, dry run, report


def test_second_run_reports_already_running(
    make_store: MakeStore, admin: psycopg.Connection[Any], dsn: str, capsys: Any
) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    before = _attached(admin)
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MAINTENANCE_LOCK_KEY,))
        report = store.maintain(premake=8)
        assert report.already_running and report.partitions_created == []
        assert report.to_json()["already_running"] is True
        capsys.readouterr()
        assert main(["--dsn", dsn, "maintain", "--premake", "8"]) == 0
        assert "already running" in capsys.readouterr().out
        notices: list[str] = []
        holder2 = psycopg.connect(dsn, autocommit=True)
        holder2.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        holder2.execute("CALL shardstore.run_maintenance(8)")
        holder2.close()
        assert any("already running" in n for n in notices)
        # closing a connection frees its locks only once its backend has exited: unlock now
        holder.execute("SELECT pg_advisory_unlock(%s)", (MAINTENANCE_LOCK_KEY,))
    assert [n for n, _ in _attached(admin)][: len(before)] == [n for n, _ in before]
    # the lock is free again and a run goes through; the run gives its lock back
    report = store.maintain(premake=8)
    assert not report.already_running and report.partitions_ahead >= 8
    (held,) = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
    ).fetchone()  # type: ignore[misc]
    assert held == 0


def test_runs_in_threads_never_overlap(make_store: MakeStore) -> None:
    store = make_store(partition_interval=SECOND, premake=1, pool_max_size=4)
    reports: list[MaintenanceReport] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        reports.append(store.maintain(premake=30))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reports) == 4
    made = [n for r in reports for n in r.partitions_created]
    assert len(made) == len(set(made)), "two runs created the same partition"
    assert any(not r.already_running for r in reports)


@pytest.mark.slow
def test_dry_run_changes_nothing_and_prints_the_plan(
    make_store: MakeStore, admin: psycopg.Connection[Any], dsn: str, capsys: Any
) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "x"})
    before = (_attached(admin), _standalone(admin))
    report = store.maintain(dry_run=True, premake=5, flush_idle=timedelta(0))
    assert report.dry_run and report.plan is not None and len(report.plan.create) >= 4
    assert report.sessions_to_fold == 1
    assert (_attached(admin), _standalone(admin)) == before
    capsys.readouterr()
    rc = main(["--dsn", dsn, "--json", "maintain", "--dry-run", "--premake", "5"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] is True and len(doc["plan"]["create"]) >= 4
    assert rc == 3  # not yet healthy: the plan has not been applied
    assert main(["--dsn", dsn, "maintain", "--dry-run", "--premake", "5"]) == 3
    assert "would create" in capsys.readouterr().out
    # connecting makes sure the current partition exists (every command does): nothing else
    after = (_attached(admin), _standalone(admin))
    assert after[1] == before[1]
    assert len(set(after[0]) - set(before[0])) <= 1


@pytest.mark.slow
def test_cli_report_and_exit_codes(make_store: MakeStore, dsn: str, capsys: Any) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "x"})
    capsys.readouterr()
    rc = main(
        ["--dsn", dsn, "--json", "maintain", "--premake", "4", "--flush-idle", "0s",
         "--lock-timeout", "200ms"]
    )  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0, doc
    for key in (
        "partitions_created",
        "partitions_dropped",
        "partitions_ahead",
        "oldest_bound",
        "newest_bound",
        "partitions",
        "sessions_folded",
        "seconds",
        "healthy",
        "errors",
    ):
        assert key in doc
    assert doc["partitions_ahead"] >= 4 and doc["sessions_folded"] == 1
    assert doc["lock_timeout_seconds"] == 0.2
    assert all({"name", "lower", "upper", "rows", "bytes"} <= set(p) for p in doc["partitions"])
    assert sum(p["rows"] for p in doc["partitions"]) >= 0
    assert main(["--dsn", dsn, "maintain"]) == 0
    text = capsys.readouterr().out
    assert "partitions ahead" in text and "healthy" in text
    # unhealthy: ATTACH cannot get its lock, so partitions ahead stay short -> exit 3
    with psycopg.connect(dsn) as blocker:
        blocker.execute("LOCK TABLE ONLY shardstore.agent_history IN SHARE UPDATE EXCLUSIVE MODE")
        rc = main(["--dsn", dsn, "maintain", "--premake", "12", "--lock-timeout", "20ms"])
        out = capsys.readouterr().out
        blocker.rollback()
    assert rc == 3
    assert "UNHEALTHY" in out and "timed out" in out
    # the run was logged
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT source, healthy FROM shardstore.maintenance_runs ORDER BY run_id"
        ).fetchall()
    assert rows[-1] == ("python", False) and ("python", True) in rows


@pytest.mark.slow
def test_maintain_command_in_a_process_of_its_own(make_store: MakeStore, dsn: str) -> None:
    """What cron runs: the maintain command as a process, its JSON report on stdout."""
    make_store(partition_interval=SECOND, premake=1)
    done = subprocess.run(
        [sys.executable, "-m", "shardstore", "--dsn", dsn, "--json", "maintain", "--premake", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partitions_ahead"] >= 3


# ---------------------------------------------------------------- in-database procedure


@pytest.mark.slow
def test_call_run_maintenance(make_store: MakeStore, admin: psycopg.Connection[Any]) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    old = store.create_session("acme")
    store.append_turn(old, {"role": "user", "content": "old"})
    store.flush(old)
    idle = store.create_session("acme")
    time.sleep(3.3)
    store.append_turn(idle, {"role": "user", "content": "idle"})
    time.sleep(0.3)
    called = time.monotonic()
    admin.execute(
        "CALL shardstore.run_maintenance(5, interval '2 seconds', interval '0.2 seconds',"
        " interval '200 milliseconds')"
    )
    source, healthy, doc = admin.execute(
        "SELECT source, healthy, report FROM shardstore.maintenance_runs ORDER BY run_id DESC"
    ).fetchone()  # type: ignore[misc]
    assert source == "procedure" and healthy, doc
    assert doc["partitions_ahead"] >= 5 and doc["sessions_expired"] == 1
    assert doc["sessions_folded"] == 1 and doc["partitions_dropped"]
    assert _standalone(admin) == []
    with pytest.raises(shardstore.SessionNotFound):
        store.session(old)
    # the in-database run and the Python planner agree: nothing left to do. The planner's
    # retention is stretched by the time since the CALL began, so a partition that has only
    # come of age since then (a loaded machine takes seconds here) is not counted against it.
    since_call = timedelta(seconds=time.monotonic() - called + 0.5)
    report = store.maintain(dry_run=True, premake=5, retention=timedelta(seconds=2) + since_call)
    assert report.plan is not None
    assert report.plan.finalize == () and report.plan.expire == ()
    assert len(report.plan.create) <= 1  # a second may have passed since the CALL


# ---------------------------------------------------------------- interrupted detach


def _interrupt_detach(dsn: str, admin: psycopg.Connection[Any], name: str) -> None:
    """Leave ``name`` detach-pending: DETACH CONCURRENTLY waits for an old snapshot, and its
    backend is killed while it waits."""
    with psycopg.connect(dsn) as snapshot_holder:
        snapshot_holder.execute("SELECT count(*) FROM shardstore.agent_history")
        detacher = psycopg.connect(dsn, autocommit=True)
        pid = detacher.info.backend_pid
        errors: list[BaseException] = []

        def detach() -> None:
            try:
                detacher.execute(
                    f"ALTER TABLE shardstore.agent_history DETACH PARTITION shardstore.{name}"
                    " CONCURRENTLY"
                )
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=detach)
        thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            row = admin.execute(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row and row[0] == "virtualxid":
                break
            time.sleep(0.02)
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thread.join()
        assert errors, "the detach should have been killed"
        snapshot_holder.rollback()
    assert (name, True) in _attached(admin)


@pytest.mark.slow
def test_interrupted_detach_is_finished_next_run(
    make_store: MakeStore, admin: psycopg.Connection[Any], dsn: str
) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "x"})
    store.flush(sid)
    time.sleep(1.1)
    name = _attached(admin)[0][0]
    _interrupt_detach(dsn, admin, name)

    report = store.maintain()  # no retention: the detach is finished, the table kept
    assert name in report.detaches_finished and report.errors == []
    assert name not in [n for n, _ in _attached(admin)]
    assert name in _standalone(admin)
    assert any(p.name == name and p.state is PartitionState.DETACHED for p in report.partitions)


@pytest.mark.slow
def test_interrupted_detach_of_an_expired_partition_is_finished_and_dropped(
    make_store: MakeStore, admin: psycopg.Connection[Any], dsn: str
) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "x"})
    store.flush(sid)
    time.sleep(1.1)
    name = _attached(admin)[0][0]
    _interrupt_detach(dsn, admin, name)
    time.sleep(1.5)
    report = store.maintain(retention=SECOND)
    assert report.errors == []
    assert name in report.detaches_finished and name in report.partitions_dropped
    assert name not in [n for n, _ in _attached(admin)] and _standalone(admin) == []


# ---------------------------------------------------------------- asyncio


@pytest.mark.slow
def test_async_maintain(dsn: str) -> None:
    async def go() -> MaintenanceReport:
        store = await shardstore.connect_async(dsn, partition_interval=SECOND, premake=1)
        try:
            sid = await store.create_session("acme")
            await store.append_turn(sid, {"role": "user", "content": "x"})
            await store.flush(sid)
            await asyncio.sleep(2.2)
            seen: list[str] = []

            async def archive(table: str) -> None:
                seen.append(table)

            report = await store.maintain(premake=3, retention=SECOND, archive=archive)
            assert seen and all(t.startswith("shardstore.agent_history_r") for t in seen)
            return report
        finally:
            await store.close()

    report = asyncio.run(go())
    assert report.healthy, report.errors
    assert report.partitions_dropped and report.partitions_ahead >= 3


# ---------------------------------------------------------------- under load


@pytest.mark.slow
def test_appends_under_load_never_fail_nor_wait_past_the_lock_timeout(
    make_store: MakeStore, dsn: str
) -> None:
    """Writers append (and fold inline, touching agent_history) on other threads while
    maintenance runs back to back: creating partitions, folding every session, detaching
    and dropping expired partitions. No append fails, and none waits for a lock longer than
    maintenance's lock timeout plus slack: the writers' sessions carry that as their own
    lock_timeout, so such a wait would fail the append. (Wall-clock latency is printed,
    not asserted: a disk stall on a shared machine is not a lock wait.)"""
    lock_timeout = 0.2
    slack = 0.3
    with psycopg.connect(dsn, autocommit=True) as conn:
        dbname = conn.info.dbname
        waits_ms = int((lock_timeout + slack) * 1000)
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET lock_timeout = '{waits_ms}ms'")
    store = make_store(
        partition_interval=SECOND, premake=1, background_fold=False, pool_max_size=8,
        chunk_tokens=200,
    )  # fmt: skip
    writers = 4
    sessions = [store.create_session("acme", f"user:{i}") for i in range(writers)]
    stop = threading.Event()
    errors: list[BaseException] = []
    latencies: list[float] = []
    lock = threading.Lock()

    def writer(sid: Any) -> None:
        i = 0
        mine: list[float] = []
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                store.append_turn(sid, {"role": "user", "content": f"turn {i} " + "word " * 30})
                mine.append(time.perf_counter() - t0)
                i += 1
                time.sleep(0.002)
        except BaseException as exc:
            errors.append(exc)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=writer, args=(sid,)) for sid in sessions]
    for t in threads:
        t.start()
    reports: list[MaintenanceReport] = []
    deadline = time.monotonic() + 6
    try:
        while time.monotonic() < deadline:
            reports.append(
                store.maintain(
                    premake=3,
                    retention=timedelta(seconds=2),
                    flush_idle=timedelta(0),
                    lock_timeout=timedelta(seconds=lock_timeout),
                )
            )
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    dropped = sum(len(r.partitions_dropped) for r in reports)
    created = sum(len(r.partitions_created) for r in reports)
    folded = sum(r.sessions_folded for r in reports)
    assert dropped >= 2 and created >= 2 and folded >= 1, (dropped, created, folded)
    latencies.sort()
    worst = latencies[-1]
    print(
        f"\n{len(latencies)} appends during {len(reports)} maintenance runs "
        f"({created} created, {dropped} dropped, {folded} session folds): "
        f"p50 {latencies[len(latencies) // 2] * 1000:.2f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99)] * 1000:.2f} ms, max {worst * 1000:.1f} ms"
    )
    for r in reports:
        assert all("timed out" in e for e in r.errors), r.errors


# ---------------------------------------------------------------- the op itself


def test_maintain_refuses_a_connection_inside_a_transaction(
    make_store: MakeStore, dsn: str
) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    with psycopg.connect(dsn) as conn, pytest.raises(shardstore.ConfigurationError) as caught:
        run_sync(conn, maintenance.maintain(store))
    assert "autocommit" in str(caught.value)


@pytest.mark.slow
def test_archive_command_gets_table_and_dsn_in_its_environment(
    make_store: MakeStore, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    store = make_store(partition_interval=SECOND, premake=1)
    sid = store.create_session("acme")
    store.append_turn(sid, {"role": "user", "content": "x"})
    store.flush(sid)
    time.sleep(2.2)
    log = tmp_path / "env.txt"
    report = store.maintain(
        retention=SECOND,
        archive=f'echo "$SHARDSTORE_ARCHIVE_TABLE|$SHARDSTORE_DSN|{{table}}" >> {log}',
    )
    assert report.errors == [] and report.archived
    lines = log.read_text().splitlines()
    assert [line.split("|")[0] for line in lines] == report.archived
    assert all(line.split("|")[1] == store.dsn for line in lines)
    assert all(line.split("|")[2] == line.split("|")[0] for line in lines)
    assert _standalone(admin) == []


@pytest.mark.parametrize(
    "lock_timeout",
    [timedelta(0), timedelta(microseconds=999), timedelta(milliseconds=2**31), timedelta.max],
)
def test_maintain_refuses_a_lock_timeout_postgres_cannot_hold(
    store: shardstore.Store, admin: psycopg.Connection[Any], lock_timeout: timedelta
) -> None:
    """lock_timeout is PostgreSQL's int of milliseconds: under 1 ms or past 2**31 - 1 ms is a
    ConfigurationError before the run starts, and nothing is logged or changed."""
    (runs,) = admin.execute("SELECT count(*) FROM shardstore.maintenance_runs").fetchone() or (0,)
    with pytest.raises(shardstore.ConfigurationError, match="lock_timeout"):
        store.maintain(lock_timeout=lock_timeout, embed=False)
    after = admin.execute("SELECT count(*) FROM shardstore.maintenance_runs").fetchone()
    assert after == (runs,)
    assert store.maintain(lock_timeout=timedelta(milliseconds=2**31 - 1), embed=False).healthy
