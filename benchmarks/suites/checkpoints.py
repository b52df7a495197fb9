"""Checkpoints: stored size and latency against the history length, the cost of a checkpoint
riding on an append, and LangGraph's PostgresSaver on the same conversation.

    python -m benchmarks checkpoints [--dsn DSN] [--quick] [--out FILE.md]

Measures, on one server and in one process:
* checkpoint bytes (pg_column_size of the row) and ``checkpoint()`` p50 with 10, 1,000 and
  10,000 (``--big``: 100,000) turns of history: flat;
* ``append_turn(..., checkpoint=state)`` p50 against ``append_turn`` alone and against
  ``append_turn`` + ``checkpoint()`` (two calls), interleaved in rounds so that all three
  see the same server state;
* bytes per checkpoint of LangGraph's PostgresSaver (langgraph-checkpoint-postgres) at
  1,000 turns, where every checkpoint carries the message list (a new blob per step);
* ``fork()`` p50 (median of 3 rounds, with their range) at the smallest and largest history
  length, and the rows it writes besides the session row: flat (``--only length,fork``
  runs just these two tables).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.corpus import make_messages
from benchmarks.lib.report import progress, write_results
from benchmarks.lib.server import open_server

STATE = {
    "plan": ["look up the order", "check the refund policy", "answer"],
    "step": 3,
    "scratch": {"order_id": "A-1234", "notes": "customer asked twice " * 8},
}


def p50(values: list[float]) -> float:
    return statistics.median(values) * 1000.0


def fill(store: shardstore.Store, sid: Any, messages: list[dict[str, Any]]) -> None:
    for start in range(0, len(messages), 500):
        store.append_turns(sid, messages[start : start + 500])
    store.drain_folds()


def checkpoint_rows(dsn: str, sid: Any) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [
            int(r[0])
            for r in conn.execute(
                "SELECT pg_column_size(c.*) FROM shardstore.checkpoints c WHERE session_id = %s",
                (sid,),
            )
        ]


def by_length(store: shardstore.Store, dsn: str, lengths: list[int], reps: int) -> list[str]:
    """One session per length, filled first; then checkpoints round-robin over them, so
    every length sees the same server state (background work, cache)."""
    lines = ["| history turns | checkpoint row bytes | checkpoint() p50 ms |", "|---:|---:|---:|"]
    pool = make_messages(max(lengths), seed=3)
    sids = []
    for length in lengths:
        progress(f"history of {length} turns")
        sid = store.create_session("bench")
        fill(store, sid, pool[:length])
        sids.append(sid)
    times: list[list[float]] = [[] for _ in lengths]
    for i in range(reps):
        for j, sid in enumerate(sids):
            t0 = time.perf_counter()
            store.checkpoint(sid, {**STATE, "step": i}, tool_calls=[{"id": "c1", "name": "f"}])
            times[j].append(time.perf_counter() - t0)
    for j, length in enumerate(lengths):
        sizes = checkpoint_rows(dsn, sids[j])
        lines.append(f"| {length:,} | {statistics.median(sizes):,.0f} | {p50(times[j]):.3f} |")
    _FILLED[:] = list(zip(lengths, sids, strict=True))
    return lines


_FILLED: list[tuple[int, Any]] = []  # (length, session) filled by by_length, reused by forks


def history_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM shardstore.agent_history)"
            " + (SELECT count(*) FROM shardstore.chunk_map)"
            " + (SELECT count(*) FROM shardstore.turn_buffer)"
            " + (SELECT count(*) FROM shardstore.fork_copies)"
        ).fetchone()
    assert row is not None
    return int(row[0])


def forks(store: shardstore.Store, dsn: str, reps: int) -> list[str]:
    """fork() of the shortest and the longest filled history, round-robin, 3 rounds."""
    chosen = [_FILLED[0], _FILLED[-1]]
    lines = [
        "| history turns | fork() p50 ms (median of 3 rounds) | range of the rounds"
        " | rows written besides the session |",
        "|---:|---:|---:|---:|",
    ]
    rounds: list[list[float]] = [[] for _ in chosen]
    written = [0 for _ in chosen]
    for _ in range(3):
        times: list[list[float]] = [[] for _ in chosen]
        for _i in range(reps):
            for j, (_length, sid) in enumerate(chosen):
                before = history_rows(dsn) if _i == 0 else 0
                t0 = time.perf_counter()
                store.fork(sid)
                times[j].append(time.perf_counter() - t0)
                if _i == 0:
                    written[j] += history_rows(dsn) - before
        for j in range(len(chosen)):
            rounds[j].append(p50(times[j]))
    for j, (length, _sid) in enumerate(chosen):
        lo, hi = min(rounds[j]), max(rounds[j])
        mid = statistics.median(rounds[j])
        lines.append(f"| {length:,} | {mid:.3f} | {lo:.3f} - {hi:.3f} | {written[j]} |")
    return lines


def with_append(store: shardstore.Store, rounds: int) -> list[str]:
    progress("append_turn with / without a checkpoint")
    messages = make_messages(rounds * 3, seed=5)
    sids = [store.create_session("bench") for _ in range(3)]
    fill(store, sids[0], messages[:50])
    fill(store, sids[1], messages[:50])
    fill(store, sids[2], messages[:50])
    plain: list[float] = []
    fused: list[float] = []
    two: list[float] = []
    for i in range(rounds):
        msg = messages[i]
        t0 = time.perf_counter()
        store.append_turn(sids[0], msg, idempotency_key=f"p{i}")
        t1 = time.perf_counter()
        store.append_turn(sids[1], msg, idempotency_key=f"f{i}", checkpoint={**STATE, "step": i})
        t2 = time.perf_counter()
        store.append_turn(sids[2], msg, idempotency_key=f"t{i}")
        store.checkpoint(sids[2], {**STATE, "step": i})
        t3 = time.perf_counter()
        plain.append(t1 - t0)
        fused.append(t2 - t1)
        two.append(t3 - t2)
    base = p50(plain)
    return [
        "| call | p50 ms | vs append_turn |",
        "|---|---:|---:|",
        f"| append_turn | {base:.3f} | 1.00x |",
        f"| append_turn(..., checkpoint=state) | {p50(fused):.3f} | {p50(fused) / base:.2f}x |",
        f"| append_turn + checkpoint() | {p50(two):.3f} | {p50(two) / base:.2f}x |",
    ]


def langgraph(store: shardstore.Store, dsn: str, turns: int, steps: int) -> list[str]:
    try:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError as exc:  # pragma: no cover - an optional comparison
        return [f"LangGraph comparison skipped: {exc}"]
    progress(f"LangGraph PostgresSaver at {turns} turns")
    messages = make_messages(turns + steps, seed=9)
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        history = list(messages[:turns])
        times = []
        for step in range(steps):
            history.append(messages[turns + step])
            cp = empty_checkpoint()
            cp["channel_values"] = {"messages": list(history), "state": dict(STATE)}
            cp["channel_versions"] = {"messages": step + 1, "state": step + 1}
            t0 = time.perf_counter()
            config = saver.put(
                config, cp, {"step": step}, {"messages": step + 1, "state": step + 1}
            )
            times.append(time.perf_counter() - t0)
    with psycopg.connect(dsn) as conn:
        (lg_bytes,) = conn.execute(
            "SELECT (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c"
            "         WHERE thread_id = 't1')"
            "     + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b"
            "         WHERE thread_id = 't1')"
        ).fetchone() or (0,)
    # shardstore on the same conversation: the turns once, then a checkpoint per step
    sid = store.create_session("bench")
    fill(store, sid, messages[:turns])
    ours = []
    for step in range(steps):
        t0 = time.perf_counter()
        store.append_turn(sid, messages[turns + step], checkpoint=dict(STATE))
        ours.append(time.perf_counter() - t0)
    mine = statistics.mean(checkpoint_rows(dsn, sid))
    per_lg = lg_bytes / steps
    return [
        f"At {turns:,} turns, {steps} steps (each adds one message and checkpoints):",
        "",
        "| | bytes per checkpoint | p50 ms per step |",
        "|---|---:|---:|",
        f"| LangGraph PostgresSaver.put (messages in the checkpoint) | {per_lg:,.0f} |"
        f" {p50(times):.2f} |",
        f"| shardstore append_turn(..., checkpoint=state) | {mine:,.0f} | {p50(ours):.2f} |",
        "",
        f"PostgresSaver stores {per_lg / mine:,.0f}x the bytes per checkpoint (stored sizes,"
        " pg_column_size, after TOAST compression).",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--big", action="store_true", help="100,000 turns instead of 10,000")
    parser.add_argument("--out")
    parser.add_argument(
        "--only", default="length,append,langgraph,fork", help="comma-separated tables to run"
    )
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    lengths = [10, 1_000, 100_000 if args.big else 10_000]
    reps, rounds = (50, 200) if args.quick else (300, 1500)
    with open_server(args.dsn, keep=False) as server:
        store = shardstore.connect(server.dsn)
        try:
            out = ["## Checkpoint size and latency against the history length", ""]
            out += by_length(store, server.dsn, lengths, reps)
            if "append" in only:
                out += ["", "## A checkpoint riding on an append", ""]
                out += with_append(store, rounds)
            if "langgraph" in only:
                out += ["", "## Against LangGraph's PostgresSaver", ""]
                out += langgraph(store, server.dsn, 1_000, 5 if args.quick else 20)
            if "fork" in only:
                out += ["", "## fork() against the history length", ""]
                out += forks(store, server.dsn, reps)
        finally:
            store.close()
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
