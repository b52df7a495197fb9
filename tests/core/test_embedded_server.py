"""connect() with no DSN starts the embedded Postgres on demand; later processes reuse it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shardstore

CHILD = """
import shardstore
store = shardstore.connect()
sid = store.create_session("acme", session_id="{sid}")
print(len(store.tail(sid)), store.dsn)
store.close()
"""


def _postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().splitlines()[0])


@pytest.mark.slow
def test_embedded_server_started_once_and_reused(
    pg_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = pg_data_dir
    monkeypatch.setenv("SHARDSTORE_DATA_DIR", str(data_dir))
    monkeypatch.delenv("SHARDSTORE_DSN", raising=False)
    store = shardstore.connect()
    try:
        assert store.dsn is not None and str(data_dir) in store.dsn
        sid = store.create_session("acme")
        store.append_turn(sid, {"role": "user", "content": "hello from the first process"})
        pid = _postmaster_pid(data_dir)
        env = {**os.environ, "SHARDSTORE_DATA_DIR": str(data_dir)}
        env.pop("SHARDSTORE_DSN", None)
        child = subprocess.run(
            [sys.executable, "-c", CHILD.format(sid=sid)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        seen, child_dsn = child.stdout.split(maxsplit=1)
        assert seen == "1", "the second process sees the first one's turn"
        assert child_dsn.strip() == store.dsn
        assert _postmaster_pid(data_dir) == pid, "the running server was reused, not restarted"
    finally:
        store.close()
        _stop(data_dir)


def _stop(data_dir: Path) -> None:
    """Fast shutdown of the server this test started (SIGINT to the postmaster)."""
    pid = _postmaster_pid(data_dir)
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
