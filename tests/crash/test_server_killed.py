"""Server crashes: a writer process streams appends while the Postgres server is SIGKILLed
at random moments, during folds and during partition creation, then restarted (crash
recovery). After every crash the raw tables are checked against the writer's fsync'd log
of acknowledged appends (tests/faults.py: check_database). Counts are reported in
docs/reliability.md."""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstore
from tests.faults import (
    CrashableServer,
    Expected,
    WriterConfig,
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

RANDOM_CRASHES = 20
FOLD_CRASHES = 6
PARTITION_CRASHES = 6


@pytest.fixture(scope="module")
def server() -> Iterator[CrashableServer]:
    srv = CrashableServer()
    yield srv
    srv.close()


def _sessions(dsn: str, count: int, **settings: Any) -> list[str]:
    with shardstore.connect(dsn, **settings) as store:
        return [str(store.create_session("crash", f"user:{i}")) for i in range(count)]


def _finish(
    server: CrashableServer,
    dsn: str,
    cfg: WriterConfig,
    proc: Any,
    budget: int,
    allow_strays: bool = False,
) -> None:
    """Stop the writer, then: every begun batch acknowledged exactly once, the API agrees
    with the rows, and after flush() no sealed chunk is left in the buffer."""
    assert cfg.stop_file is not None
    Path(cfg.stop_file).touch()
    assert proc.wait(60) == 0, Path(cfg.log + ".err").read_text()[-3000:]
    check_database(
        dsn, Expected({cfg.prefix: cfg.log}, budget), final=True, allow_strays=allow_strays
    )
    with shardstore.connect(dsn, **cfg.settings) as store:
        check_api(store, dsn, cfg.sessions)
        for sid in cfg.sessions:
            store.flush(sid)
    rep = check_database(
        dsn, Expected({cfg.prefix: cfg.log}, budget), final=True, allow_strays=allow_strays
    )
    assert rep.buffered_turns == 0 and rep.sealed_buffered_chunks == 0


@pytest.mark.slow
def test_random_server_crashes(server: CrashableServer, tmp_path: Path) -> None:
    """SIGKILL the server (every process at once, or one backend so that the postmaster
    resets everything) at random moments while 4 sessions get batches of 1-8 turns."""
    dsn = server.create_database()
    settings: dict[str, Any] = {"chunk_tokens": 400}
    budget = shardstore.Settings.from_kwargs(settings).budget_tokens
    cfg = WriterConfig(
        dsn=dsn,
        sessions=_sessions(dsn, 4, **settings),
        log=str(tmp_path / "writer.log"),
        stop_file=str(tmp_path / "stop"),
        settings=settings,
    )
    rng = random.Random(6)
    proc = spawn_writer(cfg)
    try:
        wait_for_acks(cfg.log, 3)
        for i in range(RANDOM_CRASHES):
            acked = len(read_log(cfg.log).acked)
            wait_for_acks(cfg.log, acked + 1, timeout=20)  # some writes since the last crash
            time.sleep(rng.uniform(0.0, 0.15))
            if i % 3 == 2:
                server.kill_backend()
            else:
                server.crash()
            check_database(dsn, Expected({"w": cfg.log}, budget))
        log = read_log(cfg.log)
        assert log.retries > 0  # the writer did see the crashes
    finally:
        if proc.poll() is None:
            _finish(server, dsn, cfg, proc, budget)


@pytest.mark.slow
def test_server_crash_during_fold(server: CrashableServer, tmp_path: Path) -> None:
    """Chosen point: a fold has moved a sealed chunk's buffer rows into agent_history and
    waits (uncommitted) for its chunk_map insert; the server is killed there. The chunk must
    still be whole in the buffer after recovery and be folded by a later fold."""
    dsn = server.create_database()
    settings: dict[str, Any] = {"chunk_tokens": 16}  # every turn is its own chunk: all seal
    budget = shardstore.Settings.from_kwargs(settings).budget_tokens
    cfg = WriterConfig(
        dsn=dsn,
        sessions=_sessions(dsn, 2, **settings),
        log=str(tmp_path / "writer.log"),
        stop_file=str(tmp_path / "stop"),
        settings=settings,
        # one turn per call, so sealed chunks wait in the buffer for fold_sealed_v2 (a
        # batch writes the chunks it starts and seals straight to agent_history)
        max_batch=1,
    )
    proc = spawn_writer(cfg)
    try:
        wait_for_acks(cfg.log, 3)
        for _ in range(FOLD_CRASHES):
            wait_for_acks(cfg.log, len(read_log(cfg.log).acked) + 2, timeout=20)
            with holding(dsn, "LOCK TABLE shardstore.chunk_map IN EXCLUSIVE MODE"):
                wait_for_backend(dsn, "fold_sealed_v2", waiting=True)
                proc.send_signal(signal.SIGSTOP)  # no new fold before the check
                try:
                    server.crash()
                    rep = check_database(dsn, Expected({"w": cfg.log}, budget))
                finally:
                    proc.send_signal(signal.SIGCONT)
            assert rep.sealed_buffered_chunks >= 1  # the interrupted fold left its chunk
    finally:
        if proc.poll() is None:
            _finish(server, dsn, cfg, proc, budget)


@pytest.mark.slow
def test_server_crash_during_partition_creation(server: CrashableServer, tmp_path: Path) -> None:
    """Chosen points with 1-second partitions and premake=0: (a) a fold has created the
    new partition's table and waits to ATTACH it; (b) maintenance has created standalone
    partitions (committed) and waits to ATTACH them. The server is killed there; after
    recovery later folds create or attach those partitions and maintenance is healthy."""
    dsn = server.create_database()
    settings: dict[str, Any] = {"chunk_tokens": 200, "partition_interval": "1s", "premake": 0}
    budget = shardstore.Settings.from_kwargs(dict(settings)).budget_tokens
    cfg = WriterConfig(
        dsn=dsn,
        sessions=_sessions(dsn, 3, **settings),
        log=str(tmp_path / "writer.log"),
        stop_file=str(tmp_path / "stop"),
        settings={"chunk_tokens": 200, "premake": 0},
        max_batch=1,  # as above: partitions are then made by folds (and maintenance)
        sleep=0.002,
    )
    proc = spawn_writer(cfg)
    fold_waits = maint_waits = 0
    try:
        wait_for_acks(cfg.log, 3)
        for i in range(PARTITION_CRASHES):
            wait_for_acks(cfg.log, len(read_log(cfg.log).acked) + 2, timeout=20)
            # connected before the lock is taken (connect premakes the current partition)
            maint_store = shardstore.connect(dsn, premake=0)
            with holding(dsn, "LOCK TABLE shardstore.agent_history IN SHARE UPDATE EXCLUSIVE MODE"):
                if i % 2 == 0:
                    # (a) the next fold into a new second's partition blocks at ATTACH
                    wait_for_backend(dsn, "fold_sealed_v2", waiting=True)
                    fold_waits += 1
                else:
                    # (b) maintenance premakes 3 partitions ahead; its ATTACH blocks
                    t = threading.Thread(target=_maintain, args=(maint_store,), daemon=True)
                    t.start()
                    wait_for_backend(dsn, "maint_attach_partition_v1", waiting=True)
                    maint_waits += 1
                server.crash()
                if i % 2 == 1:
                    t.join(60)
                    assert not t.is_alive()
            maint_store.close()
            check_database(dsn, Expected({"w": cfg.log}, budget), allow_strays=True)
        # folds of the next seconds attach the stray standalone tables maintenance left
        time.sleep(1.5)
        with shardstore.connect(dsn, premake=0) as store:
            report = store.maintain(premake=2)
            assert report.healthy, report.errors
    finally:
        if proc.poll() is None:
            # empty standalone tables of seconds that have passed stay (maintenance leaves
            # strays alone, docs/maintenance.md); ones with rows would fail the check
            _finish(server, dsn, cfg, proc, budget, allow_strays=True)
    assert fold_waits and maint_waits


def _maintain(store: shardstore.Store) -> None:
    # killed with the server: DatabaseUnavailable is expected, and the run may also finish
    with contextlib.suppress(shardstore.ShardstoreError):
        store.maintain(premake=3, lock_timeout="30s")
