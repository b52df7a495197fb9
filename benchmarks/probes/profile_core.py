#!/usr/bin/env python
"""Where the time and WAL of append_turn and tail go (companion to the core suite).

    python -m benchmarks.probes.profile_core [--dsn DSN] [--big 100000]

Prints markdown: a client-side decomposition of one append (client prep, pool, the SQL
call, the floor INSERT), server-side EXPLAIN (ANALYZE, WAL) of each statement append_v2 runs,
the fold, a one-statement SQL alternative for the common (no-fold) append, and the pieces of
tail_v1 at a small and a big history. Diagnostic only; numbers are medians of many calls.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.contenders import FLOOR_DDL, FLOOR_INSERT
from benchmarks.lib.corpus import encode, make_messages
from benchmarks.lib.report import Report, progress
from benchmarks.lib.server import lsn, lsn_diff, open_server
from benchmarks.lib.stats import med, ms, pct, time_calls
from shardstore.core.sql import query
from shardstore.history.ops import prepare_turns

APPEND_SQL = query("append")

# The common append (no fold, no key) as one SQL statement: the UPDATE takes the row lock
# itself (no separate SELECT ... FOR UPDATE, no lock WAL record) and no PL/pgSQL frame.
FAST_APPEND = """
WITH s AS (
    UPDATE shardstore.sessions
       SET next_turn_seq = next_turn_seq + 1,
           open_turns = open_turns + 1,
           open_tokens = open_tokens + %(tok)s,
           open_bytes = open_bytes + %(bytes)s,
           open_chunk_start = CASE WHEN open_turns = 0
                                   THEN greatest(clock_timestamp(), last_turn_at)
                                   ELSE open_chunk_start END,
           last_turn_at = greatest(clock_timestamp(), last_turn_at)
     WHERE session_id = %(sid)s AND purged_at IS NULL
       AND (open_turns = 0 OR open_tokens + %(tok)s <= %(budget)s)
    RETURNING next_turn_seq - 1 AS seq, open_chunk_seq, last_turn_at, tenant_id
)
INSERT INTO shardstore.turn_buffer
       (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message,
        tenant_id)
SELECT %(sid)s, s.seq, s.open_chunk_seq, s.last_turn_at, %(tok)s, %(bytes)s, NULL,
       %(msg)s::jsonb, s.tenant_id
  FROM s
