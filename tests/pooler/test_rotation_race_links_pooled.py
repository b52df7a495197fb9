"""The links of sealed bytes written apart from their upload (a span payload's reference, an
import's session, a later ``ref_artifact``) racing a data-key rotation behind a real
PgBouncer in transaction mode: the session row's lock and the subject's lock they take are
transaction-scoped, so they hold through the pooler as on a direct connection."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.errors import Conflict
from tests.encryption.test_rotation_race_artifacts import race
from tests.encryption.test_rotation_race_links import MARKER, PAYLOAD_LOCKED_READ


def test_links_racing_a_rotation_behind_the_pooler(
    pooled_dsn: str, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    store = shardstore.connect(pooled_dsn, encryption=keys, pool_min_size=1, pool_max_size=3)
    try:
        assert store.connector.pooler is True
        tenant, subject = "pool-link-race", "ilo"
        sid = store.create_session(tenant_id=tenant, subject_id=subject)
        store.append_turn(sid, {"role": "user", "content": "hello"})

        def rotate() -> Any:
            return store.rotate_data_key(tenant_id=tenant, subject_id=subject)

        current = keys.key_for(Scope("subject", tenant, subject), create=False)
        assert current is not None
        # a payload's reference holding the session row: the rotation waits and keeps
        writer, report, waited = race(
            monkeypatch,
            keys,
            [dsn],
            lambda: store.attach_payload(
                None,
                MARKER,
                name="prompt",
                content_type="text/plain",
                tenant_id=tenant,
                session_id=sid,
            ),
            rotate,
            nth=PAYLOAD_LOCKED_READ,
        )
        assert waited and writer.error is None
        assert report.kept_keys == (current.kid,) and report.shredded_keys == ()
        assert store.get_artifact(tenant, writer.result.artifact_id) == MARKER
        monkeypatch.undo()

        # an import holding the subject's lock: the rotation waits, the session is refused
        out = io.StringIO()
        store.export_sessions([sid], out=out, decrypt=True)
        export = out.getvalue()

        def run_import() -> Any:
            return store.import_jsonl(io.StringIO(export), remap_ids=True, import_id="pooled")

        writer, report, waited = race(monkeypatch, keys, [dsn], run_import, rotate)
        assert waited and isinstance(writer.error, Conflict)
        monkeypatch.undo()
        again = run_import()
        assert again.sessions == 1 and again.artifacts == 1
    finally:
        store.close()
