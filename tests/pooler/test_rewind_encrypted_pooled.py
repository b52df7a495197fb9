"""Rewind epochs of an encrypted session behind a real PgBouncer in transaction mode: the
epoch a sealed append reads is locked in the append's own transaction (which the pooler
keeps on one server connection), rewinds and appends interleave from two threads, every turn
opens afterwards, and a ciphertext of a removed turn written back is refused."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import psycopg
import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import Conflict, DecryptionFailed

ROUNDS = 6


@pytest.mark.slow
def test_rewinds_and_appends_through_the_pooler(pooled_dsn: str, dsn: str, tmp_path: Path) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    store = shardstore.connect(pooled_dsn, encryption=keys, pool_min_size=1, pool_max_size=2)
    try:
        assert store.connector.pooler is True
        sid = store.create_session(tenant_id="acme", subject_id="rewinder")
        store.append_turns(sid, [{"role": "user", "content": f"seed {i}"} for i in range(4)])
        errors: list[BaseException] = []

        def appender() -> None:
            try:
                for i in range(ROUNDS):
                    store.append_turn(sid, {"role": "user", "content": f"a {i}"})
            except BaseException as exc:  # reported below
                errors.append(exc)

        def rewinder() -> None:
            try:
                for _ in range(ROUNDS):
                    turns = store.session(sid).turn_count
                    store.rewind(sid, max(2, turns - 1))
                    # a read racing the other thread's rewind may be told to read again
                    with contextlib.suppress(Conflict):
                        store.tail(sid, n=3)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=appender), threading.Thread(target=rewinder)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        turns = list(store.history(sid))
        assert [t.turn_seq for t in turns] == list(range(len(turns)))
        assert [t.message["content"] for t in turns[:2]] == ["seed 0", "seed 1"]

        store.append_turn(sid, {"role": "user", "content": "last"})  # turn 2 exists
        with psycopg.connect(dsn, autocommit=True) as admin:
            (old,) = admin.execute(
                "SELECT message::text FROM shardstore.turn_buffer"
                " WHERE session_id = %s AND turn_seq = 2",
                (sid,),
            ).fetchone() or (None,)
            assert old is not None
            store.rewind(sid, 2)
            store.append_turn(sid, {"role": "user", "content": "fresh 2"})
            admin.execute(
                "UPDATE shardstore.turn_buffer SET message = %s::jsonb"
                " WHERE session_id = %s AND turn_seq = 2",
                (old, sid),
            )
        with pytest.raises(DecryptionFailed):
            store.tail(sid, n=5)
    finally:
        store.close()
