"""A rewind of an encrypted session whose client is SIGKILLed in the middle of it. The rewind
and its new rewind epoch are one transaction (rewind_v3), so afterwards the session is
either as before it (the epochs too) or rewound with the new epoch: every turn opens, the
next appends are sealed for the epoch in force, and a ciphertext of a removed turn written
back is refused.

Kill point, reached without any timing assumption: the parent holds a row lock on the
session's checkpoint past the cut, so the child's rewind, which deletes that checkpoint
after removing the turns and before writing the head and the epoch, waits on it; the parent
waits until the child's backend waits on that lock, then kills the child. Then either the
server ends the dead client's transaction (``pg_terminate_backend``, as when it notices the
lost connection), or the parent lets the lock go and the orphaned statement runs to its
end, committing or not, before the server notices."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import DecryptionFailed
from tests.encryption.conftest import raw

pytestmark = pytest.mark.slow

TURNS = 10
CUT = 5


def _keys(key_dir: str) -> LocalKeyProvider:
    return LocalKeyProvider(Path(key_dir) / "store", key_file=Path(key_dir) / "kek")


def _rewinder(dsn: str, key_dir: str, sid: str) -> None:
    store = shardstore.connect(dsn, encryption=_keys(key_dir), background_fold=False)
    store.rewind(uuid.UUID(sid), CUT)
    os._exit(0)


def _wait(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def _waiting_rewind(dsn: str) -> int | None:
    """The backend of a rewind that waits on a lock, if one does."""
    rows = raw(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE %s AND datname = current_database()",
        ("%rewind_v3%",),
    )
    return int(rows[0][0]) if rows else None


def _gone(dsn: str, pid: int) -> bool:
    return not raw(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))


@pytest.mark.parametrize("ending", ["terminated", "runs_on"])
def test_a_rewind_killed_midway_leaves_every_turn_readable(
    dsn: str, tmp_path: Path, ending: str
) -> None:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["shardstore"])
    store = shardstore.connect(dsn, encryption=_keys(str(tmp_path)), background_fold=False)
    try:
        sid = store.create_session("t", subject_id="crash")
        messages = [{"role": "user", "content": f"turn {i}"} for i in range(TURNS)]
        store.append_turns(sid, messages[:-1])
        store.checkpoint(sid, {"at": TURNS - 2})  # past the cut: the rewind deletes it
        store.append_turn(sid, messages[-1])
        before = dict(
            raw(
                dsn,
                "SELECT turn_seq, message::text FROM shardstore.turn_buffer WHERE session_id = %s",
                (sid,),
            )
        )
        assert len(before) == TURNS
        with psycopg.connect(dsn) as holder:
            holder.execute(
                "SELECT 1 FROM shardstore.checkpoints WHERE session_id = %s FOR UPDATE", (sid,)
            )
            child = ctx.Process(target=_rewinder, args=(dsn, str(tmp_path), str(sid)))
            child.start()
            _wait(lambda: _waiting_rewind(dsn) is not None, "the rewind waiting on the lock")
            backend = _waiting_rewind(dsn)
            assert backend is not None
            os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
            child.join()
            if ending == "terminated":
                raw(dsn, "SELECT pg_terminate_backend(%s)", (backend,))
                _wait(lambda: _gone(dsn, backend), "the terminated backend gone")
            holder.rollback()
        _wait(lambda: _gone(dsn, backend), "the orphaned rewind's backend gone")

        turns = list(store.history(sid))  # every turn opens
        (epochs,) = raw(
            dsn, "SELECT rewind_epochs FROM shardstore.sessions WHERE session_id = %s", (sid,)
        )[0]
        if ending == "terminated" or len(turns) == TURNS:
            assert [t.message for t in turns] == messages and epochs is None
        else:
            assert [t.message for t in turns] == messages[:CUT] and epochs == [CUT, 1]
        store.rewind(sid, CUT)
        store.append_turn(sid, {"role": "user", "content": "after"})
        assert [t.message for t in store.history(sid)] == [
            *messages[:CUT],
            {"role": "user", "content": "after"},
        ]
        after = raw(
            dsn,
            "SELECT message::text FROM shardstore.turn_buffer WHERE session_id = %s"
            " AND turn_seq = %s",
            (sid, CUT),
        )[0][0]
        assert json.loads(after)["e"] >= 1
        raw(
            dsn,
            "UPDATE shardstore.turn_buffer SET message = %s::jsonb"
            " WHERE session_id = %s AND turn_seq = %s",
            (before[CUT], sid, CUT),
        )
        with pytest.raises(DecryptionFailed):
            store.tail(sid, n=TURNS)
    finally:
        store.close()
