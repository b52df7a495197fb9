"""Everything at once for a bounded time: 16 writer threads on one session, 16 on their own
sessions, maintenance in a loop (which embeds too), two embedding workers, purges of other
sessions in a loop, and readers (searches among them), on 1-second partitions (so folds
and maintenance create partitions all the while). Then: no deadlock, no error, no lost or
duplicated turn, every invariant of tests.faults holds, vectors included."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import shardstore
from tests.embedders import HashEmbedder
from tests.faults import (
    Expected,
    batch_key,
    check_api,
    check_database,
    check_vectors,
    message,
)

# every turn written in this time is embedded at the end (the final maintain), and that
# costs far more than the writing: 6 s of writers still cross six one-second partitions; a
# soak run sets a longer time
DURATION = float(os.environ.get("SHARDSTORE_CONCURRENCY_SECONDS", "6"))
SHARED_WRITERS = 16
OWN_WRITERS = 16
EMBEDDERS = 2


def _stack_of(thread: threading.Thread) -> str:
    """Where a thread is now (to tell a deadlock from a slow step)."""
    frame = sys._current_frames().get(thread.ident or -1)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(gone)"


@pytest.mark.slow
def test_everything_at_once(make_store: Callable[..., shardstore.Store], tmp_path: Path) -> None:
    settings: dict[str, Any] = {
        "chunk_tokens": 300,
        "partition_interval": timedelta(seconds=1),
        "premake": 2,
        "pool_max_size": 48,
        # a small dimension: every turn's vector is formatted, sent and put in the HNSW index
        # at the end, and this test checks which turns have vectors, not how they rank
        "embedding_model": HashEmbedder(dimension=32),
    }
    store = make_store(**settings)
    budget = store.settings.budget_tokens
    shared = str(store.create_session("conc", "user:shared"))
    own = [str(store.create_session("conc", f"user:{i}")) for i in range(OWN_WRITERS)]
    stop = threading.Event()
    errors: list[str] = []
    counts: dict[str, int] = {}
    purged: list[str] = []
    logs: dict[str, str] = {}

    def guard(name: str, body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except BaseException as exc:  # any error fails the test
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                stop.set()

        return run

    def writer(prefix: str, sid: str) -> Callable[[], None]:
        path = str(tmp_path / f"{prefix}.log")
        logs[prefix] = path

        def body() -> None:
            # the writer log format of tests.faults: B (begun) then A (acknowledged)
            with open(path, "a") as log:
                i = 0
                while not stop.is_set():
                    n = 1 + (i * 5) % 6
                    msgs = [message(prefix, i, j) for j in range(n)]
                    keys: list[str | None] = [batch_key(prefix, i, j) for j in range(n)]
                    log.write(f"B {i} {sid} {n}\n")
                    log.flush()
                    if n == 1:
                        res = [store.append_turn(sid, msgs[0], idempotency_key=keys[0])]
                    else:
                        res = store.append_turns(sid, msgs, keys)
                    if i % 7 == 3:  # a client that lost the answer repeats the batch
                        again = store.append_turns(sid, msgs, keys)
                        assert [r.turn_seq for r in again] == [r.turn_seq for r in res]
                        assert all(r.duplicate for r in again)
                    log.write(f"A {i} 0 {','.join(str(r.turn_seq) for r in res)}\n")
                    log.flush()
                    i += 1
                counts[prefix] = i

        return body

    def maintainer() -> None:
        runs = 0
        while not stop.is_set():
            # the embedding workers keep up with the writers; maintenance embeds at the end
            report = store.maintain(
                flush_idle=timedelta(milliseconds=200),
                lock_timeout=timedelta(milliseconds=200),
                embed=False,
            )
            assert report.already_running or not report.errors, report.errors
            runs += 1
            time.sleep(0.05)
        counts["maintenance_runs"] = runs

    def purger() -> None:
        done = 0
        while not stop.is_set():
            victim = store.create_session("conc", f"victim:{done % 3}")
            store.append_turns(victim, [message("v", done, j) for j in range(30)])
            store.append_turn(victim, message("v", done, 99), idempotency_key=f"v{done}")
            if done % 4 == 3:
                report = store.purge_subject("conc", f"victim:{done % 3}")
                purged.extend(str(s) for s in report.session_ids)
            else:
                store.purge_session(victim)
                purged.append(str(victim))
            done += 1
        counts["purges"] = done

    def embedder(worker: shardstore.Store, name: str) -> Callable[[], None]:
        def body() -> None:
            embedded = 0
            while not stop.is_set():
                # bounded, so the loop sees stop: embed() alone drains the whole queue
                embedded += worker.embed(batch_size=4, limit=8)
                time.sleep(0.02)
            counts[name] = embedded

        return body

    def reader() -> None:
        reads = 0
        while not stop.is_set():
            store.search("message", tenant_id="conc", k=3)
            store.search("message", session_id=shared, k=3)
            store.tail(shared, max_tokens=2000)
            turns = list(store.history(own[reads % OWN_WRITERS]))
            assert [t.turn_seq for t in turns] == list(range(len(turns)))
            store.chunks(shared, last=5)
            reads += 1
        counts["reads"] = reads

    threads = [
        threading.Thread(target=guard(f"shared{i}", writer(f"s{i}", shared)))
        for i in range(SHARED_WRITERS)
    ]
    threads += [
        threading.Thread(target=guard(f"own{i}", writer(f"o{i}", own[i])), name=f"own{i}")
        for i in range(OWN_WRITERS)
    ]
    threads += [
        threading.Thread(target=guard("maintain", maintainer), name="maintain"),
        threading.Thread(target=guard("purge", purger), name="purge"),
        threading.Thread(target=guard("reader", reader), name="reader"),
    ]
    threads += [
        threading.Thread(
            target=guard(f"embed{i}", embedder(make_store(**settings), f"embedded{i}")),
            name=f"embed{i}",
        )
        for i in range(EMBEDDERS)
    ]
    for t in threads:
        t.start()
    stop.wait(DURATION)
    stop.set()
    for t in threads:
        # generous: on 2 cores shared with a second full test run, one embedder statement
        # waited behind purges and maintenance for over 60 s (twice); a deadlock never ends
        t.join(180)
        assert not t.is_alive(), f"thread {t.name} is stuck (deadlock?):\n{_stack_of(t)}"
    assert not errors, errors
    store.drain_folds()

    expected = Expected(logs, budget, purged=set(purged))
    rep = check_database(str(store.dsn), expected, final=True)
    check_api(store, str(store.dsn), [shared, *own])
    assert counts["maintenance_runs"] > 0 and counts["purges"] > 0 and counts["reads"] > 0
    assert rep.acked_turns > 0
    assert sum(counts[f"embedded{i}"] for i in range(EMBEDDERS)) > 0
    check_vectors(str(store.dsn), set(purged), complete=False)
    store.maintain(flush_idle=timedelta(0))  # fold everything, then embed what is queued
    vectors = check_vectors(str(store.dsn), set(purged), complete=True)
    assert vectors > 0
    print(f"\nconcurrency: {rep.acked_turns} turns acknowledged, counts {counts}, {rep}")
