"""Chunk summaries (migration 0012): folds queue sealed chunks, summarize() fills them with
the user's summarizer (a stub here), history never changes, rewinds and range purges drop
and re-queue what they rewrite, purges remove summaries; hostile answers write nothing;
several workers never summarise one chunk twice; a worker SIGKILLed mid-call leaves
nothing half written and the chunk queued."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.cli.app import main
from shardstore.models import Turn

# default_tail_turns=1: every sealed chunk folds, and so is queued, at the append that seals
# it (with the default window the chunks holding the newest 20 turns wait in the buffer
# for a later fold: 0035 for turn-by-turn appends, 0040 for batches)
SMALL = {"chunk_tokens": 300, "default_tail_turns": 1}


def stub(turns: list[Turn]) -> str:
    """A deterministic summarizer: the turn range and the first words."""
    return f"turns {turns[0].turn_seq}..{turns[-1].turn_seq}: {turns[0].message['content'][:24]}"


def say(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} " * 3}


def queued(dsn: str, sid: uuid.UUID) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT chunk_seq FROM shardstore.summary_queue WHERE session_id = %s ORDER BY 1",
            (sid,),
        ).fetchall()
    return [r[0] for r in rows]


def sealed_chunks(store: shardstore.Store, sid: uuid.UUID) -> list[shardstore.Chunk]:
    return [c for c in store.chunks(sid) if not c.is_open]


def ranges(store: shardstore.Store, sid: uuid.UUID) -> list[tuple[int, int, int]]:
    return [(s.chunk_seq, s.first_turn_seq, s.last_turn_seq) for s in store.summaries(sid)]


def chunk_ranges(chunks: list[shardstore.Chunk]) -> list[tuple[int, int, int]]:
    return [(c.chunk_seq, c.first_turn_seq, c.first_turn_seq + c.turn_count - 1) for c in chunks]


@pytest.mark.slow
def test_lifecycle_fold_queue_summarize(make_store: Any, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("t1")
    store.append_turns(sid, [say(i) for i in range(60)])
    store.drain_folds()
    sealed = sealed_chunks(store, sid)
    assert len(sealed) >= 3
    assert queued(dsn, sid) == [c.chunk_seq for c in sealed]  # the folds queued them
    before = list(store.history(sid))
    store.flush(sid)  # queues the open chunk too; it is not summarised while open
    assert store.summarize(stub) == len(sealed)
    assert ranges(store, sid) == chunk_ranges(sealed)
    assert list(store.history(sid)) == before  # summaries never replace turns
    first = store.summaries(sid)[0]
    assert first.text.startswith("turns 0..") and first.model == "stub" and first.tokens > 0
    assert store.summarize(stub) == 0  # nothing left that is sealed
    # the open chunk is summarised once sealed (it was fully flushed: no fold moves it)
    store.append_turns(sid, [say(i) for i in range(60, 90)])
    store.drain_folds()
    assert store.summarize(stub) >= 1
    assert ranges(store, sid) == chunk_ranges(sealed_chunks(store, sid))


def test_rewind_drops_and_requeues(make_store: Any, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("t1")
    store.append_turns(sid, [say(i) for i in range(60)])
    store.drain_folds()
    store.summarize(stub)
    sealed = sealed_chunks(store, sid)
    cut_chunk = sealed[1]
    cut = cut_chunk.first_turn_seq + 2  # mid chunk: it is rewritten and becomes the open chunk
    store.rewind(sid, cut)
    assert ranges(store, sid) == chunk_ranges(sealed[:1])  # its summary and later ones gone
    assert cut_chunk.chunk_seq in queued(dsn, sid)  # re-queued (it waits: it is open now)
    assert store.summarize(stub) == 0
    # sealed again by a turn that does not fit, with no more turns into it: summarised
    store.append_turn(sid, {"role": "user", "content": "big " * 400})
    store.drain_folds()
    assert store.summarize(stub) == 1
    assert (cut_chunk.chunk_seq, cut_chunk.first_turn_seq, cut - 1) in ranges(store, sid)


@pytest.mark.slow
def test_range_purge_drops_and_requeues_and_purge_removes(make_store: Any, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("t1")
    store.append_turns(sid, [say(i) for i in range(60)])
    store.drain_folds()
    store.summarize(stub)
    sealed = sealed_chunks(store, sid)
    cut = sealed[1].first_turn_seq + 2
    store.purge_range(sid, before_turn_seq=cut)
    kept = ranges(store, sid)
    assert all(first >= cut for _, first, _ in kept)  # no summary covers a purged turn
    assert sealed[1].chunk_seq not in [c for c, _, _ in kept]
    assert sealed[1].chunk_seq in queued(dsn, sid)
    assert store.summarize(stub) == 1
    assert (sealed[1].chunk_seq, cut, sealed[1].first_turn_seq + sealed[1].turn_count - 1) in (
        ranges(store, sid)
    )
    store.purge_session(sid)
    with psycopg.connect(dsn) as conn:
        for table in ("chunk_summaries", "summary_queue"):
            row = conn.execute(
                f"SELECT count(*) FROM shardstore.{table} WHERE session_id = %s", (sid,)
            ).fetchone()
            assert row == (0,), table


def test_hostile_input_writes_nothing(make_store: Any, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("t1")
    store.append_turns(sid, [say(i) for i in range(40)])
    store.drain_folds()
    waiting = queued(dsn, sid)
    answers: list[Any] = ["", "   ", None, 5, b"bytes", "nul\x00", "x" * 200_001, "\ud800"]
    for answer in answers:
        with pytest.raises(shardstore.InvalidInput):
            store.summarize(lambda turns, a=answer: a)
    for bad in ("not callable", None, 42):
        with pytest.raises(shardstore.InvalidInput):
            store.summarize(bad)  # type: ignore[arg-type]
    for kwargs in ({"limit": 0}, {"limit": -1}, {"session_id": "nope"}, {"progress": "yes"}):
        with pytest.raises(shardstore.InvalidInput):
            store.summarize(stub, **kwargs)

    def boom(turns: list[Turn]) -> str:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        store.summarize(boom)
    assert store.summaries(sid) == [] and queued(dsn, sid) == waiting
    with pytest.raises(shardstore.SessionNotFound):
        store.summaries(uuid.uuid4())
    for bad_id in ("nope", 42, None):
        with pytest.raises(shardstore.InvalidInput):
            store.summaries(bad_id)  # type: ignore[arg-type]
    # a session with nothing queued (an unknown one too, as embed()): 0, no model call
    assert store.summarize(boom, session_id=uuid.uuid4()) == 0
    assert store.summaries(sid) == [] and queued(dsn, sid) == waiting
    assert store.summarize(stub, session_id=sid, limit=1) == 1


@pytest.mark.slow
def test_workers_never_summarise_a_chunk_twice(make_store: Any) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("t1")
    store.append_turns(sid, [say(i) for i in range(120)])
    store.drain_folds()
    calls: list[int] = []
    lock = threading.Lock()

    def slow(turns: list[Turn]) -> str:
        with lock:
            calls.append(turns[0].turn_seq)
        time.sleep(0.02)
        return stub(turns)

    counts: list[int] = []
    workers = [
        threading.Thread(target=lambda: counts.append(store.summarize(slow))) for _ in range(3)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    sealed = sealed_chunks(store, sid)
    assert sum(counts) == len(sealed) == len(calls) == len(set(calls))


def test_async_and_coroutine_summarizers(dsn: str) -> None:
    async def summarise(turns: list[Turn]) -> str:
        await asyncio.sleep(0)
        return stub(turns)

    sync = shardstore.connect(dsn, **SMALL)
    sid = sync.create_session("t1")
    sync.append_turns(sid, [say(i) for i in range(60)])
    sync.drain_folds()
    assert sync.summarize(summarise, limit=1) == 1  # a coroutine function, sync store

    async def go() -> tuple[int, list[Any]]:
        astore = await shardstore.connect_async(dsn, **SMALL)
        try:
            n = await astore.summarize(summarise)
            return n, await astore.summaries(sid)
        finally:
            await astore.close()

    n, found = asyncio.run(go())
    assert n >= 1 and found == sync.summaries(sid)
    sync.close()


WORKER = """
import sys, time, pathlib, shardstore
store = shardstore.connect(sys.argv[1], chunk_tokens=300, background_fold=False)
marker = pathlib.Path(sys.argv[2])
def hang(turns):
    marker.write_text(str(turns[0].turn_seq))
    time.sleep(600)
    return "never"
