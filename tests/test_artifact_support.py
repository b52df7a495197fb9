"""Helpers of the artifact tests (no tests here): stores on each backend, what a backend
holds, and the invariant every state of the artifact tables must satisfy."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

import shardstore
from shardstore.artifacts.config import config_of

BACKENDS = ("postgres", "file")


def backend_url(kind: str, tmp_path: Path) -> str:
    """The ``artifacts=`` URL of a backend of this kind for one test."""
    if kind == "postgres":
        return "postgres"
    if kind == "file":
        return (tmp_path / "objects").as_uri()
    if kind == "s3":
        from tests.s3_server import s3_url

        return s3_url()
    raise AssertionError(kind)


def stored_objects(store: shardstore.Store, dsn: str) -> list[str]:
    """What the backend holds: object keys (file, s3), or one entry per stored upload
    (postgres: the distinct uploads whose chunks are in artifact_chunks)."""
    backend = config_of(store).backend
    if backend is not None:
        return backend.keys()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT DISTINCT upload_id::text FROM shardstore.artifact_chunks")
        return sorted(r[0] for r in rows)


def check_invariant(store: shardstore.Store, dsn: str) -> None:
    """No reference names an artifact that is not ready, and every ready artifact's bytes
    are all there and hash to its sha256 (read straight from the backend)."""
    with psycopg.connect(dsn) as conn:
        dangling = conn.execute(
            "SELECT r.tenant_id, r.artifact_id, r.owner_type, a.state"
            "  FROM shardstore.artifact_refs r"
            " LEFT JOIN shardstore.artifacts a USING (tenant_id, artifact_id)"
            " WHERE a.state IS DISTINCT FROM 'ready'"
        ).fetchall()
        assert not dangling, f"references to missing or unfinished artifacts: {dangling}"
        ready = conn.execute(
            "SELECT tenant_id, artifact_id, sha256, size_bytes, backend, object_key, upload_id"
            " FROM shardstore.artifacts WHERE state = 'ready'"
        ).fetchall()
        backend = config_of(store).backend
        for _tenant, aid, sha, size, kind, key, upload in ready:
            if kind == "postgres":
                chunks = conn.execute(
                    "SELECT data FROM shardstore.artifact_chunks WHERE upload_id = %s"
                    " ORDER BY chunk_no",
                    (upload,),
                ).fetchall()
                data = b"".join(bytes(c[0]) for c in chunks)
                assert len(data) == size and hashlib.sha256(data).hexdigest() == sha, aid
            else:
                assert backend is not None and backend.verify(key, sha, size), (
                    f"ready artifact {aid} has no verified object at {key}"
                )


def count_rows(dsn: str) -> dict[str, int]:
    """Rows of each artifact table (hostile-input tests: nothing written)."""
    with psycopg.connect(dsn) as conn:
        return {
            t: int(conn.execute(f"SELECT count(*) FROM shardstore.{t}").fetchone()[0])  # type: ignore[index]
            for t in ("artifacts", "artifact_chunks", "artifact_refs")
        }


MakeStore = Callable[..., shardstore.Store]


def any_value(value: Any) -> Any:
    """Identity (keeps hypothesis strategies readable)."""
    return value
