"""The data-key rotation's race with writers in flight, behind a real PgBouncer in
transaction mode: the locks a sealed writer holds from its key read to its commit (the
session row, a subject's transaction-level advisory lock) and the one-statement append's
key check work through the pooler as on a direct connection."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from tests.encryption.test_rotation_race import MARKER, _kids, _race


@pytest.mark.parametrize("kind", ["append", "checkpoint", "fact"])
def test_writers_in_flight_behind_the_pooler(
    kind: str, pooled_dsn: str, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    store = shardstore.connect(
        pooled_dsn, encryption=keys, chunk_tokens=60, pool_min_size=1, pool_max_size=3
    )
    try:
        assert store.connector.pooler is True
        tenant, subject = "pool-race", "ilo"
        sid = store.create_session(tenant_id=tenant, subject_id=subject)
        store.append_turns(sid, [{"role": "user", "content": f"{MARKER} {i}"} for i in range(2)])
        (old,) = _kids(dsn, tenant)
        writes: dict[str, Callable[[], Any]] = {
            "append": lambda: store.append_turn(sid, {"role": "user", "content": MARKER}),
            "checkpoint": lambda: store.checkpoint(sid, {"plan": MARKER}),
            "fact": lambda: store.remember(tenant, subject, "likes", MARKER, source=None),
        }
        _result, report, waited = _race(
            monkeypatch,
            keys,
            dsn,
            writes[kind],
            lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
        )
        # the one-statement append holds no lock while stopped (its statement refuses the
        # shredded version afterwards); the others make the final check wait
        assert waited is (kind != "append")
        assert report.shredded_keys == (old,)
        assert _kids(dsn, tenant) == {report.new_key}
        assert [t.message["content"] for t in store.history(sid)][-1] == (
            MARKER if kind == "append" else f"{MARKER} 1"
        )
        if kind == "checkpoint":
            restored = store.restore(sid).checkpoint
            assert restored is not None and restored.state == {"plan": MARKER}
        if kind == "fact":
            assert [f.value for f in store.recall(tenant, subject, ["likes"])] == [MARKER]
    finally:
        store.close()