store.summarize(hang)
"""


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(2))
def test_worker_killed_mid_summary(make_store: Any, dsn: str, tmp_path: Path, round_: int) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("t1")
    store.append_turns(sid, [say(i) for i in range(60)])
    store.drain_folds()
    waiting = queued(dsn, sid)
    if round_:
        store.summarize(stub, limit=1)  # one stored before; the killed worker holds the next
    marker = tmp_path / "claimed"
    proc = subprocess.Popen([sys.executable, "-c", WORKER, dsn, str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(store.summaries(sid)) == round_  # nothing half written
    assert queued(dsn, sid) == waiting[round_:]  # the chunk it held is still queued
    time.sleep(0.2)  # the killed backend's locks go with its connection
    assert store.summarize(stub) == len(waiting) - round_
    assert ranges(store, sid) == chunk_ranges(sealed_chunks(store, sid))


def test_cli_summarize_command(make_store: Any, capsys: Any) -> None:
    store = make_store(default_tail_turns=1)
    sid = store.create_session("t1")
    big = [{"role": "user", "content": f"turn {i} " + "word " * 300} for i in range(40)]
    store.append_turns(sid, big)
    store.drain_folds()
    script = (
        f'{sys.executable} -c "import json,sys; t=json.load(sys.stdin); '
        "print('summary of', len(t), 'turns from', t[0]['turn_seq'])\""
    )
    assert main(["--dsn", store.dsn or "", "summarize", "--command", script]) == 0
    assert "summarized" in capsys.readouterr().out
    found = store.summaries(sid)
    assert (
        found and found[0].text.startswith("summary of") and found[0].model.startswith("command:")
    )
    failing = f'{sys.executable} -c "import sys; sys.exit(3)"'
    store.append_turns(sid, big)
    store.drain_folds()
    assert main(["--dsn", store.dsn or "", "summarize", "--command", failing]) == 2
    assert "status 3" in capsys.readouterr().err
