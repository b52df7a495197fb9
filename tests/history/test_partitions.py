"""Time partitioning: chunks never span partitions, partitions appear on demand, and
writers racing for the same missing partition all succeed."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import shardstore
from partition_manager import bounds_for, plan_premake

ORIGIN = datetime(2001, 1, 1, tzinfo=UTC)


def _wait_for_next_second(margin: float = 0.15) -> None:
    """Sleep until just after a whole second (so a 1-second partition boundary is near)."""
    now = time.time()
    time.sleep(1 - (now % 1) + margin)


def _seconds_of(store: shardstore.Store, sid: uuid.UUID) -> set[datetime]:
    """The one-second partitions that the session's turns were stored in."""
    second = timedelta(seconds=1)
    return {bounds_for(t.created_at, second, ORIGIN).lower for t in store.history(sid)}


@pytest.mark.slow
def test_chunks_never_span_partitions(make_store: Callable[..., shardstore.Store]) -> None:
    store = make_store(partition_interval=timedelta(seconds=1), premake=1)
    sid = store.create_session("acme")
    deadline = time.monotonic() + 3.5
    sent = 0
    # a few seconds of appends, and on a machine too loaded for that to be enough, more
    # until the stored turns fall in three one-second partitions
    while time.monotonic() < deadline or len(_seconds_of(store, sid)) < 3:
        store.append_turn(sid, {"role": "user", "content": f"turn {sent}"})
        sent += 1
        time.sleep(0.02)
    chunks = store.chunks(sid)
    turns = list(store.history(sid))
    assert [t.turn_seq for t in turns] == list(range(sent))
    assert len(chunks) >= 3, "three seconds of appends must cross at least two boundaries"
    for chunk in chunks:
        members = turns[chunk.first_turn_seq : chunk.first_turn_seq + chunk.turn_count]
        bucket = bounds_for(chunk.chunk_start, timedelta(seconds=1), ORIGIN)
        assert all(bucket.lower <= t.created_at < bucket.upper for t in members)
        assert all(t.chunk_seq == chunk.chunk_seq for t in members)
    stats = store.stats()
    # folded chunks (the newest sealed ones may still be in the buffer: the keep rule)
    folded = {c.partition for c in chunks if c.partition is not None}
    assert folded and folded <= {p.name for p in stats.partitions}
    for chunk in chunks:
        if chunk.partition is not None:
            part = next(p for p in stats.partitions if p.name == chunk.partition)
            assert part.lower <= chunk.chunk_start < part.upper
            assert part.lower <= chunk.chunk_end < part.upper


@pytest.mark.slow
def test_racing_writers_create_one_partition(make_store: Callable[..., shardstore.Store]) -> None:
    store = make_store(partition_interval=timedelta(seconds=1), premake=0, pool_max_size=8)
    writers = 8
    sessions = [store.create_session("acme", f"user:{i}") for i in range(writers)]
    for sid in sessions:  # an open chunk in the current second; the next append must roll
        store.append_turn(sid, {"role": "user", "content": "before"})
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def writer(sid: object) -> None:
        try:
            barrier.wait()
            for i in range(5):
                store.append_turn(sid, {"role": "user", "content": f"after {i}"})  # type: ignore[arg-type]
                store.flush(sid)  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    _wait_for_next_second(margin=0.0)
    threads = [threading.Thread(target=writer, args=(sid,)) for sid in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    names = [p.name for p in store.stats().partitions]
    assert len(names) == len(set(names))
    for sid in sessions:
        turns = list(store.history(sid))
        assert [t.turn_seq for t in turns] == list(range(6))
        assert [t.message["content"] for t in turns] == ["before"] + [
            f"after {i}" for i in range(5)
        ]


def test_ensure_partition_races_directly(
    dsn: str, make_store: Callable[..., shardstore.Store]
) -> None:
    make_store(partition_interval=timedelta(seconds=1), premake=0)
    target = datetime.now(UTC) + timedelta(hours=1)
    barrier = threading.Barrier(6)
    names: list[str] = []
    errors: list[BaseException] = []

    def racer() -> None:
        try:
            with psycopg.connect(dsn) as conn:
                barrier.wait()
                (name,) = conn.execute(
                    "SELECT shardstore.ensure_partition_v1(%s)", (target,)
                ).fetchone()  # type: ignore[misc]
                time.sleep(0.05)  # hold the transaction open a little to widen the race
                conn.commit()
                names.append(name)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=racer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(names)) == 1
    with psycopg.connect(dsn) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'shardstore.agent_history'::regclass AND c.relname = %s",
            (names[0],),
        ).fetchone()  # type: ignore[misc]
        assert count == 1


def test_premake_creates_partitions_ahead(make_store: Callable[..., shardstore.Store]) -> None:
    store = make_store(partition_interval=timedelta(hours=1), premake=3)
    parts = store.stats().partitions
    assert len(parts) == 4
    now = datetime.now(UTC)
    assert parts[0].lower <= now < parts[0].upper
    assert all(a.upper == b.lower for a, b in itertools.pairwise(parts))
    assert store.premake_partitions() == []


def test_partition_interval_cannot_change_once_partitions_exist(
    make_store: Callable[..., shardstore.Store],
) -> None:
    make_store(partition_interval=timedelta(hours=1))
    try:
        make_store(partition_interval=timedelta(hours=2))
    except shardstore.ConfigurationError as exc:
        assert "cannot change" in str(exc)
    else:
        raise AssertionError("a different partition interval must be refused")
    assert make_store().partition_interval == timedelta(hours=1)


def test_python_plan_agrees_with_sql_bins(
    dsn: str, make_store: Callable[..., shardstore.Store]
) -> None:
    make_store(partition_interval=timedelta(days=7), premake=0)
    instants = [
        datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC),
        datetime(1999, 2, 3, tzinfo=UTC),
        datetime(2031, 7, 4, 12, 0, 0, tzinfo=UTC),
    ]
    with psycopg.connect(dsn) as conn:
        for at in instants:
            (lo,) = conn.execute(
                "SELECT date_bin(partition_interval, %s, partition_origin) FROM shardstore.config",
                (at,),
            ).fetchone()  # type: ignore[misc]
            assert bounds_for(at, timedelta(days=7), ORIGIN).lower == lo


def test_plan_premake_is_pure_and_skips_existing() -> None:
    now = datetime(2026, 11, 30, 10, 30, tzinfo=UTC)
    plan = plan_premake(
        now, timedelta(hours=1), ORIGIN, 2, existing=[datetime(2026, 11, 30, 11, tzinfo=UTC)]
    )
    assert [b.lower.hour for b in plan] == [10, 12]
    assert plan[0].name == "agent_history_p20261130t100000"
