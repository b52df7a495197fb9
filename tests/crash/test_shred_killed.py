"""Key-store crashes: a child process SIGKILLed in the middle of ``purge_subject(shred=True)``
and in the middle of creating a subject's first data key while another process creates it
too. Afterwards every row of the subject is readable with exactly one data key, or that key
is shredded (nothing opens it, with the KEK still there); a re-run of the purge finishes it.

Kill points, each reached by a child that writes a marker and blocks there until the parent,
which waits for the marker, kills it (no timing assumption; see
tests/crash/test_artifact_purge_killed.py for the pattern):

* shred ``zeroed``: the key file overwritten and fsynced, not yet unlinked;
* shred ``unlinked``: the file unlinked, the directory not yet fsynced;
* shred ``rows``: the key destroyed and the first batch of rows purged, the rest not;
* create ``linked``: the new key linked under its scope's name, the directory not fsynced,
  the append that needed it not committed;
* create ``unlinked-temp``: the key written to its temporary file, never linked;
* create ``race``: no kill: two processes both reach the link of a new key of one subject at
  once (each holds at the link until both are there), and one of them wins."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, keystore
from shardstore.errors import KeyShredded
from tests.encryption.conftest import raw

pytestmark = pytest.mark.slow

TENANT = "t"


def _block(mark: str, point: str) -> None:
    Path(mark).write_text(point)
    while True:  # the parent kills us here
        signal.pause()


def _keys(key_dir: str) -> LocalKeyProvider:
    return LocalKeyProvider(Path(key_dir) / "store", key_file=Path(key_dir) / "kek")


def _shredder(dsn: str, key_dir: str, subject: str, point: str, mark: str) -> None:
    """``purge_subject(shred=True)``, stopped at ``point``."""
    if point == "zeroed":
        unlink = Path.unlink

        def stop_before_unlink(self: Path, missing_ok: bool = False) -> None:
            if self.suffix == ".key":
                _block(mark, point)
            unlink(self, missing_ok=missing_ok)

        Path.unlink = stop_before_unlink  # type: ignore[method-assign]  # this child only
    elif point == "unlinked":
        keystore._fsync_dir = lambda path: _block(mark, point)  # type: ignore[assignment]
    store = shardstore.connect(dsn, encryption=_keys(key_dir), background_fold=False)
    progress: Any = (lambda *_: _block(mark, point)) if point == "rows" else False
    store.purge_subject(TENANT, subject, shred=True, batch_size=1, progress=progress)
    os._exit(0)


def _creator(dsn: str, key_dir: str, sid: str, point: str, mark: str, go: str) -> None:
    """The first append of a session of a new subject, stopped at ``point``."""
    link = os.link

    def held_link(src: Any, dst: Any) -> None:
        if point == "unlinked-temp":
            _block(mark, point)
        if point == "race":
            Path(mark).write_text(point)
            while not Path(go).exists():
                time.sleep(0.002)
        link(src, dst)
        if point == "linked":
            _block(mark, point)

    os.link = held_link  # this child only
    store = shardstore.connect(dsn, encryption=_keys(key_dir), background_fold=False)
    store.append_turn(uuid.UUID(sid), {"role": "user", "content": f"from {point}"})
    os._exit(0)


def _wait(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def _kids(dsn: str, subject: str) -> set[str]:
    """The data key ids the subject's stored turns name, buffered or folded."""
    rows = raw(
        dsn,
        "SELECT b.message::text FROM shardstore.turn_buffer b"
        "  JOIN shardstore.sessions s USING (session_id)"
        " WHERE s.tenant_id = %(t)s AND s.subject_id = %(s)s"
        " UNION ALL SELECT (e->'m')::text FROM shardstore.agent_history h"
        "  JOIN shardstore.sessions s USING (session_id),"
        "  jsonb_array_elements(h.conversation_chunk) e"
        " WHERE s.tenant_id = %(t)s AND s.subject_id = %(s)s",
        {"t": TENANT, "s": subject},
    )
    return {json.loads(text)["k"] for (text,) in rows}


def _key_files(key_dir: Path) -> list[Path]:
    return sorted((key_dir / "store" / "keys").glob("*.key"))


@pytest.fixture
def forkserver() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["shardstore", "tests.crash.test_shred_killed"])
    return ctx