RETURNING turn_seq, chunk_seq
"""


def explain(conn: psycopg.Connection[Any], sql: str, params: Any) -> dict[str, Any]:
    row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    data = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    top = data[0]
    plan = top["Plan"]
    return {
        "ms": top["Execution Time"],
        "plan_ms": top.get("Planning Time", 0.0),
        "wal_records": plan.get("WAL Records", 0),
        "wal_bytes": plan.get("WAL Bytes", 0),
        "wal_fpi": plan.get("WAL FPI", 0),
        "shared_hit": plan.get("Shared Hit Blocks", 0),
        "node": plan["Node Type"],
        "plan": data,
    }


def summarize(samples: list[dict[str, Any]]) -> list[str]:
    return [
        f"{med([s['ms'] for s in samples]):.3f}",
        f"{med([s['plan_ms'] for s in samples]):.3f}",
        f"{med([s['wal_records'] for s in samples]):.0f}",
        f"{med([s['wal_bytes'] for s in samples]):.0f}",
        f"{sum(s['wal_fpi'] for s in samples) / len(samples):.2f}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn")
    p.add_argument("--big", type=int, default=100_000)
    p.add_argument("--calls", type=int, default=1000)
    args = p.parse_args(argv)
    rep = Report()
    msgs = make_messages(4000)
    texts = [encode(m) for m in msgs]
    with (
        open_server(args.dsn, False) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
        psycopg.connect(server.dsn, autocommit=True) as raw,
    ):
        raw.execute(FLOOR_DDL)
        store = shardstore.connect(server.dsn, pool_min_size=1, pool_max_size=1)
        try:
            profile_append(args, store, admin, raw, rep, msgs, texts)
            profile_tail(args, store, admin, raw, rep, msgs)
        finally:
            store.close()
    return 0


def profile_append(
    args: argparse.Namespace,
    store: shardstore.Store,
    admin: psycopg.Connection[Any],
    raw: psycopg.Connection[Any],
    rep: Report,
    msgs: list[dict[str, Any]],
    texts: list[str],
) -> None:
    ctx = store.ctx
    budget, maxb = store.settings.budget_tokens, store.settings.chunk_max_bytes
    prepped = [prepare_turns(ctx, [m], [None]) for m in msgs]
    s_full = store.create_session("p", "full")
    s_raw = store.create_session("p", "raw")
    s_nofold = store.create_session("p", "nofold")
    s_fast = store.create_session("p", "fast")
    fsid = uuid.uuid4()
    it = {k: 0 for k in ("floor", "full", "raw", "nofold", "fast", "prep")}

    def nxt(k: str) -> int:
        i = it[k]
        it[k] = i + 1
        return i

    def floor() -> None:
        i = nxt("floor")
        raw.execute(FLOOR_INSERT, (fsid, i, texts[i % len(texts)]))

    def full() -> None:
        store.append_turn(s_full, msgs[nxt("full") % len(msgs)])

    def raw_append(sid: uuid.UUID, key: str, bud: int) -> Callable[[], None]:
        def f() -> None:
            pt = prepped[nxt(key) % len(prepped)]
            raw.execute(
                APPEND_SQL,
                (
                    sid,
                    "[" + pt.texts[0] + "]",
                    pt.tokens,
                    pt.sizes,
                    pt.keys,
                    bud,
                    maxb,
                    store.ctx.partition_interval.total_seconds(),
                    store.ctx.partition_origin,
                    0,
                ),
            ).fetchall()

        return f

    def fast() -> None:
        pt = prepped[nxt("fast") % len(prepped)]
        raw.execute(
            FAST_APPEND,
            {
                "sid": s_fast,
                "tok": pt.tokens[0],
                "bytes": pt.sizes[0],
                "budget": 10**12,
                "msg": pt.texts[0],
            },
        ).fetchall()

    def pool() -> None:
        with store.connector.connection():
            pass

    def prep() -> None:
        prepare_turns(ctx, [msgs[nxt("prep") % len(msgs)]], [None])

    contenders: dict[str, Callable[[], None]] = {
        "floor INSERT (direct conn)": floor,
        "store.append_turn (full path)": full,
        "append_v2 SQL, direct conn, params precomputed": raw_append(s_raw, "raw", budget),
        "append_v2 SQL, direct conn, never folds": raw_append(s_nofold, "nofold", 10**12),
        "one-statement CTE append (alternative, no fold)": fast,
        "SELECT 1 (direct conn)": lambda: raw.execute("SELECT 1").fetchone() and None,
        "pool checkout+return only": pool,
        "prepare_turns only (encode+validate+count)": prep,
    }
    for fn in contenders.values():
        time_calls(fn, 50)
    admin.execute("CHECKPOINT")
    rounds = 5
    n = max(20, args.calls // rounds)
    res: dict[str, list[tuple[float, float, float, int]]] = {k: [] for k in contenders}
    for r in range(rounds):
        for name, fn in contenders.items():
            a = lsn(admin)
            lat = time_calls(fn, n)
            b = lsn(admin)
            res[name].append(
                (pct(lat, 50), pct(lat, 99), sum(lat) / len(lat), lsn_diff(admin, a, b) // n)
            )
        progress(f"append profile round {r + 1}/{rounds}")
    rep.add(
        "## Append: client-side decomposition",
        "",
        f"{rounds} rounds x {n} calls each, interleaved; medians over rounds.",
        "",
    )
    rep.table(
        ["call", "p50 ms", "p99 ms", "mean ms", "WAL bytes/call"],
        [
            [
                k,
                ms(med([x[0] for x in v])),
                ms(med([x[1] for x in v])),
                ms(med([x[2] for x in v])),
                f"{med([x[3] for x in v]):.0f}",
            ]
            for k, v in res.items()
        ],
    )

    # server side: each statement of the append_v2 fast path, EXPLAIN (ANALYZE, WAL)
    sid = store.create_session("p", "explain")
    store.append_turn(sid, msgs[0])
    rows: dict[str, list[dict[str, Any]]] = {}
    lock_sql = "SELECT * FROM shardstore.sessions WHERE session_id = %s FOR UPDATE"
    for i in range(200):
        pt = prepped[i % len(prepped)]
        with raw.transaction():
            seq = raw.execute(
                "SELECT next_turn_seq FROM shardstore.sessions WHERE session_id = %s", (sid,)
            ).fetchone()
            assert seq is not None
            steps = [
                ("SELECT ... FOR UPDATE (lock_session_v1 body)", lock_sql, (sid,)),
                ("SELECT * FROM config", "SELECT * FROM shardstore.config", None),
                (
                    "INSERT INTO turn_buffer",
                    "INSERT INTO shardstore.turn_buffer (session_id, "
                    "turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key, message, "
                    "tenant_id) VALUES (%s, %s, 0, now(), %s, %s, NULL, %s::jsonb, 'profile')",
                    (sid, seq[0], pt.tokens[0], pt.sizes[0], pt.texts[0]),
                ),
                (
                    "UPDATE sessions (head)",
                    "UPDATE shardstore.sessions SET next_turn_seq = "
                    "next_turn_seq + 1, open_turns = open_turns + 1, open_tokens = open_tokens + 1,"
                    " open_bytes = open_bytes + 1, last_turn_at = now() WHERE session_id = %s",
                    (sid,),
                ),
            ]
            for label, sql, params in steps:
                rows.setdefault(label, []).append(explain(raw, sql, params))
        # whole function, same session (no fold: huge budget)
        rows.setdefault("SELECT * FROM append_v2(...) whole, no fold", []).append(
            explain(
                raw,
                APPEND_SQL,
                (
                    sid,
                    "[" + pt.texts[0] + "]",
                    pt.tokens,
                    pt.sizes,
                    pt.keys,
                    10**12,
                    maxb,
                    store.ctx.partition_interval.total_seconds(),
                    store.ctx.partition_origin,
                    0,
                ),
            )
        )
        rows.setdefault("floor INSERT", []).append(
            explain(raw, FLOOR_INSERT, (fsid, 10**6 + i, pt.texts[0]))
        )
        rows.setdefault("one-statement CTE append", []).append(
            explain(
                raw,
                FAST_APPEND,
                {
                    "sid": s_fast,
                    "tok": pt.tokens[0],
                    "bytes": pt.sizes[0],
                    "budget": 10**12,
                    "msg": pt.texts[0],
                },
            )
        )
    rep.add(
        "## Append: server side, per statement (EXPLAIN ANALYZE, WAL; commit excluded)",
        "",
        "200 samples each; execution ms and WAL are medians, FPI is the mean per call. "
        "The first four rows run inside one transaction, like append_v2's body.",
        "",
    )
    rep.table(
        ["statement", "exec ms", "plan ms", "WAL records", "WAL bytes", "FPI/call"],
        [[k, *summarize(v)] for k, v in rows.items()],
    )

    # the fold: compression method and cost
    fold_rows = []
    for comp in ("pglz", "lz4"):
        try:
            raw.execute(f"SET default_toast_compression = {comp}")
        except psycopg.Error as exc:
            fold_rows.append([comp, f"unavailable: {exc.diag.message_primary}", "", "", "", ""])
            continue
        samples = []
        sizes = []
        for j in range(20):
            s = store.create_session("p", f"fold-{comp}-{j}")
            store.append_turns(s, msgs[j * 20 : (j * 20) + 20])  # one open chunk of ~20 turns
            row = raw.execute(
                "SELECT open_chunk_seq, open_chunk_start FROM shardstore.sessions"
                " WHERE session_id = %s",
                (s,),
            ).fetchone()
            assert row is not None
            samples.append(explain(raw, "SELECT shardstore.fold_chunk(%s, %s, %s)", (s, *row)))
            size = raw.execute(
                "SELECT pg_column_size(conversation_chunk), "
                "octet_length(conversation_chunk::text) FROM "
                "shardstore.agent_history WHERE session_id = %s",
                (s,),
            ).fetchone()
            assert size is not None
            sizes.append(size[0] / size[1])
        fold_rows.append([comp, *summarize(samples), f"{med(sizes):.2f}"])
    raw.execute("RESET default_toast_compression")
    rep.add("## Fold of one ~20-turn chunk (fold_chunk), by TOAST compression", "")
    rep.table(
        [
            "compression",
            "exec ms",
            "plan ms",
            "WAL records",
            "WAL bytes",
            "FPI/call",
            "stored/raw bytes",
        ],
        fold_rows,
    )


def profile_tail(
    args: argparse.Namespace,
    store: shardstore.Store,
    admin: psycopg.Connection[Any],
    raw: psycopg.Connection[Any],
    rep: Report,
    msgs: list[dict[str, Any]],
) -> None:
    sids = {}
    for turns in (1000, args.big):
        sid = store.create_session("p", f"tail{turns}")
        for lo in range(0, turns, 500):
            store.append_turns(sid, [msgs[(lo + i) % len(msgs)] for i in range(500)])
        while True:
            last = store.chunks(sid, last=1)[-1]
            if last.is_open and last.turn_count == 8:
                break
            store.append_turn(sid, msgs[0])
        sids[turns] = sid
        progress(f"built tail session {turns}")
    admin.execute("VACUUM ANALYZE shardstore.turn_buffer")
    admin.execute("VACUUM ANALYZE shardstore.chunk_map")
    out = []
    for turns, sid in sids.items():
        pieces = {
            "tail_v1(n=20) whole": ("SELECT * FROM shardstore.tail_v1(%s, 20, NULL)", (sid,)),
            "buffer scan": (
                "SELECT b.turn_seq, b.message FROM shardstore.turn_buffer b "
                "WHERE b.session_id = %s ORDER BY b.turn_seq DESC",
                (sid,),
            ),
            "chunk_map scan (all rows)": (
                "SELECT m.chunk_seq, m.chunk_start FROM "
                "shardstore.chunk_map m WHERE m.session_id = %s "
                "ORDER BY m.chunk_seq DESC",
                (sid,),
            ),
            "chunk_map scan LIMIT 2": (
                "SELECT m.chunk_seq, m.chunk_start FROM "
                "shardstore.chunk_map m WHERE m.session_id = %s "
                "ORDER BY m.chunk_seq DESC LIMIT 2",
                (sid,),
            ),
        }
        for label, (sql, params) in pieces.items():
            samples = [explain(raw, sql, params) for _ in range(100)]
            node = samples[-1]["plan"][0]["Plan"]
            shape = node["Node Type"] + "".join(
                f" > {c['Node Type']}" for c in node.get("Plans", [])[:2]
            )
            out.append(
                [
                    f"{turns:,}",
                    label,
                    f"{med([s['ms'] for s in samples]):.3f}",
                    f"{med([s['plan_ms'] for s in samples]):.3f}",
                    f"{med([s['shared_hit'] for s in samples]):.0f}",
                    shape,
                ]
            )
        t = time_calls(
            lambda sid=sid: raw.execute(
                "SELECT * FROM shardstore.tail_v1(%s, 20, NULL)", (sid,)
            ).fetchall(),
            300,
        )
        out.append([f"{turns:,}", "tail_v1 via psycopg (round trip)", ms(pct(t, 50)), "", "", ""])
    rep.add(
        "## Tail pieces at a small and a big history",
        "",
        "EXPLAIN (ANALYZE, BUFFERS) medians of 100; 'hit' = shared buffers touched.",
        "",
    )
    rep.table(["turns", "piece", "exec ms", "plan ms", "shared hit", "plan shape"], out)
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    progress(f"done in {time.perf_counter() - t0:.0f}s")
    sys.exit(rc)
