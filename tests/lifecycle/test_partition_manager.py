"""partition_manager alone, on a plain RANGE-partitioned table of its own (not agent_history):
premake, ATTACH under a held lock (lock_timeout + backoff), retention with sync and async
archive hooks, plain DETACH where CONCURRENTLY is impossible, an interrupted detach
finished, dry run, the run lock, and no shardstore import."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from partition_manager import (
    MaintenancePolicy,
    PartitionBounds,
    PartitionState,
    RangeTable,
    RunHooks,
    RunLog,
    bounds_for,
    command_hook,
    lock_key_for,
    maintenance_op,
    premake_op,
)
from partition_manager.driver import run_async, run_sync
from partition_manager.plan import MaintenancePlan
from partition_manager.steps import Op

HOUR = timedelta(hours=1)
TABLE = RangeTable("app", "events", "at", interval=HOUR)
Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(dsn: str) -> Iterator[Conn]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE SCHEMA app;"
            "CREATE TABLE app.events (id bigint NOT NULL, at timestamptz NOT NULL,"
            " body text DEFAULT 'none', PRIMARY KEY (id, at)) PARTITION BY RANGE (at);"
            "CREATE INDEX events_body ON app.events (body)"
        )
        yield c


def _partitions(conn: Conn) -> list[tuple[str, bool]]:
    rows = conn.execute(
        "SELECT c.relname::text, i.inhdetachpending FROM pg_inherits i"
        " JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'app.events'::regclass ORDER BY 1"
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def _standalone(conn: Conn) -> list[str]:
    rows = conn.execute(
        "SELECT relname::text FROM pg_class WHERE relnamespace = 'app'::regnamespace"
        " AND relkind = 'r' AND NOT relispartition ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def _now(conn: Conn) -> Any:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def _old_partitions(conn: Conn, offsets: list[int]) -> list[PartitionBounds]:
    """Attach partitions ``offsets`` hours from the current one, one row in each."""
    current = bounds_for(_now(conn), HOUR, TABLE.origin, TABLE.naming)
    made = []
    for i, k in enumerate(offsets):
        b = PartitionBounds(current.lower + k * HOUR, current.upper + k * HOUR, TABLE.naming)
        assert run_sync(conn, TABLE.attach_op(b, timedelta(seconds=1)))
        conn.execute("INSERT INTO app.events (id, at) VALUES (%s, %s)", (i, b.lower))
        made.append(b)
    return made


def _held_advisory_locks(conn: Conn) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
    ).fetchone()
    assert row is not None
    return int(row[0])


# ---------------------------------------------------------------- premake


def test_premake_makes_checked_indexed_partitions(conn: Conn) -> None:
    made = run_sync(conn, premake_op(TABLE, 3))
    assert len(made) == 4 and all(n.startswith("events_p") for n in made)
    assert [n for n, _ in _partitions(conn)] == made
    for name in made:
        checks = conn.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'c'"
            " AND conrelid = ('app.' || quote_ident(%s))::regclass",
            (name,),
        ).fetchall()
        assert checks == [(f"{name}_bounds",)]
        (indexes,) = conn.execute(
            "SELECT count(*) FROM pg_index WHERE indrelid = ('app.' || quote_ident(%s))::regclass",
            (name,),
        ).fetchone()  # type: ignore[misc]
        assert indexes == 2  # the primary key and events_body, attached to the parent's
    now = _now(conn)
    current = bounds_for(now, HOUR, TABLE.origin, TABLE.naming)
    assert made[0] == current.name
    conn.execute("INSERT INTO app.events (id, at) VALUES (1, now())")
    assert run_sync(conn, premake_op(TABLE, 3)) == []


@pytest.mark.slow
def test_attach_waits_out_a_held_lock_with_backoff(conn: Conn, dsn: str) -> None:
    outcomes: list[bool] = []

    class Counting(RangeTable):
        def attach_op(self, bounds: PartitionBounds, lock_timeout: timedelta) -> Op[bool]:
            ok = yield from RangeTable.attach_op(self, bounds, lock_timeout)
            outcomes.append(ok)
            return ok

    table = Counting("app", "events", "at", interval=HOUR)
    blocker = psycopg.connect(dsn)
    blocker.execute("LOCK TABLE ONLY app.events IN SHARE UPDATE EXCLUSIVE MODE")
    release = threading.Timer(0.4, blocker.rollback)
    release.start()
    try:
        t0 = time.monotonic()
        made = run_sync(
            conn, premake_op(table, 0, lock_timeout=timedelta(milliseconds=50), attempts=8)
        )
        took = time.monotonic() - t0
    finally:
        release.join()
        blocker.close()
    assert len(made) == 1 and [n for n, _ in _partitions(conn)] == made
    assert outcomes[-1] is True and False in outcomes, outcomes  # timed out, then attached
    assert took >= 0.35
    # the table made by the first, timed-out attempt was reused: no strays
    assert _standalone(conn) == []


def test_attach_that_never_gets_its_lock_is_an_error_in_the_report(conn: Conn, dsn: str) -> None:
    with psycopg.connect(dsn) as blocker:
        blocker.execute("LOCK TABLE ONLY app.events IN SHARE UPDATE EXCLUSIVE MODE")
        report = run_sync(
            conn,
            maintenance_op(
                TABLE, MaintenancePolicy(premake=1), lock_timeout=timedelta(milliseconds=20),
                attempts=2,
            ),
        )  # fmt: skip
        blocker.rollback()
    assert not report.healthy and report.partitions_created == []
    assert len(report.errors) == 2 and all("timed out 2 times" in e for e in report.errors)
    assert _held_advisory_locks(conn) == 0
    again = run_sync(conn, maintenance_op(TABLE, MaintenancePolicy(premake=1)))
    assert again.healthy and len(again.partitions_created) == 2


# ---------------------------------------------------------------- retention


@pytest.mark.slow
def test_retention_detaches_archives_and_drops(conn: Conn, dsn: str) -> None:
    old = _old_partitions(conn, [-5, -4, -3, -2, 0])
    archived: list[tuple[str, int]] = []

    def archive(table: str) -> None:
        with psycopg.connect(dsn) as c:
            (n,) = c.execute(f"SELECT count(*) FROM {table}").fetchone()  # type: ignore[misc]
            archived.append((table, n))

    policy = MaintenancePolicy(premake=1, retention=2 * HOUR)
    report = run_sync(conn, maintenance_op(TABLE, policy, archive=archive))
    assert report.errors == [] and report.healthy
    expired = [b.name for b in old[:3]]  # -2 ends after now - 2h: kept
    assert report.partitions_dropped == expired
    assert archived == [(f"app.{TABLE.naming.retired(b.lower)}", 1) for b in old[:3]]
    assert report.archived == [t for t, _ in archived]
    names = [n for n, _ in _partitions(conn)]
    assert all(n not in names for n in expired) and old[3].name in names
    assert _standalone(conn) == []
    (rows,) = conn.execute("SELECT count(*) FROM app.events").fetchone()  # type: ignore[misc]
    assert rows == 2
    assert _held_advisory_locks(conn) == 0


def test_failed_archive_keeps_the_table_and_the_next_run_drops_it(conn: Conn) -> None:
    old = _old_partitions(conn, [-4])
    policy = MaintenancePolicy(premake=0, retention=2 * HOUR)
    failing = command_hook("echo nope >&2; exit 4")
    report = run_sync(conn, maintenance_op(TABLE, policy, archive=failing))
    assert report.partitions_dropped == [] and not report.healthy
    assert any("exited with status 4: nope" in e for e in report.errors), report.errors
    retired = TABLE.naming.retired(old[0].lower)
    assert _standalone(conn) == [retired]
    assert any(p.name == retired and p.state is PartitionState.RETIRED for p in report.partitions)
    seen: list[str] = []
    report = run_sync(conn, maintenance_op(TABLE, policy, archive=seen.append))
    assert report.errors == [] and seen == [f"app.{retired}"]
    assert report.partitions_dropped == [old[0].name] and _standalone(conn) == []


def test_async_archive_hook_is_awaited(conn: Conn, dsn: str) -> None:
    old = _old_partitions(conn, [-6, -5, 0])
    seen: list[str] = []

    async def archive(table: str) -> None:
        await asyncio.sleep(0.01)
        seen.append(table)

    async def go() -> Any:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            policy = MaintenancePolicy(premake=2, retention=HOUR)
            return await run_async(aconn, maintenance_op(TABLE, policy, archive=archive))

    report = asyncio.run(go())
    assert report.healthy, report.errors
    assert seen == [f"app.{TABLE.naming.retired(b.lower)}" for b in old[:2]]
    assert report.partitions_dropped == [b.name for b in old[:2]]
    assert report.partitions_ahead >= 2


def test_sync_driver_runs_a_coroutine_hook(conn: Conn) -> None:
    _old_partitions(conn, [-4])
    seen: list[str] = []

    async def archive(table: str) -> None:
        seen.append(table)

    report = run_sync(
        conn,
        maintenance_op(TABLE, MaintenancePolicy(premake=0, retention=HOUR), archive=archive),
    )
    assert report.errors == [] and len(seen) == 1 and len(report.partitions_dropped) == 1


def test_plain_detach_with_a_default_partition(conn: Conn) -> None:
    """DETACH ... CONCURRENTLY is refused when the parent has a DEFAULT partition: the run
    falls back to a plain DETACH with a lock timeout."""
    conn.execute("CREATE TABLE app.events_default PARTITION OF app.events DEFAULT")
    old = _old_partitions(conn, [-4, 0])
    report = run_sync(conn, maintenance_op(TABLE, MaintenancePolicy(premake=0, retention=HOUR)))
    assert report.errors == [] and report.partitions_dropped == [old[0].name]
    assert "events_default" in [n for n, _ in _partitions(conn)]
    assert all(p.name != "events_default" for p in report.partitions)


def test_inside_a_transaction_the_run_uses_plain_detach(dsn: str, conn: Conn) -> None:
    old = _old_partitions(conn, [-4, 0])
    with psycopg.connect(dsn) as tx_conn:  # not autocommit: the run is inside a transaction
        report = run_sync(
            tx_conn, maintenance_op(TABLE, MaintenancePolicy(premake=1, retention=HOUR))
        )
        tx_conn.commit()
    assert report.errors == [], report.errors
    assert report.partitions_dropped == [old[0].name] and len(report.partitions_created) == 1
    assert _standalone(conn) == [] and _held_advisory_locks(conn) == 0


# ---------------------------------------------------------------- interrupted detach


def _interrupt_detach(dsn: str, admin: Conn, name: str) -> None:
    """Leave ``name`` detach-pending: DETACH CONCURRENTLY waits for an old snapshot and its
    backend is killed while it waits."""
    with psycopg.connect(dsn) as snapshot_holder:
        snapshot_holder.execute("SELECT count(*) FROM app.events")
        detacher = psycopg.connect(dsn, autocommit=True)
        pid = detacher.info.backend_pid
        errors: list[BaseException] = []

        def detach() -> None:
            try:
                detacher.execute(f"ALTER TABLE app.events DETACH PARTITION app.{name} CONCURRENTLY")
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
    assert (name, True) in _partitions(admin)


@pytest.mark.slow
def test_interrupted_detach_is_finished(conn: Conn, dsn: str) -> None:
    old = _old_partitions(conn, [-10, -9])
    _interrupt_detach(dsn, conn, old[0].name)  # (one pending detach per parent at a time)
    dry = run_sync(conn, maintenance_op(TABLE, MaintenancePolicy(premake=0), dry_run=True))
    assert dry.plan is not None and [p.name for p in dry.plan.finalize] == [old[0].name]
    # no retention: the detach is finished and the table kept, detached
    report = run_sync(conn, maintenance_op(TABLE, MaintenancePolicy(premake=0)))
    assert report.errors == [] and report.detaches_finished == [old[0].name]
    assert _partitions(conn)[0] == (old[1].name, False)
    assert _standalone(conn) == [old[0].name]
    assert report.partitions[0].state is PartitionState.DETACHED


def test_interrupted_detach_of_an_expired_partition_is_finished_and_dropped(
    conn: Conn, dsn: str
) -> None:
    old = _old_partitions(conn, [-10, 0])
    _interrupt_detach(dsn, conn, old[0].name)
    report = run_sync(conn, maintenance_op(TABLE, MaintenancePolicy(premake=0, retention=HOUR)))
    assert report.errors == []
    assert report.detaches_finished == [old[0].name] == report.partitions_dropped
    assert _standalone(conn) == []


# ---------------------------------------------------------------- dry run, lock


def test_dry_run_changes_nothing(conn: Conn) -> None:
    _old_partitions(conn, [-5, 0])
    before = (_partitions(conn), _standalone(conn))
    report = run_sync(
        conn,
        maintenance_op(
            TABLE, MaintenancePolicy(premake=4, retention=2 * HOUR), dry_run=True,
            archive=lambda table: pytest.fail("a dry run archives nothing"),
        ),
    )  # fmt: skip
    assert report.dry_run and report.plan is not None
    assert len(report.plan.create) == 4 and len(report.plan.expire) == 1
    assert not report.healthy  # judged by the state before the plan is applied
    assert (_partitions(conn), _standalone(conn)) == before
    assert report.to_json()["plan"]["expire"] == [p.name for p in report.plan.expire]


def test_runs_never_overlap_and_the_lock_is_released_on_failure(conn: Conn, dsn: str) -> None:
    key = lock_key_for(TABLE)
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        report = run_sync(conn, maintenance_op(TABLE, MaintenancePolicy(premake=3)))
        assert report.already_running and report.partitions_created == []
        holder.execute("SELECT pg_advisory_unlock(%s)", (key,))

    class Boom(RunHooks):
        def work(self, plan: MaintenancePlan, log: RunLog) -> Op[None]:
            yield from ()
            raise RuntimeError("the caller's work failed")

    with pytest.raises(RuntimeError, match="caller's work failed"):
        run_sync(conn, maintenance_op(TABLE, MaintenancePolicy(premake=1), hooks=Boom()))
    assert _held_advisory_locks(conn) == 0
    assert len(_partitions(conn)) == 2  # premake ran before the hook


@pytest.mark.slow
def test_a_lost_connection_ends_the_run(conn: Conn, dsn: str) -> None:
    """The connection dies mid-run: the run raises the connection error (not the failure
    to give the lock back), and the lock died with the connection."""
    victim = psycopg.connect(dsn, autocommit=True)

    class Kill(RunHooks):
        def work(self, plan: MaintenancePlan, log: RunLog) -> Op[None]:
            yield from ()
            conn.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))

    with pytest.raises(psycopg.OperationalError):
        policy = MaintenancePolicy(premake=0, retention=HOUR)
        run_sync(victim, maintenance_op(TABLE, policy, hooks=Kill()))
    victim.close()
    _old_partitions(conn, [-3])  # the next run goes through
    time.sleep(0.2)
    report = run_sync(conn, maintenance_op(TABLE, MaintenancePolicy(premake=0, retention=HOUR)))
    assert not report.already_running and report.errors == []


def test_table_config_is_validated() -> None:
    with pytest.raises(ValueError):
        RangeTable("app", "events", "at", interval=timedelta(0))
    with pytest.raises(ValueError):
        RangeTable("app", "x" * 50, "at", interval=HOUR)
    with pytest.raises(ValueError):
        RangeTable("app", "events", "at", like_options="INCLUDING ALL; DROP TABLE x")
    odd = RangeTable("My Schema", 'ev"ents', "at", interval=HOUR)
    assert odd.naming.partition(bounds_for(odd.origin, HOUR, odd.origin).lower) == (
        'ev"ents_p20010101t000000'
    )


# ---------------------------------------------------------------- no shardstore


def test_partition_manager_never_imports_shardstore() -> None:
    code = (
        "import sys\n"
        "import partition_manager, partition_manager.runner, partition_manager.plan\n"
        "import partition_manager.premake, partition_manager.table, partition_manager.archive\n"
        "import partition_manager.driver, partition_manager.steps\n"
        "bad = [m for m in sys.modules if m.startswith('shardstore')]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
