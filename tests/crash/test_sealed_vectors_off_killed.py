"""``configure_sealed_vectors(False)`` SIGKILLed midway, on a database with many vectors of
sealed turns: the parent holds a row lock on one of the vectors it must delete, so the
child's switch blocks inside its DELETE (seen in pg_stat_activity: no timing assumption),
and is killed there. Afterwards either nothing changed (the setting on, every vector there)
or all of it did (off, no vector of a sealed turn), never a part; the vectors of plaintext
turns are untouched either way, and calling it again finishes it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from tests.embedders import HashEmbedder
from tests.encryption.conftest import raw

pytestmark = pytest.mark.slow

TURNS = 160
COUNT = "SELECT count(*) FROM shardstore.chunk_vectors WHERE session_id = %s"
SETTING = "SELECT sealed_vectors FROM shardstore.text_search_config"


def _switch_off(dsn: str) -> None:
    store = shardstore.connect(dsn)
    store.configure_sealed_vectors(False)
    os._exit(0)


def _wait(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def _blocked_switch(dsn: str) -> list[int]:
    rows = raw(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE '%%vec_sealed_vectors_set_v1%%'",
    )
    return [int(r[0]) for r in rows]


def test_a_switch_killed_midway_changes_all_or_nothing_and_a_rerun_finishes(
    dsn: str, tmp_path: Path
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    model = HashEmbedder()
    enc = shardstore.connect(dsn, encryption=keys, embedding_model=model, chunk_tokens=200)
    plain = shardstore.connect(dsn, embedding_model=model, chunk_tokens=200)
    try:
        sealed = enc.create_session("crash-sv", subject_id="pat")
        clear = plain.create_session("crash-sv")
        turns = [{"role": "user", "content": f"shipment {i} left the depot"} for i in range(TURNS)]
        enc.append_turns(sealed, turns)
        plain.append_turns(clear, turns)
        enc.drain_folds()
        plain.drain_folds()
        enc.embed()
        sealed_before = raw(dsn, COUNT, (sealed,))[0][0]
        clear_before = raw(dsn, COUNT, (clear,))[0][0]
        assert sealed_before >= TURNS and clear_before >= TURNS

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["shardstore"])
        with psycopg.connect(dsn) as holder:  # one vector of the last turn, row-locked
            holder.execute(
                "SELECT 1 FROM shardstore.chunk_vectors WHERE session_id = %s"
                " AND first_turn_seq = %s FOR UPDATE",
                (sealed, TURNS - 1),
            )
            proc = ctx.Process(target=_switch_off, args=(dsn,), daemon=True)
            proc.start()
            _wait(lambda: bool(_blocked_switch(dsn)) or not proc.is_alive(), "the blocked switch")
            assert proc.is_alive(), "the switch ended before it reached the locked vector"
            (backend,) = _blocked_switch(dsn)
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(30)
            assert proc.exitcode == -signal.SIGKILL
            holder.rollback()  # the orphaned backend goes on, then finds its client gone
        _wait(
            lambda: not raw(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend,)),
            "the killed client's backend to end",
        )
        ((on,),) = raw(dsn, SETTING)
        left = raw(dsn, COUNT, (sealed,))[0][0]
        assert (on, left) in ((True, sealed_before), (False, 0)), (on, left)
        assert raw(dsn, COUNT, (clear,))[0][0] == clear_before

        enc.configure_sealed_vectors(False)  # the re-run finishes it
        assert raw(dsn, SETTING)[0][0] is False and raw(dsn, COUNT, (sealed,))[0][0] == 0
        assert raw(dsn, COUNT, (clear,))[0][0] == clear_before
    finally:
        enc.close()
        plain.close()
