"""connect() accepts a DSN, the environment, a pool, or a caller's connection."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import shardstore


def test_dsn_from_environment(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSTORE_DSN", dsn)
    with shardstore.connect() as store:
        assert store.dsn == dsn
        sid = store.create_session("acme")
        store.append_turn(sid, {"role": "user", "content": "via env"})
    with shardstore.connect(dsn) as again:
        assert again.tail(sid)[0].message["content"] == "via env"


def test_existing_pool_is_used_and_left_open(dsn: str) -> None:
    pool = ConnectionPool(dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    try:
        store = shardstore.connect(pool)
        sid = store.create_session("acme")
        store.append_turn(sid, {"role": "user", "content": "pooled"})
        store.close()
        with pool.connection() as conn:  # still usable: the store did not own it
            assert conn.execute("SELECT count(*) FROM shardstore.turn_buffer").fetchone() == (1,)
    finally:
        pool.close()


def test_caller_connection_joins_the_callers_transaction(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:  # not autocommit: statements join conn's transaction
        store = shardstore.connect(conn)
        conn.commit()
        sid = store.create_session("acme")
        conn.commit()
        store.append_turn(sid, {"role": "user", "content": "rolled back"})
        store.append_turns(sid, [{"role": "user", "content": "also rolled back"}])
        conn.rollback()
        assert store.tail(sid) == []
        store.append_turn(sid, {"role": "user", "content": "kept"})
        conn.commit()
        assert [t.message["content"] for t in store.history(sid)] == ["kept"]
        conn.commit()


@pytest.mark.slow
def test_store_is_shared_between_threads(dsn: str) -> None:
    with shardstore.connect(dsn, pool_max_size=4) as store:
        sids = [store.create_session("acme", f"user:{i}") for i in range(4)]
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                for j in range(30):
                    store.append_turn(sids[i], {"role": "user", "content": f"{i}/{j}"})
                    store.tail(sids[i], n=3)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for i, sid in enumerate(sids):
            assert [t.message["content"] for t in store.history(sid)] == [
                f"{i}/{j}" for j in range(30)
            ]


def test_unreachable_database_fails_fast_with_the_reason() -> None:
    with pytest.raises(shardstore.DatabaseUnavailable, match=r"refused|failed"):
        shardstore.connect("postgresql://nobody@127.0.0.1:1/none", connect_timeout=2)


def test_unknown_setting_is_refused(dsn: str) -> None:
    with pytest.raises(shardstore.ConfigurationError, match="chunk_tokns"):
        shardstore.connect(dsn, chunk_tokns=5)
    with pytest.raises(shardstore.ConfigurationError):
        shardstore.connect(dsn, partition_interval="half a day")


@pytest.mark.parametrize("threshold", [None, 5])
def test_prepared_statements_can_be_turned_off(dsn: str, threshold: int | None) -> None:
    # behind a transaction-mode pooler (pgbouncer) prepared statements must be off; one
    # pooled connection, so the statements below run where the appends ran
    with shardstore.connect(
        dsn, prepare_threshold=threshold, pool_max_size=1, background_fold=False
    ) as store:
        sid = store.create_session("acme")
        for i in range(30):  # well past psycopg's default threshold of 5 executions
            store.append_turn(sid, {"role": "user", "content": f"m{i}"}, idempotency_key=f"k{i}")
            store.tail(sid, n=3)
        assert [t.message["content"] for t in store.history(sid)] == [f"m{i}" for i in range(30)]
        with store.connector.connection() as conn:
            row = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    assert row is not None
    if threshold is None:
        assert row[0] == 0
    else:
        assert row[0] > 0  # the control: the check above can fail
