"""Importer throughput: one single-row history of 100,000 turns (the whole conversation in
one JSONB array) imported with ``store.import_single_row``, then exported to JSONL and
imported back into a fresh database with ``store.import_jsonl``.

    python -m benchmarks import [--dsn DSN] [--turns N] [--rounds R] [--quick]
                                      [--out FILE.md]

Each round imports the same source row under a new table name (a new session), so every
round writes 100,000 turns from scratch. Reports turns/s and MB/s per round and the median
with its range. Runs on demand only (the test suite runs ``--quick``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

import shardstore
from benchmarks.lib.corpus import make_messages
from benchmarks.lib.report import progress, write_results
from benchmarks.lib.server import create_database, drop_database, open_server


def _table(conn: psycopg.Connection[Any], name: str, messages: list[dict[str, Any]]) -> None:
    conn.execute(
        sql.SQL("CREATE TABLE {} (session_id text PRIMARY KEY, conversation_history jsonb)").format(
            sql.Identifier(name)
        )
    )
    conn.execute(
        sql.SQL("INSERT INTO {} VALUES ('big', %s::jsonb)").format(sql.Identifier(name)),
        (json.dumps(messages),),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=None, help="server to use (default: embedded)")
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 turns, 1 round")
    parser.add_argument("--out", default=None, help="write the results table here")
    args = parser.parse_args(argv)
    turns, rounds = (2_000, 1) if args.quick else (args.turns, args.rounds)
    messages = make_messages(turns)
    payload = sum(len(json.dumps(m)) for m in messages)
    lines = [
        "# Importer throughput",
        "",
        f"One single-row history of {turns:,} turns ({payload / 1e6:.1f} MB of JSON, "
        f"~{payload // turns} B per message, benchmarks.lib.corpus.make_messages), "
        f"{rounds} round(s); `python -m benchmarks import"
        f"{' --quick' if args.quick else ''}`.",
        "",
        "| step | round | seconds | turns/s | MB/s |",
        "|---|---|---|---|---|",
    ]
    rates: dict[str, list[float]] = {
        "import single-row": [],
        "export jsonl": [],
        "import jsonl": [],
    }
    with open_server(args.dsn, keep=False) as server:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            for r in range(rounds):
                _table(conn, f"agent_sessions_{r}", messages)
        with shardstore.connect(server.dsn) as store:
            for r in range(rounds):
                progress(f"round {r + 1}: import single-row")
                t0 = time.perf_counter()
                report = store.import_single_row(
                    server.dsn,
                    f"agent_sessions_{r}",
                    id_column="session_id",
                    history_column="conversation_history",
                    tenant_id="bench",
                    batch_size=500,
                )
                seconds = time.perf_counter() - t0
                assert report.turns == turns, report
                sid = store.sessions(tenant_id="bench", limit=1)[0].session_id
                steps = [("import single-row", seconds, report.bytes)]
                out = io.StringIO()
                t0 = time.perf_counter()
                exported = store.export_sessions([sid], out=out)
                steps.append(("export jsonl", time.perf_counter() - t0, exported.bytes))
                # the JSONL import goes into a fresh database (the session exists here)
                name = f"shardstore_bench_copy_{r}_{os.getpid()}"
                target = create_database(server.admin_dsn, name)
                with shardstore.connect(target) as copy:
                    out.seek(0)
                    t0 = time.perf_counter()
                    back = copy.import_jsonl(out, batch_size=500)
                    steps.append(("import jsonl", time.perf_counter() - t0, back.bytes))
                    assert back.turns == turns
                drop_database(server.admin_dsn, name)
                for step, secs, size in steps:
                    rates[step].append(turns / secs)
                    lines.append(
                        f"| {step} | {r + 1} | {secs:.2f} | {turns / secs:,.0f} | "
                        f"{size / secs / 1e6:.1f} |"
                    )
    lines += ["", "| step | median turns/s | range |", "|---|---|---|"]
    for step, values in rates.items():
        lines.append(
            f"| {step} | {statistics.median(values):,.0f} | "
            f"{min(values):,.0f} – {max(values):,.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
