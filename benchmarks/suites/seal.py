#!/usr/bin/env python
"""One writer's append latency in blocks, as the compare suite measures it, before and after a
migration of the seal's path: 0043 (a sealing append no longer waits for a background fold
or text pass) or 0044 (a sealing append is one UPDATE and one INSERT), or before and after
round 12's counter limit (texts up to 65,536 characters counted by splintr, not 16,384).

    nice -n 10 python -m benchmarks seal [--rounds 7] [--appends 500]
        [--gap-ms 0] [--before seal_without_waiting|seal_in_one_statement]
        [--fast-max-chars-before 16384] [--min-chars 16384]

Two databases on one server: one migrated up to just before ``--before`` (its name), one to
the newest migration; with ``--fast-max-chars-before N`` both are at the newest and the
first store's counter sends texts over N characters to tiktoken. Per round, in an order that
rotates, a block of ``--appends`` single-turn appends of the comparison corpus into a fresh
session of each store (background folds on, drained after the block) and the same messages
as bare INSERTs (the compare suite's floor); ``--gap-ms`` waits that long before each call (an
agent's turns come seconds apart, the compare suite's back to back). Reports per contender the p50
and p99 of each block, and of the appends that sealed a chunk (a new ``chunk_seq``) their
p50 and the share they make of the calls over 1 ms; ratios to the floor are taken block by
block within a round. Medians of per-round values [min-max]. Prints markdown.

``--min-chars N`` appends only the corpus's messages of more than N characters (the large
tool outputs), with splintr's piece cache cleared before every block, so that a message
repeated from an earlier round is counted cold.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

import shardstore
from benchmarks.lib.contenders import FLOOR_DDL, floor_block, limited_counter
from benchmarks.lib.corpus import Corpus
from benchmarks.lib.report import progress, quick
from benchmarks.lib.server import create_database, drop_database, open_server
from benchmarks.lib.stats import pct, spread
from shardstore.schema import migrate

FLOOR = "floor (INSERT)"


def store_block(
    store: shardstore.Store, msgs: list[Any], gap: float, cold: bool = False
) -> tuple[list[float], list[bool]]:
    """Latencies (ms) of appending msgs one call at a time to a fresh session, and which
    calls sealed a chunk."""
    sid = store.create_session("seal", "bench", uuid.uuid4().hex)
    if cold:  # --min-chars: every block counts its messages with a cold piece cache
        fast = shardstore.history.tokens._fast_cl100k()
        if fast is not None:
            fast._encode_flat.__self__.clear_cache()
    lat: list[float] = []
    sealed: list[bool] = []
    last = None
    for m in msgs:
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter_ns()
        r = store.append_turn(sid, m)
        lat.append((time.perf_counter_ns() - t0) / 1e6)
        sealed.append(last is not None and r.chunk_seq != last)
        last = r.chunk_seq
    store.drain_folds()
    return lat, sealed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--appends", type=int, default=500)
    p.add_argument("--gap-ms", type=float, default=0.0, help="pause between calls")
    p.add_argument("--before", default="seal_in_one_statement", help="the migration compared")
    p.add_argument(
        "--fast-max-chars-before",
        type=int,
        default=0,
        help="compare counters instead: the first store's FAST_MAX_CHARS",
    )
    p.add_argument("--min-chars", type=int, default=0, help="only messages longer than this")
    p.add_argument("--dsn", help="a server to use (default: embedded)")
    p.add_argument("--quick", action="store_true", help="2 rounds of 100 calls")
    a = p.parse_args(argv)
    quick(a, p, rounds=2, appends=100)
    gap = a.gap_ms / 1000
    cold = bool(a.min_chars)
    corpus = Corpus(5000)
    if a.min_chars:
        large = [m for m, t in zip(corpus.msgs, corpus.texts, strict=True) if len(t) > a.min_chars]
        corpus.msgs, corpus.n = large, len(large)
    full = migrate.all_migrations()
    migrate.baseline()  # cached now: a shorter list then replays the legacy migrations
    cut = next(i for i, m in enumerate(full) if m.name == a.before)
    limit = a.fast_max_chars_before
    if limit:
        cut = len(full)
        before_settings: dict[str, Any] = {"tokenizer": limited_counter(limit)}
        before_name = f"counter limit {limit:,} chars"
        now = shardstore.TiktokenCounter.FAST_MAX_CHARS
        title = f"the counter's fast-path limit: {limit:,} vs {now:,} characters"
    else:
        before_settings = {}
        before_name = f"before {full[cut].version:04d}"
        title = f"before and after {full[cut].version:04d} ({a.before})"
    with open_server(a.dsn, keep=False) as server:
        before_db = conninfo_to_dict(server.dsn)["dbname"] + "_before"
        before_dsn = create_database(server.admin_dsn, before_db)
        migrate.all_migrations = lambda: full[:cut]  # type: ignore[assignment]
        before = shardstore.connect(before_dsn, **before_settings)
        migrate.all_migrations = lambda: full  # type: ignore[assignment]
        after = shardstore.connect(server.dsn)
        floor = psycopg.connect(server.dsn, autocommit=True)
        floor.execute(FLOOR_DDL)
        blocks: dict[str, Callable[[list[Any]], tuple[list[float], list[bool]]]] = {
            before_name: lambda msgs: store_block(before, msgs, gap, cold),
            f"{full[-1].version:04d} (newest)": lambda msgs: store_block(after, msgs, gap, cold),
            FLOOR: lambda msgs: floor_block(floor, msgs, gap),
        }
        for run in blocks.values():  # warm-up: plans, prepared statements, first fold
            run([corpus.msgs[i] for i in corpus.take(50)])
        res: dict[str, dict[str, list[float]]] = {n: {} for n in blocks}
        for r in range(a.rounds):
            names = list(blocks)
            names = names[r % len(names) :] + names[: r % len(names)]
            msgs = [corpus.msgs[i] for i in corpus.take(a.appends)]
            got: dict[str, tuple[list[float], list[bool]]] = {}
            for name in names:
                got[name] = blocks[name](msgs)
            for name, (lat, sealed) in got.items():
                out = res[name]
                seals = [x for x, s in zip(lat, sealed, strict=True) if s]
                slow = [s for x, s in zip(lat, sealed, strict=True) if x > 1.0]
                out.setdefault("p50", []).append(pct(lat, 50))
                out.setdefault("p99", []).append(pct(lat, 99))
                out.setdefault("p99/floor", []).append(pct(lat, 99) / pct(got[FLOOR][0], 99))
                if seals:
                    out.setdefault("seal p50", []).append(statistics.median(seals))
                    out.setdefault("seals", []).append(len(seals))
                    out.setdefault("slow sealing", []).append(
                        sum(slow) / len(slow) if slow else 0.0
                    )
            progress(f"round {r + 1}/{a.rounds}")
        before.close()
        after.close()
        floor.close()
        drop_database(server.admin_dsn, before_db)
    print(f"# A sealing append, {title}\n")
    flag = f"--fast-max-chars-before {limit}" if limit else f"--before {a.before}"
    only = ""
    if a.min_chars:
        flag += f" --min-chars {a.min_chars}"
        only = (
            f"only the corpus's {corpus.n} messages of more than {a.min_chars:,} characters,"
            " splintr's piece cache cleared before each block; "
        )
    print(
        f"`python -m benchmarks seal --rounds {a.rounds} --appends {a.appends}"
        f" --gap-ms {a.gap_ms:g} {flag}`; {only}one"
        " writer, blocks of single-turn appends of the comparison corpus (a pause of"
        f" {a.gap_ms:g} ms before each call), background folds on; medians of per-round"
        " values [min-max]; ms.\n"
    )
    print(
        "| contender | p50 | p99 | p99 / floor p99 | sealing calls | their p50"
        " | share of calls > 1 ms that sealed |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, out in res.items():
        seal = (
            (spread(out["seals"], 0), spread(out["seal p50"]), spread(out["slow sealing"], 2))
            if "seals" in out
            else ("–", "–", "–")
        )
        print(
            f"| {name} | {spread(out['p50'])} | {spread(out['p99'])} |"
            f" {spread(out['p99/floor'], 2)} | {seal[0]} | {seal[1]} | {seal[2]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