def test_a_shred_killed_anywhere_leaves_the_key_gone_or_whole(
    dsn: str, tmp_path: Path, forkserver: Any
) -> None:
    store = shardstore.connect(dsn, encryption=_keys(str(tmp_path)), background_fold=False)
    try:
        bystander = store.create_session(TENANT, subject_id="bystander")
        store.append_turn(bystander, {"role": "user", "content": "stays"})
        for point in ("zeroed", "unlinked", "rows"):
            subject = f"person-{point}"
            sids = [store.create_session(TENANT, subject_id=subject) for _ in range(3)]
            for sid in sids:
                store.append_turns(
                    sid, [{"role": "user", "content": f"{subject} {i}"} for i in range(3)]
                )
            (kid,) = _kids(dsn, subject)
            files_before = len(_key_files(tmp_path))
            mark = tmp_path / f"mark-{point}"
            proc = forkserver.Process(
                target=_shredder, args=(dsn, str(tmp_path), subject, point, str(mark)), daemon=True
            )
            proc.start()
            _wait(lambda: mark.exists() or not proc.is_alive(), point)  # noqa: B023
            assert proc.is_alive(), f"the child ended before {point}"
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(30)
            assert proc.exitcode == -signal.SIGKILL
            # the one key the rows name is destroyed for every reader, this process's too
            assert _kids(dsn, subject) <= {kid}
            with pytest.raises(KeyShredded):
                store.ctx.sealer.keys.key(kid)  # type: ignore[union-attr]
            with pytest.raises(KeyShredded):
                _keys(str(tmp_path)).key(kid)
            live = [
                sid
                for (sid,) in raw(
                    dsn,
                    "SELECT session_id FROM shardstore.sessions"
                    " WHERE session_id = ANY (%s) AND purged_at IS NULL",
                    (sids,),
                )
            ]
            assert live, point  # the kill came before the purge of every session
            with pytest.raises(KeyShredded):
                store.tail(live[-1])
            # the documented re-run finishes: no row, no key file of the subject
            again = store.purge_subject(TENANT, subject, shred=True)
            assert again.shredded_keys == ()
            assert _kids(dsn, subject) == set()
            assert len(_key_files(tmp_path)) == files_before - 1, point
            assert store.tail(bystander)[0].message["content"] == "stays"
    finally:
        store.close()


def test_a_first_key_created_by_racing_processes_is_one_key(
    dsn: str, tmp_path: Path, forkserver: Any
) -> None:
    store = shardstore.connect(dsn, encryption=_keys(str(tmp_path)), background_fold=False)
    try:
        for point in ("linked", "unlinked-temp", "race"):
            subject = f"new-{point}"
            sids = [store.create_session(TENANT, subject_id=subject) for _ in range(2)]
            go = tmp_path / f"go-{point}"
            marks = [tmp_path / f"mark-{point}-{i}" for i in range(2)]
            racers = 2 if point == "race" else 1
            procs = [
                forkserver.Process(
                    target=_creator,
                    args=(dsn, str(tmp_path), str(sids[i]), point, str(marks[i]), str(go)),
                    daemon=True,
                )
                for i in range(racers)
            ]
            for proc in procs:
                proc.start()
            for proc, mark in zip(procs, marks, strict=False):
                _wait(lambda: mark.exists() or not proc.is_alive(), point)  # noqa: B023
                assert proc.is_alive(), f"the child ended before {point}"
            if point == "race":
                go.write_text("go")
                for proc in procs:
                    proc.join(30)
                    assert proc.exitcode == 0
            else:
                os.kill(procs[0].pid, signal.SIGKILL)
                procs[0].join(30)
                assert procs[0].exitcode == -signal.SIGKILL
                # another process appends to the other session of the subject
                store.append_turn(sids[1], {"role": "user", "content": "after the kill"})
            kids = _kids(dsn, subject)
            assert len(kids) == 1, point  # every row of the subject: one key
            for sid in sids:
                for turn in store.tail(sid):  # and each opens, in a fresh reader too
                    assert turn.message["content"].startswith(("from ", "after the kill"))
            fresh = shardstore.connect(dsn, encryption=_keys(str(tmp_path)))
            try:
                assert [len(fresh.tail(sid)) for sid in sids] == [len(store.tail(s)) for s in sids]
            finally:
                fresh.close()
        # one key file per subject, whatever the kills left
        assert len(_key_files(tmp_path)) == 3
    finally:
        store.close()
