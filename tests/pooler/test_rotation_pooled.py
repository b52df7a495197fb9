"""Key rotation and the new shreds behind a real PgBouncer in transaction mode: a data-key
rotation (its batches, and the final check that locks the session rows and searches again
in one transaction) while threads append to the subject's sessions, the asyncio store's
rotation, a KEK rotation under a live pooled store, and purge_session / purge_tenant with
shred=True."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.errors import KeyShredded

MARKER = "dugong-pooled-1732"
THREADS = 3


@pytest.mark.slow
def test_rotation_and_shreds_behind_the_pooler(pooled_dsn: str, tmp_path: Path) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    store = shardstore.connect(
        pooled_dsn, encryption=keys, chunk_tokens=60, pool_min_size=1, pool_max_size=THREADS + 1
    )
    try:
        assert store.connector.pooler is True
        sids = [store.create_session(tenant_id="pool-t", subject_id="quin") for _ in range(THREADS)]
        expected: dict[Any, list[dict[str, str]]] = {}
        for sid in sids:
            expected[sid] = [
                {"role": "user", "content": f"{MARKER} {i} " + "w " * 12} for i in range(6)
            ]
            store.append_turns(sid, expected[sid])
        started, done = threading.Barrier(THREADS + 1), threading.Event()
        errors: list[BaseException] = []

        def writer(sid: Any) -> None:
            try:
                started.wait()
                i = 0
                while not done.is_set() or i < 3:
                    message = {"role": "assistant", "content": f"during {i}"}
                    store.append_turn(sid, message)
                    expected[sid].append(message)
                    i += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(sid,)) for sid in sids]
        for t in threads:
            t.start()
        try:
            started.wait()
            report = store.rotate_data_key(tenant_id="pool-t", subject_id="quin", batch_size=2)
        finally:
            done.set()
            for t in threads:
                t.join()
        assert not errors
        assert len(report.shredded_keys) == 1 and report.sessions == THREADS
        for sid in sids:
            assert [t.message for t in store.history(sid)] == expected[sid]
        with pytest.raises(KeyShredded):
            keys.key(report.shredded_keys[0])

        async def through_asyncio() -> None:
            astore = await shardstore.connect_async(pooled_dsn, encryption=keys)
            try:
                again = await astore.rotate_data_key(tenant_id="pool-t", subject_id="quin")
                assert again.resealed["turns"] == sum(len(v) for v in expected.values())
            finally:
                await astore.close()

        asyncio.run(through_asyncio())

        # the KEK under a live store: it goes on reading and writing
        assert keys.rotate_kek(tmp_path / "new.kek").rewrapped == 1
        store.append_turn(sids[0], {"role": "user", "content": "after the kek"})
        assert store.tail(sids[0], n=1)[0].message["content"] == "after the kek"

        loose = store.create_session(tenant_id="pool-t")
        store.append_turn(loose, {"role": "user", "content": MARKER})
        (loose_kid,) = store.purge_session(loose, shred=True).shredded_keys
        with pytest.raises(KeyShredded):
            keys.key(loose_kid)
        current = keys.key_for(Scope("subject", "pool-t", "quin"), create=False)
        assert current is not None
        report_tenant = store.purge_tenant("pool-t", shred=True)
        assert report_tenant.shredded_keys == (current.kid,)
        assert keys.scopes("pool-t") == []
    finally:
        store.close()
