"""Sealed artifacts behind a real PgBouncer in transaction mode: puts on the postgres backend
(frames and header in one transaction) and on a directory, the same content put from several
threads at once (one artifact per scope), offloaded strings expanded, a span payload, the
asyncio store, and a store without the key store refused."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import EncryptionRequired

MARKER = b"tapir-pooled-3131"
THREADS = 4


def put_one(
    store: shardstore.Store, turn: str, ids: list[object], errors: list[BaseException]
) -> None:
    """One thread's put of the shared content (a failure is reported by the test)."""
    try:
        ids.append(
            store.put_artifact(
                "acme", MARKER * 100, content_type="t", owner=("turn", turn)
            ).artifact_id
        )
    except BaseException as exc:
        errors.append(exc)


@pytest.mark.slow
def test_sealed_artifacts_behind_the_pooler(pooled_dsn: str, tmp_path: Path) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    for url in ("postgres", (tmp_path / "objects").as_uri()):
        store = shardstore.connect(
            pooled_dsn,
            encryption=keys,
            artifacts=url,
            offload_over=512,
            pool_min_size=1,
            pool_max_size=THREADS,
        )
        try:
            assert store.connector.pooler is True
            sid = store.create_session(tenant_id="acme", subject_id="pat")
            store.append_turn(sid, {"role": "user", "content": "hello"})
            ids: list[object] = []
            errors: list[BaseException] = []

            threads = [
                threading.Thread(target=put_one, args=(store, f"{sid}:0", ids, errors))
                for _ in range(THREADS)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            assert len(set(ids)) == 1
            assert store.get_artifact("acme", ids[0]) == MARKER * 100  # type: ignore[arg-type]
            text = MARKER.decode() + " long " * 200
            store.append_turn(sid, {"role": "user", "content": text})
            assert store.tail(sid, expand=True)[-1].message["content"] == text
            payload = store.attach_payload(
                object(), MARKER, name="p", content_type="t", tenant_id="acme", session_id=sid
            )
            assert store.get_artifact("acme", payload.artifact_id) == MARKER
            with (
                shardstore.connect(pooled_dsn, artifacts=url) as plain,
                pytest.raises(EncryptionRequired),
            ):
                plain.get_artifact("acme", payload.artifact_id)
        finally:
            store.close()

    async def main() -> None:
        store = await shardstore.connect_async(pooled_dsn, encryption=keys)
        try:
            ref = await store.put_artifact("acme", MARKER + b" async", content_type="t")
            assert await store.get_artifact("acme", ref.artifact_id) == MARKER + b" async"
        finally:
            await store.close()

    asyncio.run(main())
