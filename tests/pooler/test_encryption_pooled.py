"""Encryption at rest behind a real PgBouncer in transaction mode: sealed appends (their
head read, append and check are one transaction, which the pooler keeps on one server
connection) racing from several threads on one session, every read opening what it
returns, checkpoints and facts, the asyncio store, and purge_subject(shred=True)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import EncryptionRequired, KeyShredded

MARKER = "okapi-pooled-2024"
THREADS = 4
APPENDS = 6


@pytest.mark.slow
def test_encryption_behind_the_pooler(pooled_dsn: str, tmp_path: Path) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    store = shardstore.connect(pooled_dsn, encryption=keys, pool_min_size=1, pool_max_size=THREADS)
    try:
        assert store.connector.pooler is True
        sid = store.create_session(tenant_id="acme", subject_id="pat")
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                for i in range(APPENDS):
                    store.append_turn(sid, {"role": "user", "content": f"{MARKER} {n}.{i}"})
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        turns = list(store.history(sid))
        assert [t.turn_seq for t in turns] == list(range(THREADS * APPENDS))
        assert sorted(t.message["content"] for t in turns) == sorted(
            f"{MARKER} {n}.{i}" for n in range(THREADS) for i in range(APPENDS)
        )
        store.checkpoint(sid, {"plan": MARKER})
        assert store.restore(sid, n=2).checkpoint.state == {"plan": MARKER}
        store.remember("acme", "pat", "k", MARKER, source=(sid, 0))
        assert store.recall("acme", "pat")[0].value == MARKER

        async def through_asyncio() -> None:
            astore = await shardstore.connect_async(pooled_dsn, encryption=keys)
            plain = await shardstore.connect_async(pooled_dsn)
            try:
                await astore.append_turn(sid, {"role": "user", "content": f"{MARKER} async"})
                assert (await astore.tail(sid, n=1))[0].message["content"] == f"{MARKER} async"
                with pytest.raises(EncryptionRequired):
                    await plain.tail(sid)
            finally:
                await astore.close()
                await plain.close()

        asyncio.run(through_asyncio())
        key = store.ctx.sealer.keys.key_for(  # type: ignore[union-attr]
            shardstore.encryption.Scope("subject", "acme", "pat"), create=False
        )
        assert key is not None
        report = store.purge_subject("acme", "pat", shred=True)
        assert report.shredded_keys == (key.kid,)
        with pytest.raises(KeyShredded):
            keys.key(key.kid)
    finally:
        store.close()
