#!/usr/bin/env python
"""Which calls make the p99 of the compare suite's blocks of single-turn appends (issue 14 goal 1).

    python -m benchmarks.probes.block_p99 --dsn DSN [--variant store|nofold|procfold|insert]
        [--rounds 4] [--appends 500] [--fast-max-chars N]

After a warm-up of 50 appends, per round a fresh session in the database ``DSN`` names gets
``--appends`` single-turn appends of the compare suite's corpus back to back, then the background
folds are drained. Each call is classed by what came just before it: a sealing call (a new
``chunk_seq``), the first and second call after a seal, the call after a turn that handed
the session to the folder for its text pass (every ``TEXT_INDEX_EVERY`` turns), and the
rest. Prints per block the p50 and p99, the p50 of each class, the rest's p99, and the 12
slowest calls with their class (S sealing, A / B first / second after a seal, T after a text
pass, - the rest).

Variants: ``store`` as the store runs (background folder thread); ``nofold`` never folds (the
folder's submissions dropped: what the writer costs alone); ``procfold`` folds in a second
process instead of a thread (whether the folder's share of the GIL matters); ``insert`` the
bare INSERT of the compare suite's floor. ``--fast-max-chars N`` sets the counter's splintr limit.
A probe: its numbers are quoted in docs/architecture.md "Round 12", not a benchmark of
record (the seal suite is that).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.contenders import FLOOR_DDL, floor_block, limited_counter
from benchmarks.lib.corpus import Corpus
from benchmarks.lib.stats import pct
from shardstore.history.ops import TEXT_INDEX_EVERY, fold_sealed_op


def _fold_worker(jobs: Any, done: Any, dsn: str) -> None:
    store = shardstore.connect(dsn, background_fold=False)
    keep = store.ctx.settings.default_tail_turns
    while True:
        job = jobs.get()
        if job is None:
            break
        if job == "drain":
            done.set()
            continue
        store._run(fold_sealed_op(job, keep))
    store.close()


def insert_rounds(dsn: str, corpus: Corpus, rounds: int, appends: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench.floor")  # the probe's own, from a run before
        conn.execute(FLOOR_DDL)
        for _ in range(rounds):
            lat, _sealed = floor_block(conn, [corpus.msgs[i] for i in corpus.take(appends)], 0)
            print(f"insert p50 {pct(lat, 50):.3f} p99 {pct(lat, 99):.3f}")


def report(variant: str, lat: list[float], chunks: list[int], seqs: list[int]) -> None:
    """One block's line: p50, p99, each class's p50, the rest's p99, the slowest calls."""
    n = len(lat)
    sealing = {i for i in range(1, n) if chunks[i] != chunks[i - 1]}
    after = {i + 1 for i in sealing if i + 1 < n}
    after2 = {i + 2 for i in sealing if i + 2 < n} - sealing - after
    every = TEXT_INDEX_EVERY
    text = {i + 1 for i in range(n - 1) if every and seqs[i] % every == every - 1}
    text -= sealing | after | after2
    rest = [i for i in range(n) if i not in sealing | after | after2 | text]
    classes = (("S", sealing), ("A", after), ("B", after2), ("T", text))

    def med(idx: set[int] | list[int]) -> float:
        return statistics.median(lat[i] for i in idx) if idx else float("nan")

    def cls(i: int) -> str:
        return next((mark for mark, group in classes if i in group), "-")

    print(
        f"{variant} p50 {pct(lat, 50):.3f} p99 {pct(lat, 99):.3f} | seals"
        f" {len(sealing)} p50 {med(sealing):.3f} | after a seal {med(after):.3f}, second"
        f" {med(after2):.3f} | after a text pass {med(text):.3f} | rest p50 {med(rest):.3f}"
        f" p99 {pct([lat[i] for i in rest], 99):.3f}"
    )
    slowest = sorted(range(n), key=lambda i: -lat[i])[:12]
    print("   slowest:", [(round(lat[i], 2), cls(i)) for i in slowest])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn", required=True)
    p.add_argument("--variant", default="store", choices=["store", "nofold", "procfold", "insert"])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--appends", type=int, default=500)
    p.add_argument("--fast-max-chars", type=int, default=0)
    a = p.parse_args(argv)
    corpus = Corpus(2000)
    if a.variant == "insert":
        insert_rounds(a.dsn, corpus, a.rounds, a.appends)
        return
    settings: dict[str, Any] = {}
    if a.fast_max_chars:
        settings["tokenizer"] = limited_counter(a.fast_max_chars)
    store = shardstore.connect(a.dsn, **settings)
    folder: Any = store.background_folder
    drain = folder.drain
    proc = None
    if a.variant == "nofold":
        folder.submit = lambda sid: None
    elif a.variant == "procfold":
        mp = multiprocessing.get_context("fork")
        jobs, done = mp.Queue(), mp.Event()
        proc = mp.Process(target=_fold_worker, args=(jobs, done, a.dsn))
        proc.start()
        folder.submit = jobs.put

        def drain() -> None:
            done.clear()
            jobs.put("drain")
            done.wait()

    warm = store.create_session("p99", "probe", uuid.uuid4().hex)
    for i in corpus.take(50):  # plans, prepared statements, the counter's tables
        store.append_turn(warm, corpus.msgs[i])
    drain()
    for _ in range(a.rounds):
        sid = store.create_session("p99", "probe", uuid.uuid4().hex)
        lat: list[float] = []
        chunks: list[int] = []
        seqs: list[int] = []
        for i in corpus.take(a.appends):
            t0 = time.perf_counter()
            r = store.append_turn(sid, corpus.msgs[i])
            lat.append((time.perf_counter() - t0) * 1000)
            chunks.append(r.chunk_seq)
            seqs.append(r.turn_seq)
        drain()
        report(a.variant, lat, chunks, seqs)
    store.close()
    if proc is not None:
        jobs.put(None)
        proc.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
