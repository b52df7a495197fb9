"""Client crashes: the writer process is SIGKILLed in the middle of a large append_turns
batch and in the middle of a fold. The batch is whole or absent; a restarted writer that
retries its first unacknowledged batch with the same idempotency keys stores it exactly
once; a sealed chunk whose fold died with the client is folded later by flush() or by
maintenance. The server runs with client_connection_check_interval = 100 ms, so the dead
client's backend is cancelled mid-statement (the harder case) rather than running on."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import shardstore
from tests.faults import (
    CrashableServer,
    Expected,
    WriterConfig,
    backends,
    check_api,
    check_database,
    holding,
    read_log,
    spawn_writer,
    wait_for_acks,
    wait_for_backend,
)

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

BATCH_KILLS = 8
FOLD_KILLS = 4


@pytest.fixture(scope="module")
def server() -> Iterator[CrashableServer]:
    srv = CrashableServer()
    yield srv
    srv.close()


def _wait_gone(dsn: str, like: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while backends(dsn, like):
        assert time.monotonic() < deadline, f"a backend still runs {like!r}"
        time.sleep(0.01)


def _first_unacked(log: str) -> int:
    acked = read_log(log).acked
    return max(acked, default=-1) + 1


@pytest.mark.slow
def test_kill_writer_mid_batch(server: CrashableServer, tmp_path: Path) -> None:
    """Batches of 500-3000 turns; the writer is killed 0-400 ms into one. Then a new writer
    process resumes at the first unacknowledged batch, with the same keys."""
    dsn = server.create_database()
    settings: dict[str, Any] = {"chunk_tokens": 2000}
    budget = shardstore.Settings.from_kwargs(settings).budget_tokens
    with shardstore.connect(dsn, **settings) as store:
        sessions = [str(store.create_session("crash")) for _ in range(2)]
    log = str(tmp_path / "writer.log")
    rng = random.Random(7)
    whole = absent = 0
    for _ in range(BATCH_KILLS):
        start = _first_unacked(log)
        cfg = WriterConfig(
            dsn=dsn,
            sessions=sessions,
            log=log,
            settings=settings,
            min_batch=500,
            max_batch=3000,
            start=start,
            pad=10,
        )
        proc = spawn_writer(cfg)
        wait_for_backend(dsn, "append_v2")  # the first batch (a retry or a new one) is running
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _wait_gone(dsn, "append_v2")  # the server cancelled or finished the statement
        check_database(dsn, Expected({"w": log}, budget, pad=10))
        in_flight = _first_unacked(log)
        with shardstore.connect(dsn, **settings) as store:
            stored = any(
                t.idempotency_key == f"w-{in_flight}-0"
                for sid in sessions
                for t in store.tail(sid, n=3000)
            )
        whole += stored
        absent += not stored
    # a last writer retries the in-flight batch and writes a few more, then stops
    cfg = WriterConfig(
        dsn=dsn,
        sessions=sessions,
        log=log,
        settings=settings,
        min_batch=500,
        max_batch=3000,
        start=_first_unacked(log),
        pad=10,
    )
    cfg.batches = cfg.start + 3
    proc = spawn_writer(cfg)
    assert proc.wait(120) == 0, Path(log + ".err").read_text()[-3000:]
    rep = check_database(dsn, Expected({"w": log}, budget, pad=10), final=True)
    assert rep.acked_turns == rep.turns
    with shardstore.connect(dsn, **settings) as store:
        check_api(store, dsn, sessions)
    print(f"killed mid-batch {BATCH_KILLS}x: in-flight batch whole {whole}, absent {absent}")


@pytest.mark.parametrize("recover", ["flush", "maintain"])
def test_kill_writer_mid_fold(server: CrashableServer, tmp_path: Path, recover: str) -> None:
    """Every append seals (tiny chunks). A fold is held mid-statement (it has moved its
    chunk and waits to write chunk_map) and the writer is killed: the server cancels the
    fold, the sealed chunk stays whole in the buffer, and flush() or maintenance folds it."""
    dsn = server.create_database()
    settings: dict[str, Any] = {"chunk_tokens": 16}
    budget = shardstore.Settings.from_kwargs(settings).budget_tokens
    with shardstore.connect(dsn, **settings) as store:
        sessions = [str(store.create_session("crash")) for _ in range(2)]
    log = str(tmp_path / "writer.log")
    for _ in range(FOLD_KILLS // 2):
        cfg = WriterConfig(
            dsn=dsn,
            sessions=sessions,
            log=log,
            settings=settings,
            # one turn per call: each call seals the chunk the previous turn left open, in
            # the buffer, for fold_sealed_v2 (a batch writes the chunks it starts and seals
            # straight to agent_history since the disk migration: no fold to hold there)
            max_batch=1,
            start=_first_unacked(log),
        )
        proc = spawn_writer(cfg)
        wait_for_acks(log, cfg.start + 3)
        with holding(dsn, "LOCK TABLE shardstore.chunk_map IN EXCLUSIVE MODE"):
            wait_for_backend(dsn, "fold_sealed_v2", waiting=True)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            _wait_gone(dsn, "fold_sealed_v2")  # cancelled: its client is gone
        rep = check_database(dsn, Expected({"w": log}, budget))
        assert rep.sealed_buffered_chunks >= 1
        with shardstore.connect(dsn, **settings) as store:
            check_api(store, dsn, sessions)
            if recover == "flush":
                for sid in sessions:
                    store.flush(sid)
            else:
                report = store.maintain(flush_idle=timedelta(0))
                assert report.healthy, report.errors
        rep = check_database(dsn, Expected({"w": log}, budget))
        assert rep.sealed_buffered_chunks == 0
    # the unacknowledged batch in flight at the last kill is retried by a new writer
    cfg = WriterConfig(
        dsn=dsn,
        sessions=sessions,
        log=log,
        settings=settings,
        max_batch=3,
        start=_first_unacked(log),
    )
    cfg.batches = cfg.start + 2
    proc = spawn_writer(cfg)
    assert proc.wait(60) == 0, Path(log + ".err").read_text()[-3000:]
    check_database(dsn, Expected({"w": log}, budget), final=True)
