"""Disk per payload byte: shardstore against the floor, one session and many small ones.

Shapes (each in a fresh database of one embedded server, built with the bulk path,
``append_turns`` in batches of ``--batch``):

* one session of 1,000 / 10,000 / 100,000 turns (``--sizes``);
* MANY SMALL SESSIONS: ``--sessions`` sessions (10,000) of ``--turns`` turns (100) each,
  most platforms' real shape.

Every shape is built once per corpus of ``--corpus`` (both by default: the synthetic agent
messages and the real-text ones, benchmarks/lib/realtext.py), each in its own database of
the same server, and the report puts a shape's corpora in adjacent rows.

The floor, built in the same database from the same messages: a plain table of messages
and its primary key, ``(session_id uuid, seq bigint, message jsonb)``, filled with COPY
(TOAST-compressed like anything else). On disk is ``pg_total_relation_size`` of every
table of the schema after ``VACUUM``, minus the empty schema's, per payload byte (the
bytes of the messages' JSON text as appended). The background folds are drained before
measuring, so what is left in ``turn_buffer`` is each session's open chunk and the sealed
chunks holding its newest ``default_tail_turns`` turns (0040); ``--keep both`` builds each
shape a second time with a batch's keep window off (every chunk a batch starts and seals
written straight to ``agent_history``, as before 0040), in the same server.

Run: ``nice -n 10 python -m benchmarks disk`` (writes
``benchmarks/results/latest/disk.md`` and ``disk.json``).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, Corpus, corpus_sources
from benchmarks.lib.report import command, progress, quick, write_results
from benchmarks.lib.server import create_database, drop_database, open_server
from shardstore.core import sql

progress = progress

SIZES_SQL = """
SELECT c.relname, p.relname AS parent,
       pg_relation_size(c.oid) AS heap,
       pg_indexes_size(c.oid) AS idx,
       pg_total_relation_size(c.oid) - pg_relation_size(c.oid) - pg_indexes_size(c.oid) AS toast
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
  LEFT JOIN pg_class p ON p.oid = i.inhparent
 WHERE n.nspname = %s AND c.relkind IN ('r', 'm')
"""


def table_sizes(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[int]]:
    """heap, indexes, TOAST (+ FSM/VM) bytes per table; partitions under their parent."""
    out: dict[str, list[int]] = {}
    for name, parent, heap, idx, toast in conn.execute(SIZES_SQL, (schema,)).fetchall():
        key = f"{parent} (partitions)" if parent else name
        row = out.setdefault(key, [0, 0, 0])
        row[0] += heap
        row[1] += idx
        row[2] += toast
    return out


def minus(a: dict[str, list[int]], b: dict[str, list[int]]) -> dict[str, list[int]]:
    return {k: [x - y for x, y in zip(v, b.get(k, [0, 0, 0]), strict=False)] for k, v in a.items()}


def vacuum(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("VACUUM")


@contextmanager
def batch_keep(on: bool) -> Iterator[None]:
    """Batches with the keep window (``on``, this version) or without it, as before 0040:
    the batch statement is sent with a keep of 0 turns, which is what append_v1 was."""
    queries = sql._queries()
    shipped = queries["append"]
    if not on:
        head, _, tail = shipped.rpartition("%s)")
        assert head and not tail.strip(), "the append statement no longer ends in the keep"
        queries["append"] = head + "%s * 0)"
    try:
        yield
    finally:
        queries["append"] = shipped


def build_shape(
    dsn: str,
    corpus: Corpus,
    sessions: int,
    turns: int,
    batch: int,
    text: bool = True,
    keep: bool = True,
) -> dict[str, Any]:
    """Build ``sessions`` x ``turns`` in shardstore and the floor; sizes after VACUUM.
    ``text=False``: full-text indexing switched off first (``configure_text_search(None)``);
    ``keep=False``: batches without 0040's keep window (:func:`batch_keep`)."""
    with batch_keep(keep):
        return _build_shape(dsn, corpus, sessions, turns, batch, text) | {"keep_window": keep}


