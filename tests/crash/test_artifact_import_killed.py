"""An import of a sealed export that carries artifacts (``shardstore --key-store K import
jsonl FILE --remap-ids``) SIGKILLed mid-run, then run again, gives what a single run gives.
One artifact, written before the first session, is referenced by every session: after the
kill the sessions committed hold it (it is stored in the first session's transaction,
sealed under that session's key here, so under a new id); the re-run finds those sessions
complete, works the artifact's id here out again and remaps the later sessions' references
to it, so every restored checkpoint names an artifact that opens to the original bytes."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import shardstore
from shardstore.artifacts.model import ArtifactRef
from shardstore.encryption import LocalKeyProvider

MARKER = b"manatee-artifact-9191"
TENANT = "artkill"
SESSIONS = 4
TURNS = 60
SHARED = MARKER + bytes(range(256)) * 600


@pytest.mark.slow
def test_artifact_import_killed_then_rerun(new_database: Callable[[], str], tmp_path: Path) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    src = new_database()
    with shardstore.connect(src, encryption=keys) as a:
        shared = a.put_artifact(TENANT, SHARED, content_type="application/octet-stream")
        for n in range(SESSIONS):
            sid = a.create_session(TENANT, f"s{n}")
            a.append_turns(sid, [{"role": "user", "content": f"{n}.{i}"} for i in range(TURNS)])
            own = a.put_artifact(TENANT, MARKER + b" own %d" % n, content_type="text/plain")
            a.checkpoint(sid, {"shared": shared.to_json(), "own": own.to_json()})
        out = io.StringIO()
        a.export_sessions(tenant_id=TENANT, out=out)  # sealed
    path = tmp_path / "sealed.jsonl"
    path.write_text(out.getvalue())
    dst = new_database()
    key_args = ["--key-store", str(tmp_path / "keys"), "--kek-file", str(tmp_path / "kek")]
    args = [sys.executable, "-m", "shardstore", "--dsn", dst, *key_args]
    args += ["import", "jsonl", str(path), "--remap-ids", "--quiet"]
    with psycopg.connect(dst, autocommit=True) as conn:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            (n,) = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone()  # type: ignore[misc]
            if n >= 1:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    with shardstore.connect(dst, encryption=keys) as b:
        copies = b.sessions(tenant_id=TENANT)
        assert len(copies) == SESSIONS
        named = set()
        for info in copies:
            restored = b.restore(info.session_id).checkpoint
            assert restored is not None
            refs = {k: ArtifactRef.from_json(v) for k, v in restored.state.items()}
            assert refs["shared"].artifact_id != shared.artifact_id  # sealed under a new key
            assert b.get_artifact(TENANT, refs["shared"].artifact_id) == SHARED
            assert b.get_artifact(TENANT, refs["own"].artifact_id).startswith(MARKER + b" own")
            named.add(refs["shared"].artifact_id)
        assert len(named) == 1  # stored once, every session's reference remapped to it
        artifacts = b.list_artifacts(TENANT)
        assert len(artifacts) == SESSIONS + 1
        assert all(info.live_refs >= 1 for info in artifacts)
    with psycopg.connect(dst, autocommit=True) as conn:
        chunks = conn.execute("SELECT data FROM shardstore.artifact_chunks").fetchall()
    assert chunks and not any(MARKER in bytes(data) for (data,) in chunks)
