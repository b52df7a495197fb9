"""The newest chunks of a long session, and stats(), old path vs new (migration 0028).

    nice -n 10 python -m benchmarks long-reads [--turns 100000] [--rounds 7] [--calls 30]

Loads one session of ``--turns`` turns (``import_jsonl``, past times over 500 hours of
1-hour partitions, as the scale suite) plus a few hundred short sessions, then
measures, interleaved round by round on the same store so machine noise hits both:

* "last 10 chunks": ``chunks(last=10)`` + ``history(from_seq)`` (the scale run's read),
  new (chunk_list_v1 + history_range_v1: two statements) against the general path of
  before (session_get, chunk_map_since, buffer_chunks, chunk_meta in one snapshot, then
  session_get, chunk_map_from, buffer_turns, chunk_texts in another: 12 round trips);
* ``stats()``'s per-partition row count: the statement of before (agent_history grouped by
  a per-row partition name) against chunk_map grouped by partition start.

Prints medians of per-round p50s with [min-max] ranges and the new/old ratios; writes
``benchmarks/results/long_reads.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.jsonl import (
    INTERVAL,
    LineStream,
    Messages,
    Plan,
    long_lines,
    plan_lines,
    premake_past,
)
from benchmarks.lib.report import progress, quick, write_results
from benchmarks.lib.server import open_server
from benchmarks.lib.stats import spread
from shardstore.core.executor import run_sync, stream_sync
from shardstore.core.sql import query
from shardstore.core.steps import Tx
from shardstore.history import ops as h

OLD_PARTITION_ROWS = """
SELECT shardstore.maint_partition_name_v1(date_bin(c.partition_interval, h.chunk_start,
                                                   c.partition_origin)), count(*)
  FROM shardstore.agent_history h CROSS JOIN shardstore.config c
 GROUP BY 1"""


def old_chunks_op(sid: uuid.UUID, last: int) -> Any:
    """chunks(last=) as before 0028 (history.chunks' general path)."""
    yield Tx.BEGIN_SNAPSHOT
    head = yield from h._head_op(sid, live=True)
    open_seq, open_turns = head["open_chunk_seq"], head["open_turns"]
    newest = open_seq if open_turns else open_seq - 1
    first = max(0, newest - last + 1)
    merged: dict[int, Any] = {}
    for seg in (yield from h.segments_op(sid, head)):
        upper = newest + 1 if seg.chunk_hi is None else min(newest + 1, seg.chunk_hi)
        if max(first, seg.chunk_lo) < upper:
            merged.update((yield from h._segment_chunks_op(seg, max(first, seg.chunk_lo), upper)))
    yield Tx.COMMIT
    return [merged[s] for s in sorted(merged)]


def old_history_op(store: Any, sid: uuid.UUID, lo: int) -> Any:
    """history(from_seq) as before 0028 (history.history's general path)."""
    yield Tx.BEGIN_SNAPSHOT
    head = yield from h._head_op(sid, live=True)
    end = head["turn_count"]
    for seg in reversed((yield from h.segments_op(sid, head))):
        yield from h._history_segment_op(store, seg, lo, end, False)
    yield Tx.COMMIT
    return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--dsn", help="a server to use (default: embedded)")
    ap.add_argument("--out", help="write OUT.md")
    ap.add_argument(
        "--quick", action="store_true", help="a 3,000-turn session + 20 x 100, 2 rounds of 5"
    )
    args = ap.parse_args(argv)
    quick(args, ap, turns=3_000, sessions=20, rounds=2, calls=5)
    msgs = Messages()
    plan = Plan(args.sessions, 100, args.turns, 500, datetime.now(UTC) - timedelta(hours=2))
    with open_server(args.dsn, keep=False) as server:  # noqa: SIM117 (the store needs its dsn)
        with shardstore.connect(server.dsn, partition_interval=INTERVAL) as store:
            premake_past(server.dsn, plan)
            progress(f"importing a {args.turns:,}-turn session + {args.sessions} x 100 turns")
            t0 = time.perf_counter()
            store.import_jsonl(LineStream(long_lines(msgs, plan)), batch_size=500)
            store.import_jsonl(LineStream(plan_lines(msgs, plan, 0, args.sessions)), batch_size=500)
            progress(f"  loaded in {time.perf_counter() - t0:.0f} s")
            store.maintain(embed=False)
            sid = plan.long_sid()
            st = store.stats()
            conn_src = store.connector
            res: dict[str, list[float]] = {
                k: [] for k in ("new", "old", "ratio", "s_new", "s_old", "s_ratio")
            }
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                for r in range(args.rounds):
                    per: dict[str, float] = {}
                    order = ["new", "old"] if r % 2 == 0 else ["old", "new"]
                    for which in order:
                        times = []
                        for _ in range(args.calls):
                            t0 = time.perf_counter()
                            if which == "new":
                                last = store.chunks(sid, last=10)
                                got = list(store.history(sid, last[0].first_turn_seq))
                            else:
                                last = run_sync(conn_src, old_chunks_op(sid, 10))
                                got = list(
                                    stream_sync(
                                        conn_src, old_history_op(store, sid, last[0].first_turn_seq)
                                    )
                                )
                            times.append((time.perf_counter() - t0) * 1000)
                            assert got and got[-1].turn_seq == args.turns - 1
                        per[which] = statistics.median(times)
                        stimes = []
                        sql = (
                            query("stats_partition_rows") if which == "new" else OLD_PARTITION_ROWS
                        )
                        for _ in range(5):
                            t0 = time.perf_counter()
                            rows = dict(conn.execute(sql).fetchall())
                            stimes.append((time.perf_counter() - t0) * 1000)
                        per["s_" + which] = statistics.median(stimes)
                        per.setdefault("rows_" + which, sum(rows.values()))
                    assert per["rows_new"] == per["rows_old"], per
                    for k in ("new", "old", "s_new", "s_old"):
                        res[k].append(per[k])
                    res["ratio"].append(per["new"] / per["old"])
                    res["s_ratio"].append(per["s_new"] / per["s_old"])
                    progress(f"round {r}: {per}")
            lines = [
                "# Long-session reads and stats' row count, old path vs new (migration 0028)",
                "",
                f"`nice -n 10 python -m benchmarks long-reads --turns {args.turns}`: one "
                f"{args.turns:,}-turn session + {args.sessions} x 100 turns, "
                f"{len(st.partitions)} one-hour partitions, {st.chunks:,} chunk rows, "
                "embedded PostgreSQL 18 on a shared 2-core machine. Per round the p50 of "
                f"{args.calls} calls (5 for the row count), old and new interleaved; medians "
                f"over {args.rounds} rounds with [min–max].",
                "",
                "| measure | old ms | new ms | new / old |",
                "|---|---:|---:|---:|",
                "| last 10 chunks: chunks(last=10) + history(from_seq) | "
                f"{spread(res['old'], 2)} | {spread(res['new'], 2)} | {spread(res['ratio'], 2)} |",
                f"| stats(): chunk rows per partition | {spread(res['s_old'], 2)} | "
                f"{spread(res['s_new'], 2)} | {spread(res['s_ratio'], 2)} |",
                "",
            ]
            text = "\n".join(lines)
            print(text)
            if args.out:
                write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
