"""A client SIGKILLed mid-upload and between upload and reference, many times, on each
backend: no visible reference ever names a missing or partial object, every acknowledged
reference's bytes are there, every acknowledged checkpoint restores with its required
artifact (also after a sweep with no grace between kills), and the sweep collects every
orphan (unfinished rows, staged files, objects without a row).

Run as a script (``python -m tests.crash.test_artifact_writer_killed DSN URL``) it is the
writer: it puts random multi-chunk content and references it (half of the time from a
checkpoint, with ``required_for_resume``), printing
``CKPT <session> <checkpoint> <artifact> <sha256>`` after each acknowledged
checkpoint and ``ACK <artifact_id> <sha256>`` after each reference."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.artifacts.source import CHUNK
from tests.artifacts.support import BACKENDS, backend_url, check_invariant, stored_objects

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _writer(dsn: str, url: str) -> None:
    store = shardstore.connect(dsn, artifacts=url, background_fold=False)
    rng = random.Random()
    sid = store.create_session("crash")
    print("READY", flush=True)
    i = 0
    while True:
        size = rng.randrange(1, 3 * CHUNK)
        data = rng.randbytes(size) if rng.random() < 0.8 else b"repeat" * 1000
        required = rng.random() < 0.5
        ref = store.put_artifact(
            "crash", data, content_type="application/octet-stream", required_for_resume=required
        )
        time.sleep(rng.random() * 0.03)  # widen the window between upload and reference
        sha = hashlib.sha256(data).hexdigest()
        if required:  # a checkpoint that needs it to resume
            cp = store.checkpoint(sid, {"step": i, "file": ref.to_json()})
            print(f"CKPT {sid} {cp.checkpoint_id} {ref.artifact_id} {sha}", flush=True)
        else:
            store.ref_artifact("crash", ref.artifact_id, "business_output", f"{os.getpid()}-{i}")
        print(f"ACK {ref.artifact_id} {sha}", flush=True)
        i += 1


def _resumable(
    store: shardstore.Store,
    checkpoints: dict[uuid.UUID, tuple[Any, ...]],
    opened: set[uuid.UUID] | None = None,
) -> None:
    """Every acknowledged checkpoint restores, and finds its required artifact whole.

    ``opened``: checkpoints whose artifact an earlier call read whole (the call adds the
    ones it reads); for those the restore and the artifact's reference are checked again,
    and check_invariant checks that its bytes are still stored."""
    for cid, (sid, aid, sha) in checkpoints.items():
        restored = store.restore(sid, cid)
        assert [a.artifact_id for a in restored.artifacts] == [aid]
        assert restored.artifacts[0].required_for_resume
        if opened is not None and cid in opened:
            continue
        assert hashlib.sha256(store.get_artifact("crash", aid)).hexdigest() == sha
        if opened is not None:
            opened.add(cid)


def _live_backends(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        (n,) = conn.execute(  # type: ignore[misc]
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'artifact-writer'"
        ).fetchone()
    return int(n)


def _kill_loop(
    dsn: str, url: str, kills: int, tmp_path: Path
) -> tuple[dict[uuid.UUID, str], dict[uuid.UUID, tuple[Any, ...]]]:
    acked: dict[uuid.UUID, str] = {}
    checkpoints: dict[uuid.UUID, tuple[Any, ...]] = {}
    checker = shardstore.connect(dsn, artifacts=url)
    env = {**os.environ, "PGAPPNAME": "artifact-writer"}
    # what earlier rounds read whole: each round reads only what is new, and checks that
    # the rest is still stored and still restores (the test's end reads everything again)
    verified: set[uuid.UUID] = set()
    opened: set[uuid.UUID] = set()
    try:
        for round_no in range(kills):
            log = tmp_path / f"writer-{round_no}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.crash.test_artifact_writer_killed", dsn, url],
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
                deadline = time.monotonic() + 60
                while b"READY" not in log.read_bytes():
                    assert proc.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, "the writer never got ready"
                    time.sleep(0.02)
                time.sleep(0.2 + random.random() * 1.3)
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
            for line in log.read_text().splitlines():
                if line.startswith("ACK "):
                    _, aid, sha = line.split()
                    acked[uuid.UUID(aid)] = sha
                elif line.startswith("CKPT "):
                    _, sid, cid, aid, sha = line.split()
                    checkpoints[uuid.UUID(cid)] = (uuid.UUID(sid), uuid.UUID(aid), sha)
            # what is visible while the dead client's transaction may still be open
            check_invariant(checker, dsn, verified)
            _resumable(checker, checkpoints, opened)
            deadline = time.monotonic() + 30
            while _live_backends(dsn):
                assert time.monotonic() < deadline, "the killed writer's backend lingers"
                time.sleep(0.05)
            # a sweep with no grace between kills: orphans go, referenced objects stay
            checker.sweep_artifacts(grace=timedelta(0))
            check_invariant(checker, dsn, verified)
            _resumable(checker, checkpoints, opened)
    finally:
        checker.close()
    return acked, checkpoints


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("kills", [pytest.param(12, marks=pytest.mark.slow), 3])
def test_killed_writer_never_leaves_a_dangling_reference(
    dsn: str, kind: str, kills: int, tmp_path: Path
) -> None:
    url = backend_url(kind, tmp_path)
    acked, checkpoints = _kill_loop(dsn, url, kills, tmp_path)
    assert acked, "the writer acknowledged nothing: the kills came too early"
    assert checkpoints, "no checkpoint was acknowledged"
    store = shardstore.connect(dsn, artifacts=url)
    try:
        for aid, sha in acked.items():
            data = store.get_artifact("crash", aid)
            assert hashlib.sha256(data).hexdigest() == sha
        # orphans: staged files (backdated past the minimum age), unfinished rows,
        # unreferenced uploads; the sweep takes them all
        for path in (tmp_path / "objects" / ".staging").glob("*.part"):
            os.utime(path, (time.time() - 7200, time.time() - 7200))
        with psycopg.connect(dsn, autocommit=True) as conn:
            # claimed, never finished: kept for an hour whatever the grace (a dead client's
            # PUT can still land); then the sweep takes the row and its object
            claimed = "SELECT count(*) FROM shardstore.artifacts WHERE state = 'uploading'"
            young = conn.execute(claimed).fetchone()
            store.sweep_artifacts(grace=timedelta(0))
            assert conn.execute(claimed).fetchone() == young
            conn.execute(
                "UPDATE shardstore.artifacts SET created_at = created_at - interval '2 hours'"
                " WHERE state = 'uploading'"
            )
        store.sweep_artifacts(grace=timedelta(0))
        with psycopg.connect(dsn) as conn:
            states = conn.execute("SELECT artifact_id, state FROM shardstore.artifacts").fetchall()
            (unreferenced,) = conn.execute(  # type: ignore[misc]
                "SELECT count(*) FROM shardstore.artifacts a WHERE NOT EXISTS"
                " (SELECT 1 FROM shardstore.artifact_refs r WHERE r.artifact_id = a.artifact_id)"
            ).fetchone()
        assert {state for _aid, state in states} == {"ready"}
        ready = {aid for aid, _state in states}
        # acknowledged ones, and at most the one per kill referenced before its ACK got out
        assert set(acked) <= ready and len(ready - set(acked)) <= kills
        assert unreferenced == 0
        assert len(stored_objects(store, dsn)) == len(ready)
        _resumable(store, checkpoints)
        if kind == "file":
            assert not list((tmp_path / "objects" / ".staging").iterdir())
            assert not [p for p in (tmp_path / "objects").rglob(".*.tmp")]
        check_invariant(store, dsn)
    finally:
        store.close()


def _main(argv: list[str]) -> Any:
    _writer(argv[1], argv[2])


if __name__ == "__main__":
    _main(sys.argv)
