"""A client SIGKILLed in the middle of sealed uploads (encryption on) to a directory (the
backend where a sealed put adds a step: its header is written into the staged file after
the frames; a postgres put is one transaction): afterwards every acknowledged artifact
opens whole, every artifact the database calls ready opens whole (no header without its
frames, no frames without their header), nothing else is readable, and the same content put
again is stored and read.

Run as a script (``python -m tests.crash.test_artifact_sealed_upload_killed DSN URL KEYS``)
it is the writer: it puts multi-chunk content derived from a counter, sealed, printing
``ACK <i> <artifact_id>`` after each acknowledged put."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import shardstore
from shardstore.artifacts.source import CHUNK
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import ArtifactNotFound

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TENANT = "crash-sealed"


def content(i: int) -> bytes:
    """The bytes of the writer's i-th put: one chunk and a bit, different for every i."""
    return random.Random(i).randbytes(CHUNK + 1000 + i)


def keys_at(root: Path) -> LocalKeyProvider:
    return LocalKeyProvider(root / "store", key_file=root / "kek")


def _writer(dsn: str, url: str, key_root: str) -> None:
    store = shardstore.connect(
        dsn, encryption=keys_at(Path(key_root)), artifacts=url, background_fold=False
    )
    print("READY", flush=True)
    i = 0
    while True:
        ref = store.put_artifact(TENANT, content(i), content_type="application/octet-stream")
        print(f"ACK {i} {ref.artifact_id}", flush=True)
        i += 1


def test_killed_mid_sealed_upload_leaves_nothing_half_readable(dsn: str, tmp_path: Path) -> None:
    url = (tmp_path / "objects").as_uri()
    acked: dict[int, uuid.UUID] = {}
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.crash.test_artifact_sealed_upload_killed",
            dsn,
            url,
            str(tmp_path / "keys"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("ACK"):
                _, i, aid = line.split()
                acked[int(i)] = uuid.UUID(aid)
                if len(acked) >= 3:
                    break
        time.sleep(random.random() * 0.05)  # somewhere inside the next put
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(acked) >= 3, "the writer never acknowledged three puts"

    store = shardstore.connect(dsn, encryption=keys_at(tmp_path / "keys"), artifacts=url)
    try:
        for i, aid in acked.items():
            assert store.get_artifact(TENANT, aid) == content(i)
        listed = store.list_artifacts(TENANT)
        for info in listed:
            if info.state == "ready":
                assert len(store.get_artifact(TENANT, info.ref.artifact_id)) == info.ref.size_bytes
            else:  # the killed put's claimed row: not readable
                with pytest.raises(ArtifactNotFound):
                    store.get_artifact(TENANT, info.ref.artifact_id)
        # the put that was killed, done again
        n = max(acked) + 1
        ref = store.put_artifact(TENANT, content(n), content_type="application/octet-stream")
        assert store.get_artifact(TENANT, ref.artifact_id) == content(n)
    finally:
        store.close()


if __name__ == "__main__":
    _writer(sys.argv[1], sys.argv[2], sys.argv[3])
