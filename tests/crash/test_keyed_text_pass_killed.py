"""The client's text pass over sealed turns (encryption at rest, docs/decisions/0025) killed
in the middle of a batch: a child process runs a search whose pass indexes two turns per
transaction and is SIGKILLed inside its third batch, after the lexemes came back and before
the windows were written (it writes a marker there and blocks until the parent, which waits
for the marker, kills it: no timing assumption). Afterwards exactly the turns of the two
committed batches have windows, each once; the next search indexes the rest and finds every
turn, each indexed once."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.encryption import search as lexeme_hashes
from shardstore.search import keyed
from tests.encryption.conftest import raw

pytestmark = pytest.mark.slow

TURNS = 9


def _keys(key_dir: str) -> LocalKeyProvider:
    return LocalKeyProvider(Path(key_dir) / "store", key_file=Path(key_dir) / "kek")


def _searcher(dsn: str, key_dir: str, sid: str, mark: str) -> None:
    """A text search whose pass takes two turns a batch, stopped inside the third batch."""
    keyed.PASS_BATCH = 2
    hashed = lexeme_hashes.window_hashes
    calls = [0]

    def held(key: Any, words: Any) -> list[int]:
        calls[0] += 1
        if calls[0] == 5:  # the first turn of the third batch
            Path(mark).write_text("inside")
            while True:  # the parent kills us here
                signal.pause()
        return hashed(key, words)

    lexeme_hashes.window_hashes = held  # this child only
    store = shardstore.connect(dsn, encryption=_keys(key_dir))
    store.search("anything", session_id=sid, mode="text")
    os._exit(0)


def _wait(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def _windows(dsn: str, sid: Any) -> tuple[int, int]:
    ((rows, turns),) = raw(
        dsn,
        "SELECT count(*), count(DISTINCT turn_seq) FROM shardstore.turn_text WHERE session_id = %s",
        (sid,),
    )
    return int(rows), int(turns)


def test_a_pass_killed_in_a_batch_leaves_whole_turns_and_the_next_finishes(
    dsn: str, tmp_path: Path
) -> None:
    store = shardstore.connect(dsn, encryption=_keys(str(tmp_path)))
    try:
        sid = store.create_session("t", subject_id="pat")
        store.append_turns(
            sid, [{"role": "user", "content": f"parcel number {i} arrived"} for i in range(TURNS)]
        )
        store.drain_folds()
        assert _windows(dsn, sid) == (0, 0)  # the server indexes no sealed turn
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["shardstore", "tests.crash.test_keyed_text_pass_killed"])
        mark = tmp_path / "mark"
        proc = ctx.Process(
            target=_searcher, args=(dsn, str(tmp_path), str(sid), str(mark)), daemon=True
        )
        proc.start()
        _wait(lambda: mark.exists() or not proc.is_alive(), "the third batch")
        assert proc.is_alive(), "the child ended before the third batch"
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL
        assert _windows(dsn, sid) == (4, 4)  # two whole batches, nothing of the third
        hits = store.search("parcel number 7", session_id=sid, mode="text")
        assert hits and hits[0].turns[-1].message["content"] == "parcel number 7 arrived"
        assert _windows(dsn, sid) == (TURNS, TURNS)
    finally:
        store.close()