def _build_shape(
    dsn: str, corpus: Corpus, sessions: int, turns: int, batch: int, text: bool
) -> dict[str, Any]:
    store = shardstore.connect(dsn)
    if not text:
        store.configure_text_search(None)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE SCHEMA floor; CREATE TABLE floor.messages (session_id uuid NOT NULL, "
            "seq bigint NOT NULL, message jsonb NOT NULL, PRIMARY KEY (session_id, seq))"
        )
    vacuum(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        before = table_sizes(c, "shardstore")
    payload = 0
    t_ss = t_floor = 0.0
    with psycopg.connect(dsn, autocommit=True) as fc:
        for s in range(sessions):
            sid = store.create_session("bench", f"subject-{s % 97}", "disk")
            fsid = uuid.uuid4()
            for lo in range(0, turns, batch):
                idx = corpus.seq(s * 7 + lo, min(batch, turns - lo))
                payload += corpus.payload(idx)
                t0 = time.perf_counter()
                store.append_turns(sid, [corpus.msgs[i] for i in idx])
                t1 = time.perf_counter()
                with (
                    fc.transaction(),
                    fc.cursor() as cur,
                    cur.copy("COPY floor.messages (session_id, seq, message) FROM STDIN") as cp,
                ):
                    for k, i in enumerate(idx):
                        cp.write_row((fsid, lo + k, corpus.texts[i]))
                t_floor += time.perf_counter() - t1
                t_ss += t1 - t0
            if sessions >= 100 and (s + 1) % (sessions // 10) == 0:
                progress(f"  {s + 1:,} / {sessions:,} sessions")
    t0 = time.perf_counter()
    store.drain_folds()
    t_ss += time.perf_counter() - t0
    store.close()
    vacuum(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        after = table_sizes(c, "shardstore")
        floor = table_sizes(c, "floor")
        settings = dict(
            c.execute(
                "SELECT name, setting FROM pg_settings WHERE name = 'default_toast_compression'"
            ).fetchall()
        )
    grown = {k: v for k, v in minus(after, before).items() if sum(v) > 0}
    ss_total = sum(sum(v) for v in grown.values())
    floor_total = sum(sum(v) for v in floor.values())
    return {
        "sessions": sessions,
        "turns": turns,
        "payload": payload,
        "shardstore": ss_total,
        "floor": floor_total,
        "ss_per_byte": ss_total / payload,
        "floor_per_byte": floor_total / payload,
        "tables": grown,
        "build_s": t_ss,
        "floor_build_s": t_floor,
        "settings": settings,
        "text_search": text,
    }


def label(r: dict[str, Any]) -> str:
    """A shape's name, with what differs from the defaults."""
    return (
        f"{r['sessions']:,} x {r['turns']:,}, {CORPUS_LABELS[r.get('corpus', 'synthetic')]}"
        + ("" if r["text_search"] else ", text off")
        + ("" if r.get("keep_window", True) else ", keep window off (before 0040)")
    )


def report(results: list[dict[str, Any]], args: argparse.Namespace, run: str) -> str:
    lines = [
        "# Disk per payload byte",
        "",
        f"`{run}` at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"(batch {args.batch}); embedded Postgres, each shape in a "
        "fresh database; `pg_total_relation_size` of every shardstore table after `VACUUM`, "
        "minus the empty schema, per payload byte; the floor is a plain "
        "`(session_id, seq, message jsonb)` table + PK filled with COPY from the same messages.",
        "",
        "| shape, corpus | payload MB | shardstore / byte | floor / byte | ratio "
        "| build s (floor s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        shape = label(r)
        lines.append(
            f"| {shape} | {r['payload'] / 1e6:.1f} | {r['ss_per_byte']:.3f} | "
            f"{r['floor_per_byte']:.3f} | {r['ss_per_byte'] / r['floor_per_byte']:.2f} | "
            f"{r['build_s']:.1f} ({r['floor_build_s']:.1f}) |"
        )
    for r in results:
        lines += [
            "",
            f"**{label(r)}: where the bytes go** (per payload byte)",
            "",
            "| table | heap | indexes | TOAST | total |",
            "|---|---:|---:|---:|---:|",
        ]
        p = r["payload"]
        for name, (h, i, t) in sorted(r["tables"].items(), key=lambda kv: -sum(kv[1])):
            lines.append(
                f"| {name} | {h / p:.3f} | {i / p:.3f} | {t / p:.3f} | {(h + i + t) / p:.3f} |"
            )
    lines.append("")
    lines.append(f"default_toast_compression: {results[0]['settings']}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", default=None, help="a server to use (default: embedded)")
    ap.add_argument("--sizes", default="1000,10000,100000", help="one-session sizes")
    ap.add_argument("--sessions", type=int, default=10_000, help="small sessions (0: skip)")
    ap.add_argument("--turns", type=int, default=100, help="turns per small session")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    ap.add_argument(
        "--quick", action="store_true", help="one 1,000-turn session and 200 x 100 turns"
    )
    ap.add_argument(
        "--text",
        default="on",
        choices=["on", "off", "both"],
        help="full-text indexing on (the default), off (configure_text_search(None)), or both",
    )
    ap.add_argument(
        "--keep",
        default="on",
        choices=["on", "off", "both"],
        help="a batch's keep window (0040): on (the default), off (as before 0040), or both",
    )
    ap.add_argument(
        "--corpus",
        default="both",
        choices=CORPUS_CHOICES,
        help="the synthetic agent messages, the real-text ones, or both (the default)",
    )
    args = ap.parse_args(argv)
    quick(args, ap, sizes="1000", sessions=200)
    corpora = {name: Corpus(2000, source=name) for name in corpus_sources(args.corpus)}
    shapes = [(1, int(n)) for n in args.sizes.split(",") if n]
    if args.sessions:
        shapes.append((args.sessions, args.turns))
    results = []
    with open_server(args.dsn, keep=False) as server:
        choice = {"on": [True], "off": [False], "both": [True, False]}
        runs = [
            (shape, t, k, c)
            for shape in shapes
            for t in choice[args.text]
            for k in choice[args.keep]
            for c in corpora
        ]
        for (sessions, turns), text, keep, name in runs:
            db = f"disk_{uuid.uuid4().hex[:8]}"
            dsn = create_database(server.admin_dsn, db)
            progress(
                f"{sessions:,} x {turns:,} turns, {name}, keep window {'on' if keep else 'off'}"
            )
            r = build_shape(
                dsn, corpora[name], sessions, turns, min(args.batch, turns), text, keep
            ) | {"corpus": name}
            progress(
                f"  shardstore {r['ss_per_byte']:.3f} / byte, floor {r['floor_per_byte']:.3f}"
                f" ({r['build_s']:.1f} s)"
            )
            results.append(r)
            drop_database(server.admin_dsn, db)
    text = report(results, args, command("disk", argv))
    print(text)
    if args.out:
        write_results(args.out, text, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
