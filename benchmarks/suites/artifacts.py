"""Artifacts: what a 1 MB tool output costs with and without them.

    python -m benchmarks artifacts [--dsn DSN] [--out FILE.md]

Measures, on one server and in one process:
* bytes stored for a 1 MB tool output referenced by 3 turns and 20 checkpoints: shardstore
  with offload (artifact chunks + refs + the turns' cards + the checkpoints) against
  LangGraph's PostgresSaver holding the same message in each of 20 checkpoints (a new blob
  per step, as its default agent loop writes them);
* append_turn p50 of that tool output, offloaded vs not (each on a fresh session);
* put/get throughput of 16 MB per backend (postgres, a local directory, SeaweedFS's S3
  gateway when ``weed`` and boto3 are installed);
* the cost of the tracing check on the no-tracer path (``tracing.active()``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Sequence
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.report import progress, quick, write_results
from benchmarks.lib.server import open_server
from shardstore.integrations import tracing

MB = 1 << 20


def tool_output(seed: int = 1) -> str:
    """~1 MB of cleaned web-page text (varied, compressible like real text)."""
    import random

    rng = random.Random(seed)
    words = [f"w{rng.randrange(50000)}" for _ in range(4000)]
    out, size = [], 0
    while size < MB:
        line = " ".join(rng.choice(words) for _ in range(12)) + "\n"
        out.append(line)
        size += len(line)
    return "".join(out)[:MB]


def sizes(dsn: str, tables: list[str]) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return {
            t: int(
                conn.execute(f"SELECT coalesce(sum(pg_column_size(x.*)), 0) FROM {t} x").fetchone()[
                    0
                ]
            )  # type: ignore[index]
            for t in tables
        }


def stored_once(dsn: str) -> list[str]:
    text = tool_output()
    store = shardstore.connect(dsn, offload_over=65536)
    sid = store.create_session("bench")
    msg = {"role": "tool", "tool_call_id": "call_1", "content": text}
    for i in range(3):
        store.append_turn(
            sid, {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1"}]}
        )
        store.append_turn(sid, msg, f"k{i}")
    for step in range(20):
        turn = store.tail(sid, n=2)[-1]
        store.checkpoint(sid, {"step": step, "last": turn.message["content"]})
    store.flush(sid)
    ours = sizes(
        dsn,
        [
            "shardstore.artifact_chunks",
            "shardstore.artifacts",
            "shardstore.artifact_refs",
            "shardstore.agent_history",
            "shardstore.turn_buffer",
            "shardstore.checkpoints",
        ],
    )
    store.close()
    lines = [
        "| what | bytes (pg_column_size) |",
        "|---|---:|",
        *[f"| {t} | {n:,} |" for t, n in ours.items()],
        f"| **shardstore total** | **{sum(ours.values()):,}** |",
    ]
    try:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError as exc:
        return [*lines, f"\nLangGraph comparison skipped: {exc}"]
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        history: list[Any] = []
        for step in range(20):
            if step < 3:
                history.append(msg)
            cp = empty_checkpoint()
            cp["channel_values"] = {"messages": list(history), "state": {"step": step}}
            cp["channel_versions"] = {"messages": step + 1, "state": step + 1}
            config = saver.put(
                config, cp, {"step": step}, {"messages": step + 1, "state": step + 1}
            )
    theirs = sizes(dsn, ["public.checkpoints", "public.checkpoint_blobs"])
    lines += [
        f"| LangGraph PostgresSaver, same message, 20 checkpoints | {sum(theirs.values()):,} |",
    ]
    return lines


def append_p50(dsn: str, rounds: int) -> list[str]:
    """append_turn of a 1 MB tool output with and without offload, interleaved: each round
    times both (alternating which goes first), each on a fresh session (not timed)."""
    text = tool_output(2)
    labels = ("offloaded (offload_over=65536)", "not offloaded")
    stores = {
        labels[0]: shardstore.connect(dsn, offload_over=65536),
        labels[1]: shardstore.connect(dsn, offload_over=None),
    }
    times: dict[str, list[float]] = {label: [] for label in labels}
    ratios: list[float] = []
    for i in range(rounds):
        order = labels if i % 2 == 0 else labels[::-1]
        took = {}
        for label in order:
            store = stores[label]
            sid = store.create_session("bench")
            msg = {"role": "tool", "tool_call_id": "c", "content": text + f"{label}{i}"}
            t0 = time.perf_counter()
            store.append_turn(sid, msg)
            took[label] = time.perf_counter() - t0
            times[label].append(took[label])
        ratios.append(took[labels[0]] / took[labels[1]])
    for store in stores.values():
        store.close()
    rows = []
    for label in labels:
        t = [x * 1000 for x in sorted(times[label])]
        rows.append(f"| {label} | {statistics.median(t):.2f} | {t[0]:.2f}–{t[-1]:.2f} |")
    ratios.sort()
    return [
        "| append_turn of a 1 MB tool output | p50 ms | min–max ms |",
        "|---|---:|---:|",
        *rows,
        "",
        f"offloaded / not offloaded, per interleaved round ({rounds} rounds): median "
        f"{statistics.median(ratios):.3f}x [{ratios[0]:.3f}–{ratios[-1]:.3f}]",
    ]


def throughput(dsn: str, rounds: int = 5) -> list[str]:
    data = os.urandom(16 * MB)
    urls = ["postgres", "file://" + tempfile.mkdtemp(prefix="bench-artifacts-")]
    try:
        from tests.artifacts.support import s3_url

        urls.append(s3_url())
    except BaseException as exc:  # pytest.skip is a BaseException
        progress(f"no S3 server: {exc}")
    lines = [
        "| backend | put MB/s p50 [min–max] | get MB/s p50 [min–max] |",
        "|---|---:|---:|",
    ]
    stores = {url.split(":")[0]: shardstore.connect(dsn, artifacts=url) for url in urls}
    puts: dict[str, list[float]] = {name: [] for name in stores}
    gets: dict[str, list[float]] = {name: [] for name in stores}
    for i in range(rounds):  # interleaved: each round puts and gets once per backend
        for name, store in stores.items():
            blob = data[:-2] + bytes([i % 256, len(name)])
            t0 = time.perf_counter()
            ref = store.put_artifact("bench", blob, content_type="application/octet-stream")
            puts[name].append(16 / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            assert len(store.get_artifact("bench", ref.artifact_id)) == len(blob)
            gets[name].append(16 / (time.perf_counter() - t0))
    for store in stores.values():
        store.close()

    def cell(values: list[float]) -> str:
        v = sorted(values)
        return f"{statistics.median(v):.0f} [{v[0]:.0f}–{v[-1]:.0f}]"

    for name in stores:
        lines.append(f"| {name} | {cell(puts[name])} | {cell(gets[name])} |")
    return lines


def tracing_cost() -> list[str]:
    n = 200_000
    runs = sorted(timeit.timeit(tracing.active, number=n) / n * 1e9 for _ in range(5))
    return [
        f"tracing.active() with no tracer provider, 5 runs of {n:,} calls: median "
        f"{statistics.median(runs):.0f} ns per store call [{runs[0]:.0f}–{runs[-1]:.0f}]"
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn")
    parser.add_argument("--out", default=None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    args = parser.parse_args(argv)
    quick(args, parser, rounds=3)
    out: list[str] = ["# Artifacts benchmark", ""]
    with open_server(args.dsn, keep=False) as server:
        progress("stored once vs PostgresSaver")
        out += ["## A 1 MB tool output, 3 turns, 20 checkpoints", "", *stored_once(server.dsn), ""]
        progress("append p50")
        out += ["## append_turn", "", *append_p50(server.dsn, args.rounds), ""]
        progress("throughput")
        out += ["## put/get of 16 MB", "", *throughput(server.dsn), ""]
    out += ["## Tracing off", "", *tracing_cost(), ""]
    text = "\n".join(out)
    print(text)
    if args.out:
        write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
