"""Importer crashes: ``shardstore import single-row`` and ``shardstore import jsonl`` run as
subprocesses and are SIGKILLed mid-run (at random times, or just after a random number
of sessions committed), several times; after each kill every session is
whole or absent (one transaction per session), and a re-run completes the import with no
turn duplicated and none missing."""

from __future__ import annotations

import io
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from tests.importers.test_import_single_row import chat, make_source, sid_of

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

ROWS = 6
TURNS = 1500
KILLS = 5


def _run(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "shardstore", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _kill_loop(
    args: list[str], check: Callable[[], int], committed: Callable[[], int], seed: int
) -> int:
    """Start and SIGKILL the import KILLS times; check after each kill; then run it to
    completion. Returns how many kills found a partial import. Each kill comes at a
    random time (1-4 s in) or, sooner, at once (0-20 ms) after a random number of
    sessions more than before were committed: imports are fast enough that a clock alone,
    or a 0.3 s delay after the target (it was, and CI saw all six sessions done by then),
    may only ever kill finished runs."""
    rng = random.Random(seed)
    partial = 0
    for _ in range(KILLS):
        before = committed()
        target = rng.randint(before + 1, ROWS - 1) if before + 1 < ROWS else ROWS
        proc = _run(args)
        deadline = time.monotonic() + rng.uniform(1.0, 4.0)
        # on a loaded machine the process may take longer than the deadline to start: then
        # wait (up to 120 s) for its first session, so that the kill can land mid-run
        hard_deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < hard_deadline:
            now_done = committed()
            if now_done >= target:
                time.sleep(rng.uniform(0.0, 0.02))
                break
            if time.monotonic() >= deadline and now_done > before:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = check()
        partial += 0 < done < ROWS
    proc = _run(args)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    assert check() == ROWS
    return partial


def _committed(conn: psycopg.Connection[Any], sessions: dict[Any, list[Any]]) -> Callable[[], int]:
    """How many of the sessions exist (each is created in its import's transaction), on
    one autocommit connection kept open, so a poll is one round trip (a new connection per
    poll let the import commit several sessions between two polls)."""
    ids = list(sessions)

    def count() -> int:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.sessions WHERE session_id = ANY(%s)", (ids,)
        ).fetchone()
        return int(row[0]) if row else 0

    return count


def _whole_or_absent(store: shardstore.Store, sessions: dict[Any, list[Any]]) -> int:
    done = 0
    for sid, expected in sessions.items():
        try:
            got = [t.message for t in store.history(sid)]
        except shardstore.SessionNotFound:
            continue
        assert got == expected, f"session {sid}: {len(got)} of {len(expected)} turns"
        done += 1
    return done


@pytest.mark.slow
def test_kill_single_row_import(dsn: str, new_database: Callable[[], str]) -> None:
    source = new_database()
    rows = [(f"r{i}", chat(TURNS, f"-{i}")) for i in range(ROWS)]
    make_source(source, rows)
    sessions = {sid_of(name): msgs for name, msgs in rows}
    args = [
        "--dsn",
        dsn,
        "import",
        "single-row",
        "--source-dsn",
        source,
        "--table",
        "agent_sessions",
        "--id-column",
        "session_id",
        "--history-column",
        "conversation_history",
        "--tenant",
        "acme",
        "--batch",
        "50",
        "--quiet",
    ]
    with shardstore.connect(dsn) as store, psycopg.connect(dsn, autocommit=True) as conn:
        partial = _kill_loop(
            args, lambda: _whole_or_absent(store, sessions), _committed(conn, sessions), 11
        )
        assert store.stats().turns == ROWS * TURNS
    assert partial >= 1, "no kill landed between the first and the last session"


@pytest.mark.slow
def test_kill_jsonl_import(dsn: str, new_database: Callable[[], str], tmp_path: Path) -> None:
    sessions: dict[Any, list[Any]] = {}
    with shardstore.connect(new_database()) as a:
        for i in range(ROWS):
            sid = a.create_session("acme")
            msgs = chat(TURNS, f"-{i}")
            keys = [f"k{i}-{n}" for n in range(TURNS)]
            for at in range(0, TURNS, 500):
                a.append_turns(sid, msgs[at : at + 500], keys[at : at + 500])
            sessions[sid] = msgs
        out = io.StringIO()
        a.export_sessions(list(sessions), out=out)
    path = tmp_path / "export.jsonl"
    path.write_text(out.getvalue(), "utf-8")
    args = [
        "--dsn",
        dsn,
        "import",
        "jsonl",
        str(path),
        "--on-existing",
        "skip",
        "--batch",
        "50",
        "--quiet",
    ]
    with shardstore.connect(dsn) as store, psycopg.connect(dsn, autocommit=True) as conn:
        partial = _kill_loop(
            args, lambda: _whole_or_absent(store, sessions), _committed(conn, sessions), 12
        )
        for i, sid in enumerate(sessions):  # keys came along, each once, in order
            got = [t.idempotency_key for t in store.history(sid)]
            assert got == [f"k{i}-{n}" for n in range(TURNS)]
        assert store.stats().turns == ROWS * TURNS
    assert partial >= 1, "no kill landed between the first and the last session"
