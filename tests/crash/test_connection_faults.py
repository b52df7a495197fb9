"""Connection faults: the server crashes or restarts under a live store (its pool). Calls
then fail with DatabaseUnavailable (retryable=True) or succeed once psycopg_pool has
replaced the broken connections; the retry policy (tests.faults.with_retry: repeat with
the same idempotency keys) stores every turn exactly once. Also: no server-side prepared
statements with prepare_threshold=None (transaction-pooler mode)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import shardstore
from tests.faults import CrashableServer, with_retry

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

RESTARTS_PER_CASE = 3


@pytest.fixture(scope="module")
def server() -> Iterator[CrashableServer]:
    srv = CrashableServer()
    yield srv
    srv.close()


def _msg(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"turn {i}"}


def _retry_append(store: shardstore.Store, sid: Any, i: int, key: str) -> None:
    def call() -> shardstore.AppendResult:
        return store.append_turn(sid, _msg(i), idempotency_key=key)

    with_retry(call)


def _keys(store: shardstore.Store, sid: Any) -> list[str | None]:
    return [t.idempotency_key for t in store.history(sid)]


@pytest.mark.slow
@pytest.mark.parametrize("prepare_threshold", [None, 0, 5])
@pytest.mark.parametrize("how", ["crash", "clean"])
def test_restart_under_live_pool(
    server: CrashableServer, prepare_threshold: int | None, how: str
) -> None:
    dsn = server.create_database()
    store = shardstore.connect(dsn, prepare_threshold=prepare_threshold, pool_max_size=4)
    try:
        sid = store.create_session("faults")
        expected: list[str | None] = []
        n = 0
        outcomes: dict[str, int] = {"ok": 0, "DatabaseUnavailable": 0}
        for _ in range(RESTARTS_PER_CASE):
            for _ in range(10):  # warm every pooled connection (and its prepared statements)
                store.append_turn(sid, _msg(n), idempotency_key=f"k{n}")
                expected.append(f"k{n}")
                n += 1
            if how == "crash":
                server.crash()
            else:
                with server.lock:
                    server.stop_clean()
                    server.start()
            # the first calls: each succeeds or raises the documented retryable error
            for _ in range(6):
                key = f"k{n}"
                try:
                    store.append_turn(sid, _msg(n), idempotency_key=key)
                    outcomes["ok"] += 1
                except shardstore.DatabaseUnavailable as exc:
                    assert exc.retryable
                    assert "database unavailable" in str(exc) or "connection" in str(exc)
                    outcomes["DatabaseUnavailable"] += 1
                    # the policy: the same call again, same key
                    _retry_append(store, sid, n, key)
                expected.append(key)
                n += 1
            with_retry(lambda: store.tail(sid, n=5))
        assert with_retry(lambda: _keys(store, sid))[0] == expected  # each exactly once, in order
        assert outcomes["ok"] > 0
    finally:
        store.close()


@pytest.mark.slow
def test_retry_across_outage_stores_once(server: CrashableServer) -> None:
    """A batch is retried (same keys) while the server is down for ~1 s and comes back;
    another thread keeps appending. Every turn ends up stored once."""
    dsn = server.create_database()
    store = shardstore.connect(dsn, prepare_threshold=None)
    try:
        sid = store.create_session("faults")
        store.append_turns(sid, [_msg(i) for i in range(3)], [f"a{i}" for i in range(3)])
        with server.lock:
            server.kill()
            threading.Timer(1.0, server.start).start()
            started = time.monotonic()
            msgs = [_msg(i) for i in range(3, 40)]
            keys: list[str | None] = [f"a{i}" for i in range(3, 40)]
            results, _ = with_retry(lambda: store.append_turns(sid, msgs, keys))
        assert time.monotonic() - started < 60
        # a repeat of the acknowledged batch (a client that lost the answer) is a duplicate
        again = store.append_turns(sid, msgs, keys)
        assert all(r.duplicate for r in again)
        assert [r.turn_seq for r in again] == [r.turn_seq for r in results]
        assert _keys(store, sid) == [f"a{i}" for i in range(40)]
    finally:
        store.close()


def _prepared_count(store: shardstore.Store) -> int:
    pool = store.connector._pool
    assert pool is not None
    with pool.connection() as conn:
        row = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("prepare_threshold", [None, 0])
def test_prepared_statements_behind_a_pooler(
    server: CrashableServer, prepare_threshold: int | None
) -> None:
    """prepare_threshold=None: no server-side prepared statement is ever created (safe
    behind a transaction-mode pooler), also after a restart; 0 prepares (the check can see
    them)."""
    dsn = server.create_database()
    store = shardstore.connect(
        dsn, prepare_threshold=prepare_threshold, pool_min_size=1, pool_max_size=1
    )
    try:
        for round_ in range(2):
            sid = with_retry(lambda: store.create_session("pooler"))[0]
            for i in range(12):
                _retry_append(store, sid, i, f"p{i}")
                store.append_turns(sid, [_msg(i), _msg(i)])
                store.tail(sid, n=5)
                list(store.history(sid))
                store.chunks(sid)
            store.flush(sid)
            store.stats()
            store.maintain()
            store.purge_session(sid)
            count = _prepared_count(store)
            if prepare_threshold is None:
                assert count == 0
            else:
                assert count > 0
            if round_ == 0:
                server.crash()
                store.stats()  # the stale pooled connection is replaced on checkout

    finally:
        store.close()


def test_call_while_server_down_fails_within_connect_timeout(server: CrashableServer) -> None:
    """Measured: while the server is down every call blocks 30 s (psycopg_pool's getconn
    default) before DatabaseUnavailable, whatever connect_timeout says. Checked on the pool's
    settings so that the suite does not wait 30 s."""
    dsn = server.create_database()
    store = shardstore.connect(dsn, connect_timeout=2, prepare_threshold=None)
    try:
        pool = store.connector._pool
        assert pool is not None
        assert pool.timeout <= 2
    finally:
        store.close()


def test_first_call_after_restart_succeeds(server: CrashableServer) -> None:
    dsn = server.create_database()
    store = shardstore.connect(dsn, prepare_threshold=None, pool_min_size=2, pool_max_size=2)
    try:
        sid = store.create_session("restart")
        store.append_turn(sid, _msg(0))
        server.crash()
        time.sleep(0.2)
        store.append_turn(sid, _msg(1), idempotency_key="after")  # must not raise
    finally:
        store.close()


def test_library_retry_helper(server: CrashableServer) -> None:
    """Proposed: ``shardstore.retry.call(fn, *args, deadline=30.0, **kwargs)`` repeats
    ``fn`` while it raises a retryable ShardstoreError (exponential backoff 10 ms .. 500 ms,
    then the last error); ``Store.append_turn(s)`` with ``retry=True`` refuses turns without
    idempotency keys (InvalidInput) since only keyed appends are safe to repeat."""
    import importlib

    retry: Any = importlib.import_module("shardstore.retry")
    dsn = server.create_database()
    store = shardstore.connect(dsn, prepare_threshold=None)
    try:
        sid = store.create_session("retry")
        server.crash()
        r = retry.call(store.append_turn, sid, _msg(0), idempotency_key="r0", deadline=30.0)
        assert r.turn_seq == 0
        with pytest.raises(shardstore.InvalidInput):
            store.append_turn(sid, _msg(1), retry=True)  # type: ignore[call-arg]
    finally:
        store.close()


def test_translated_errors_are_retryable() -> None:
    """The driver's connection errors become DatabaseUnavailable(retryable)."""
    from shardstore.core.executor import translate

    for exc in (
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.errors.AdminShutdown("terminating connection due to unexpected postmaster exit"),
        psycopg.errors.CrashShutdown(
            "terminating connection because of crash of another server process"
        ),
        psycopg.errors.CannotConnectNow("the database system is in recovery mode"),
        psycopg.InterfaceError("the connection is closed"),
    ):
        err = translate(exc)
        assert isinstance(err, shardstore.DatabaseUnavailable), (exc, err)
        assert err.retryable
