"""A re-sealing import (``shardstore --key-store K import jsonl FILE --remap-ids`` of a
decrypted export into an encrypted store) SIGKILLed mid-run, then run again, gives what a
single run gives: every copy whole or absent after the kill (a session is one transaction,
its values sealed inside it), and after the re-run every value opens under the target's
key store, equal to the source's, with no plaintext stored. The data keys the killed run
created for sessions it did not commit are reused by the re-run."""

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
from shardstore.encryption import LocalKeyProvider

MARKER = "narwhal-reseal-3307"
TENANT = "reseal"
SESSIONS = 4
TURNS = 60
COPIES = (
    "SELECT s.session_id, s.subject_id, s.next_turn_seq, "
    "(SELECT count(*) FROM shardstore.checkpoints c WHERE c.session_id = s.session_id) "
    "FROM shardstore.sessions s ORDER BY s.session_id"
)


@pytest.mark.slow
def test_resealing_import_killed_then_rerun(
    new_database: Callable[[], str], tmp_path: Path
) -> None:
    src_keys = LocalKeyProvider(tmp_path / "src-keys", key_file=tmp_path / "src-kek")
    src = new_database()
    with shardstore.connect(src, encryption=src_keys) as a:
        for n in range(SESSIONS):
            sid = a.create_session(TENANT, f"s{n}")
            a.append_turns(
                sid, [{"role": "user", "content": f"{MARKER} {n}.{i}"} for i in range(TURNS)]
            )
            a.checkpoint(sid, {"n": n, "note": MARKER})
        out = io.StringIO()
        a.export_sessions(tenant_id=TENANT, out=out, decrypt=True)
    path = tmp_path / "plain.jsonl"
    path.write_text(out.getvalue())
    dst = new_database()
    (tmp_path / "dst-keys").mkdir()
    key_args = ["--key-store", str(tmp_path / "dst-keys"), "--kek-file", str(tmp_path / "kek")]
    args = [sys.executable, "-m", "shardstore", "--dsn", dst, *key_args]
    args += ["import", "jsonl", str(path), "--remap-ids", "--quiet"]
    with psycopg.connect(dst, autocommit=True) as conn:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            (n,) = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone()  # type: ignore[misc]
            if n >= 2:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for row in conn.execute(COPIES).fetchall():  # whole or absent
            assert row[2] == TURNS and row[3] == 1, row
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    dst_keys = LocalKeyProvider(tmp_path / "dst-keys", key_file=tmp_path / "kek")
    with (
        shardstore.connect(src, encryption=src_keys) as a,
        shardstore.connect(dst, encryption=dst_keys) as b,
    ):
        originals = a.sessions(tenant_id=TENANT)
        copies = b.sessions(tenant_id=TENANT)
        assert len(copies) == SESSIONS
        by_subject = {c.subject_id: c.session_id for c in copies}
        for info in originals:
            copy = by_subject[info.subject_id]
            assert [t.message for t in b.history(copy)] == [
                t.message for t in a.history(info.session_id)
            ]
            restored = b.restore(copy).checkpoint
            assert restored is not None and restored.state["note"] == MARKER
    with psycopg.connect(dst, autocommit=True) as conn:
        stored = conn.execute("SELECT message::text FROM shardstore.turn_buffer").fetchall()
        stored += conn.execute("SELECT state::text FROM shardstore.checkpoints").fetchall()
    assert stored and all(MARKER not in row[0] for row in stored)
