"""Purges racing with folds and appends, and purges resumed after a crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import shardstore
from tests.purge_support import append_unfolded, converse, hits, message, snapshot, table_rows


def _sealed_unfolded(store: shardstore.Store, marker: str) -> uuid.UUID:
    """A session whose sealed chunks all wait in the buffer for their fold."""
    sid = store.create_session("acme", "user:1")
    i = 0
    sealed = 0
    while sealed < 2:
        sealed += append_unfolded(store, sid, message(marker, i), f"{marker}-{i}")
        i += 1
    return sid


def _session_rows(dsn: str, sid: uuid.UUID) -> list[tuple[str, str]]:
    return [(t, r) for t, r in hits(table_rows(dsn), str(sid)) if t != "shardstore.sessions"]


def _blocked(thread: threading.Thread) -> bool:
    thread.join(0.5)
    return thread.is_alive()


@pytest.mark.slow
def test_purge_waits_for_a_fold_in_flight_and_removes_its_chunk(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=200)
    sid = _sealed_unfolded(store, "INFLIGHT")
    results: list[Any] = []
    with psycopg.connect(dsn) as folder:  # a fold that moved the chunk but has not committed
        (moved,) = folder.execute("SELECT shardstore.fold_sealed(%s, 0, 0)", (sid,)).fetchone()  # type: ignore[misc]
        assert moved > 0
        purge = threading.Thread(target=lambda: results.append(store.purge_session(sid)))
        purge.start()
        assert _blocked(purge), "the purge waits for the fold's buffer rows"
        folder.commit()
    purge.join()
    report = results[0]
    assert report.tables["shardstore.agent_history"].rows > 0  # the folded chunks went too
    assert _session_rows(dsn, sid) == []
    assert hits(table_rows(dsn), "INFLIGHT") == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["session", "range"])
def test_a_fold_after_a_purge_moves_nothing(
    make_store: Callable[..., shardstore.Store], dsn: str, kind: str
) -> None:
    store = make_store(chunk_tokens=200)
    sid = _sealed_unfolded(store, "LATEFOLD")
    buffered = [t.turn_seq for t in store.history(sid)]
    cut = buffered[len(buffered) // 2]
    moved: list[int] = []
    with psycopg.connect(dsn) as purger:
        if kind == "session":
            purger.execute("SELECT shardstore.purge_session_data(%s, false)", (sid,))
        else:
            purger.execute(
                "SELECT shardstore.purge_range_data(%s, %s, NULL, false, NULL, true)", (sid, cut)
            )

        def fold() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute("SELECT shardstore.fold_sealed(%s, 0, 0)", (sid,)).fetchone()
                moved.append(row[0])  # type: ignore[index]

        folder = threading.Thread(target=fold)
        folder.start()
        assert _blocked(folder), "the fold waits for the purge's buffer rows"
        purger.commit()
    folder.join()
    if kind == "session":
        assert moved == [0]
        assert _session_rows(dsn, sid) == []
    else:
        assert [t.turn_seq for t in store.history(sid)] == [s for s in buffered if s >= cut]
        rows = table_rows(dsn)
        for seq in buffered:
            if seq % 3 != 2:
                assert bool(hits(rows, f"for the {seq}th time")) == (seq >= cut)


@pytest.mark.slow
def test_purge_racing_appends_to_the_same_session(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=200, pool_max_size=8)
    sid = store.create_session("acme", "user:1")
    converse(store, sid, "RACE", 10)
    outcomes: dict[int, list[Any]] = {w: [] for w in range(4)}
    go = threading.Barrier(5)

    def writer(w: int) -> None:
        go.wait()
        for i in range(10_000):
            try:
                store.append_turn(sid, message("RACE", i), f"w{w}-{i}")
            except shardstore.SessionPurged as exc:
                outcomes[w].append(exc)
                return
            outcomes[w].append(i)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    go.wait()
    time.sleep(0.3)
    report = store.purge_session(sid)
    for t in threads:
        t.join()
    store.drain_folds()
    assert all(isinstance(o[-1], shardstore.SessionPurged) for o in outcomes.values())
    assert report.tombstoned == 1
    assert _session_rows(dsn, sid) == []
    assert hits(table_rows(dsn), "RACE") == []


@pytest.mark.slow
def test_purge_subject_racing_appends_of_other_sessions(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=200, pool_max_size=10)
    victims = [store.create_session("acme", "user:victim") for _ in range(6)]
    for sid in victims:
        converse(store, sid, "VICTIM", 12)
    others = [store.create_session("acme", f"user:{w}") for w in range(4)]
    acked: dict[int, int] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            i = 0
            while not stop.is_set() or i < 30:
                store.append_turn(others[w], message(f"OTHER{w}", i), f"k{i}")
                i += 1
            acked[w] = i
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    report = store.purge_subject("acme", "user:victim", batch_size=2)
    stop.set()
    for t in threads:
        t.join()
    store.drain_folds()
    assert errors == []
    assert set(report.session_ids) == set(victims) and report.batches >= 3
    assert hits(table_rows(dsn), "VICTIM") == []
    for w, sid in enumerate(others):
        turns = list(store.history(sid))
        assert [t.turn_seq for t in turns] == list(range(acked[w]))
        assert [t.message for t in turns] == [message(f"OTHER{w}", i) for i in range(acked[w])]


class Crash(Exception):
    pass


def _state(store: shardstore.Store, dsn: str, sids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """'purged' (nothing left but the tombstone) or 'intact' per session; fails on anything
    in between."""
    rows = table_rows(dsn)
    out = {}
    for sid in sids:
        left = [t for t, _ in hits(rows, str(sid)) if t != "shardstore.sessions"]
        if store.session(sid).purged:
            assert left == [], f"half-purged session {sid}: {left}"
            out[sid] = "purged"
        else:
            out[sid] = "intact"
    return out


@pytest.mark.slow
def test_a_crashed_purge_resumes_without_half_purged_sessions(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=200)
    sids = [store.create_session("acme", "user:crash") for _ in range(5)]
    for sid in sids:
        converse(store, sid, "CRASH", 9)
    store.drain_folds()
    histories = {sid: snapshot(store, sid) for sid in sids}
    seen: list[tuple[int, int]] = []

    def crash_after_first_batch(done: int, total: int) -> None:
        seen.append((done, total))
        raise Crash("killed between batches")

    with pytest.raises(Crash):
        store.purge_subject("acme", "user:crash", batch_size=2, progress=crash_after_first_batch)
    assert seen == [(2, 5)]
    state = _state(store, dsn, sids)
    assert sorted(state.values()) == ["intact"] * 3 + ["purged"] * 2
    for sid, what in state.items():
        if what == "intact":
            assert snapshot(store, sid) == histories[sid]

    rest = store.purge_subject("acme", "user:crash", batch_size=2)
    assert len(rest.session_ids) == 3 and rest.tombstoned == 3
    assert set(_state(store, dsn, sids).values()) == {"purged"}
    assert hits(table_rows(dsn), "CRASH") == []


def test_a_failing_batch_is_rolled_back_whole(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=200)
    sids = sorted(store.create_session("acme", "user:fail") for _ in range(4))
    for sid in sids:
        converse(store, sid, "FAIL", 9)
    store.drain_folds()
    histories = {sid: snapshot(store, sid) for sid in sids}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE shardstore.test_notes (session_id uuid NOT NULL, note text)")
        conn.execute("INSERT INTO shardstore.test_notes SELECT unnest(%s::uuid[]), 'n'", (sids,))
        conn.execute(
            "INSERT INTO shardstore.purge_targets (table_name) VALUES ('shardstore.test_notes')"
        )
        # the 4th session's notes cannot be deleted: its batch (the 3rd and 4th) fails
        conn.execute(
            f"""CREATE FUNCTION shardstore.test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF OLD.session_id = '{sids[3]}' THEN RAISE EXCEPTION 'disk on fire'; END IF;
                    RETURN OLD;
                END $$"""
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE DELETE ON shardstore.test_notes"
            " FOR EACH ROW EXECUTE FUNCTION shardstore.test_refuse()"
        )
    with pytest.raises(shardstore.DatabaseError, match="disk on fire"):
        store.purge_subject("acme", "user:fail", batch_size=2)
    state = _state(store, dsn, sids)
    assert [state[s] for s in sids] == ["purged", "purged", "intact", "intact"]
    for sid in sids[2:]:
        assert snapshot(store, sid) == histories[sid]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER refuse ON shardstore.test_notes")
    assert set(store.purge_subject("acme", "user:fail").session_ids) == set(sids[2:])
    assert set(_state(store, dsn, sids).values()) == {"purged"}


@pytest.mark.slow
def test_a_killed_process_leaves_whole_sessions_and_a_rerun_finishes(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(chunk_tokens=200)
    sids = [store.create_session("acme", "user:kill") for _ in range(4)]
    for sid in sids:
        converse(store, sid, "KILLED", 9)
    store.drain_folds()
    script = textwrap.dedent(
        """
        import os, sys, shardstore

        def die(done, total):
            if done >= 2:
                os._exit(17)  # no cleanup, no rollback handlers: the process is gone

        store = shardstore.connect(sys.argv[1])
        store.purge_subject("acme", "user:kill", batch_size=1, progress=die)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, dsn], capture_output=True, timeout=120)
    assert proc.returncode == 17, proc.stderr.decode()
    state = _state(store, dsn, sids)
    assert sorted(state.values()) == ["intact", "intact", "purged", "purged"]
    store.purge_subject("acme", "user:kill")
    assert set(_state(store, dsn, sids).values()) == {"purged"}
    assert hits(table_rows(dsn), "KILLED") == []
