"""Artifact bytes in the export and import of an encrypted store behind a real PgBouncer in
transaction mode: the export reads each artifact twice (a pass for its digest, then its
parts) inside the session's snapshot transaction, and the import seals the artifacts in the
session's transaction, which the pooler keeps on one server connection."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import psycopg

import shardstore
from shardstore.artifacts.model import ArtifactRef
from shardstore.encryption import LocalKeyProvider
from shardstore.importers.remap import IdMap
from tests.pgbouncer import Pooler

MARKER = b"dugong-pooled-6262"
DATA = MARKER + bytes(range(256)) * 2100  # two parts


def test_sealed_and_decrypted_artifacts_behind_the_pooler(
    pgbouncer: Pooler, pooled_dsn: str, new_database: Callable[[], str], tmp_path: Path
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    other = LocalKeyProvider(tmp_path / "other", key_file=tmp_path / "other-kek")
    with shardstore.connect(pooled_dsn, encryption=keys) as store:
        assert store.connector.pooler is True
        sid = store.create_session("acme", "pat")
        ref = store.put_artifact("acme", DATA, content_type="application/octet-stream")
        store.checkpoint(sid, {"doc": ref.to_json()})
        sealed, plain = io.StringIO(), io.StringIO()
        store.export_sessions([sid], out=sealed)
        store.export_sessions([sid], out=plain, decrypt=True)
        # the sealed export back into the same key store, beside the original
        copy = store.import_jsonl(io.StringIO(sealed.getvalue()), remap_ids=True)
        assert (copy.sessions, copy.artifacts, copy.artifact_refs) == (1, 1, 1)
        export_id = json.loads(sealed.getvalue().splitlines()[0])["export_id"]
        restored = store.restore(IdMap(export_id).session(sid)).checkpoint
        assert restored is not None
        assert (
            store.get_artifact("acme", ArtifactRef.from_json(restored.state["doc"]).artifact_id)
            == DATA
        )
    assert MARKER.decode() not in sealed.getvalue()

    target = new_database()
    with shardstore.connect(pgbouncer.dsn(target), encryption=other) as copy_store:
        report = copy_store.import_jsonl(io.StringIO(plain.getvalue()))
        assert (report.sessions, report.artifacts) == (1, 1)
        restored = copy_store.restore(sid).checkpoint
        assert restored is not None
        moved = ArtifactRef.from_json(restored.state["doc"])
        assert moved.artifact_id != ref.artifact_id
        assert copy_store.get_artifact("acme", moved.artifact_id) == DATA
    with psycopg.connect(target, autocommit=True) as conn:
        chunks = conn.execute("SELECT data FROM shardstore.artifact_chunks").fetchall()
    assert chunks and not any(MARKER in bytes(data) for (data,) in chunks)
