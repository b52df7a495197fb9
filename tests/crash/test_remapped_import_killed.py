"""A remapped JSONL import (``shardstore import jsonl --remap-ids``) SIGKILLed mid-run, then
run again, gives the database a single run gives: the new ids derive from the file's export
id, so the re-run recognises the sessions the killed run committed (whole, one transaction
each) and writes none of them twice, beside the original data that stays as it was. Half
the sessions are forks: each copy is a fork of its parent's copy, however the kills fell."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import shardstore
from tests.importers.test_export_v2_round_trip import TENANT, say

COUNTS = (
    "SELECT (SELECT count(*) FROM shardstore.sessions), (SELECT count(*) FROM "
    "shardstore.checkpoints), (SELECT count(*) FROM shardstore.runs), (SELECT count(*) FROM "
    "shardstore.artifact_refs), (SELECT coalesce(sum(next_turn_seq), 0) FROM shardstore.sessions)"
)
COPIES = (
    "SELECT s.session_id, s.subject_id, s.next_turn_seq, s.fork_parent, s.fork_at, "
    "(SELECT count(*) FROM shardstore.checkpoints c WHERE c.session_id = s.session_id), "
    "(SELECT count(*) FROM shardstore.artifact_refs r WHERE r.session_id = s.session_id) "
    "FROM shardstore.sessions s ORDER BY s.session_id"
)


@pytest.mark.slow
def test_remapped_import_killed_then_rerun(new_database: Callable[[], str], tmp_path: Path) -> None:
    src = new_database()
    with shardstore.connect(src) as a:
        blob = a.put_artifact(TENANT, b"pdf" * 100_000, content_type="application/pdf")
        sids: list[uuid.UUID] = []
        for n in range(6):
            if n < 3:
                sid = a.create_session(TENANT, f"s{n}")
                a.append_turns(sid, [say(i) for i in range(150)])
            else:  # a fork: imported as a fork of its parent's copy
                sid = a.fork(sids[n - 3], at_turn_seq=99)
                a.append_turns(sid, [say(i) for i in range(100, 150)])
            sids.append(sid)
            a.checkpoint(sid, {"n": n, "doc": blob.to_json()})
            a.open_run(sid, framework="custom", thread_key=f"t{n}")
        out = io.StringIO()
        a.export_sessions(tenant_id=TENANT, out=out)
    path = tmp_path / "export.jsonl"
    path.write_text(out.getvalue())
    dst, ref = new_database(), new_database()
    for target in (dst, ref):  # the original data, beside which the copies go
        with shardstore.connect(target) as b:
            b.import_jsonl(str(path))
    args = [
        sys.executable,
        "-m",
        "shardstore",
        "--dsn",
        dst,
        "import",
        "jsonl",
        str(path),
        "--remap-ids",
        "--quiet",
    ]
    with psycopg.connect(dst, autocommit=True) as conn:
        (base,) = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone()  # type: ignore[misc]
        for wait_for in (base, base + 3):
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                (n,) = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone()  # type: ignore[misc]
                if n >= wait_for:
                    break
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            # every copy is whole or absent: its checkpoint and reference came with it
            for row in conn.execute(COPIES).fetchall():
                assert row[2] == 150 and row[5] == 1 and row[6] == 1, row
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    with shardstore.connect(ref) as b:
        once = b.import_jsonl(str(path), remap_ids=True)
        assert once.sessions == 6
    with psycopg.connect(dst) as a_conn, psycopg.connect(ref) as b_conn:
        got, want = a_conn.execute(COPIES).fetchall(), b_conn.execute(COPIES).fetchall()
        assert got == want and len(got) == 12
        assert len([r for r in got if r[3] is not None]) == 6  # the forks and their copies
        assert a_conn.execute(COUNTS).fetchone() == b_conn.execute(COUNTS).fetchone()
