"""Artifact uploads racing a data-key rotation behind a real PgBouncer in transaction mode:
the link's check (the session row locked ``FOR KEY SHARE`` and the key read again, in the
transaction that links the bytes) holds through the pooler as on a direct connection, both
when the rotation finished first (the bytes are sealed again under the new version) and
when the link holds the row (the rotation waits, then keeps the version)."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from tests.encryption.test_rotation_race_artifacts import LOCKED_READ, MARKER, race


@pytest.mark.parametrize("held", [False, True], ids=["rotated-first", "link-held"])
def test_artifact_links_behind_the_pooler(
    held: bool, pooled_dsn: str, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    store = shardstore.connect(
        pooled_dsn, encryption=keys, pool_min_size=1, pool_max_size=3, offload_over=512
    )
    try:
        assert store.connector.pooler is True
        tenant, subject = "pool-art-race", "ilo"
        sid = store.create_session(tenant_id=tenant, subject_id=subject)
        store.append_turn(sid, {"role": "user", "content": "hello"})
        current = keys.key_for(Scope("subject", tenant, subject), create=False)
        assert current is not None
        writer, report, waited = race(
            monkeypatch,
            keys,
            [dsn],
            lambda: store.put_artifact(
                tenant, MARKER, content_type="text/plain", owner=("turn", f"{sid}:0")
            ),
            lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
            nth=LOCKED_READ["postgres"] if held else 1,
        )
        assert writer.error is None and waited is held
        if held:
            assert report.kept_keys == (current.kid,) and report.shredded_keys == ()
        else:
            assert report.shredded_keys == (current.kid,) and report.kept_keys == ()
        assert store.get_artifact(tenant, writer.result.artifact_id) == MARKER
    finally:
        store.close()
