"""Search with encryption on behind a real PgBouncer in transaction mode: the client's text
pass (each batch one transaction: the session's hold, the pending turns, their lexemes and
the keyed windows), keyed text ranking, the embedding worker opening sealed turns, hybrid
search, context(recall=), the asyncio store, and nothing found after a shred."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from tests.embedders import HashEmbedder

MARKER = "okapi-pooled-search"


@pytest.mark.slow
def test_encrypted_search_behind_the_pooler(pooled_dsn: str, tmp_path: Path) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    model = HashEmbedder()
    store = shardstore.connect(
        pooled_dsn, encryption=keys, embedding_model=model, chunk_tokens=40, pool_max_size=2
    )
    try:
        assert store.connector.pooler is True
        sid = store.create_session(tenant_id="acme", subject_id="pat")
        other = store.create_session(tenant_id="acme", subject_id="quinn")
        filler = [{"role": "user", "content": f"weather report number {i}"} for i in range(12)]
        filler[4] = {"role": "user", "content": f"the locker code is {MARKER} 7741"}
        store.append_turns(sid, filler)
        store.append_turn(other, {"role": "user", "content": "the locker is painted blue"})
        store.drain_folds()
        for mode in ("text", "hybrid"):
            hits = store.search("locker code 7741", session_id=sid, mode=mode)
            assert hits[0].turns[-1].message == filler[4], mode
        assert store.embed() > 0
        hits = store.search("locker code 7741", tenant_id="acme", mode="vector")
        assert hits[0].session_id == sid and filler[4] in [t.message for t in hits[0].turns]
        ctx = store.context(sid, max_tokens=60, recent_min_tokens=13, recall="locker code")
        assert any(MARKER in str(m.get("content")) for m in ctx.messages), ctx.parts

        async def through_asyncio() -> None:
            astore = await shardstore.connect_async(
                pooled_dsn, encryption=keys, embedding_model=model
            )
            try:
                found = await astore.search("locker", tenant_id="acme", mode="text")
                assert sorted(h.session_id for h in found) == sorted([sid, other])
            finally:
                await astore.close()

        asyncio.run(through_asyncio())
        store.purge_subject("acme", "pat", shred=True)
        for mode in ("text", "vector", "hybrid"):
            found = store.search("locker code 7741", tenant_id="acme", mode=mode)
            assert [h.session_id for h in found] == [other], mode
    finally:
        store.close()
