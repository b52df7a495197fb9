"""Vectors of encrypted turns switched off and on again behind a real PgBouncer in
transaction mode: the switch (one transaction), the embedding worker skipping sealed turns
and moving their session's watermark, hybrid search ranking by keyed text, the asyncio store,
and the skipped turns embedded once it is on again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from tests.embedders import HashEmbedder
from tests.encryption.conftest import raw

CODE = "okapi-sv-5521"


@pytest.mark.slow
def test_sealed_vectors_behind_the_pooler(pooled_dsn: str, dsn: str, tmp_path: Path) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    model = HashEmbedder()
    store = shardstore.connect(
        pooled_dsn, encryption=keys, embedding_model=model, chunk_tokens=40, pool_max_size=2
    )
    count = "SELECT count(*) FROM shardstore.chunk_vectors WHERE session_id = %s"
    try:
        assert store.connector.pooler is True
        sid = store.create_session(tenant_id="acme", subject_id="pat")
        turns = [{"role": "user", "content": f"weather report number {i}"} for i in range(10)]
        turns[3] = {"role": "user", "content": f"the locker code is {CODE}"}
        store.append_turns(sid, turns)
        store.drain_folds()
        store.embed()
        assert raw(dsn, count, (sid,))[0][0] > 0
        assert store.configure_sealed_vectors(False) > 0
        assert raw(dsn, count, (sid,))[0][0] == 0
        store.append_turns(sid, turns[:4])
        store.embed()
        assert raw(dsn, count, (sid,))[0][0] == 0
        assert store.embed() == 0  # nothing left queued for the sealed session
        hits = store.search(f"locker code {CODE}", session_id=sid, mode="hybrid")
        assert hits and CODE in hits[0].turns[-1].message["content"]

        async def through_asyncio() -> None:
            astore = await shardstore.connect_async(
                pooled_dsn, encryption=keys, embedding_model=model
            )
            try:
                assert await astore.sealed_vectors() is False
                found = await astore.search(CODE, tenant_id="acme", mode="vector")
                assert found and found[0].session_id == sid
                assert await astore.configure_sealed_vectors(True) > 0
            finally:
                await astore.close()

        asyncio.run(through_asyncio())
        store.embed()
        assert raw(dsn, count, (sid,))[0][0] > 0
    finally:
        store.configure_sealed_vectors(True)
        store.close()
