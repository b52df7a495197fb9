#!/usr/bin/env python
"""Tenant search at 10^6 vectors: the hash layout (migration vector_layout, through
``store.search``) against the range layout of before (main's tenant search replayed
statement by statement), on the databases ``benchmarks/search_layout_load.py`` made.

    nice -n 10 python -m benchmarks.probes.search_layout --data-dir /tmp/vec2data --rounds 3

Every round runs every query once per configuration, configurations interleaved query by
query in a rotating order (so that load on the shared machine hits all alike); latency is
the wall time of the Python call. Reported per configuration and tenant class: recall@10
(exact numpy truth over the tenant's stored float16 vectors, as the search suite), p50 and
p99 as the median over rounds with the [min-max] of the rounds, and the p50 ratio to the
range layout's of the same round. Writes ``search_scale_1m_v2.md`` / ``.json`` to
``--out-dir`` (default ``benchmarks/results/scratch/``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

import shardstore
from benchmarks.lib.report import SCRATCH, progress, write_results
from benchmarks.lib.server import embedded
from benchmarks.lib.stats import pct
from benchmarks.lib.vectors import (
    Dataset,
    SyntheticEmbedder,
    ann_params,
    dataset_args,
    ground_truth,
    make_dataset,
    recall,
    tenant_name,
    vec_text,
)
from shardstore.core.sql import query
from shardstore.search.vectors import DEFAULT_MAX_SCAN_TUPLES, best_per_chunk

K = 10
RANGE_EF = 100  # main's Settings.hnsw_ef_search: LIMIT and hnsw.ef_search of its ANN statement


def range_search(conn: psycopg.Connection[Any]) -> Callable[[list[float], str], list[Any]]:
    """main's store.search(vector, tenant_id=..., k=10) on the range layout, statement by
    statement: the config check, SET LOCAL iterative scan + ef_search, the ANN statement
    (a Merge Append of one HNSW or bitmap scan per daily partition), best window per
    chunk (with main's widening loop), and the two statements reading the hits' turns."""

    def run(vec: list[float], tenant: str) -> list[Any]:
        text = "[" + ",".join(f"{x:.6g}" for x in vec) + "]"
        conn.execute(query("vec_config_get")).fetchone()
        limit = RANGE_EF
        with conn.transaction():
            while True:
                conn.execute(
                    "SELECT shardstore.vec_search_settings_v2(%s, %s)",
                    (limit, DEFAULT_MAX_SCAN_TUPLES),
                )
                rows = (
                    conn.cursor(row_factory=dict_row)
                    .execute(
                        query("vec_search_ann"), ann_params(text, tenant, limit), prepare=False
                    )
                    .fetchall()
                )
                best = best_per_chunk(rows, K)
                if len(best) == K or len(rows) < limit or limit >= 1000:
                    break
                limit = min(1000, limit * 4)
        idx = list(range(len(best)))
        sids = [r["session_id"] for r in best]
        seqs = [r["chunk_seq"] for r in best]
        lows = [max(0, int(r["first_turn_seq"]) - 2) for r in best]
        highs = [r["last_turn_seq"] for r in best]
        conn.execute(
            query("vec_hit_turns"), (idx, sids, seqs, lows, highs), prepare=False
        ).fetchall()
        conn.execute(
            query("vec_hit_buffer"), (idx, sids, seqs, lows, highs), prepare=False
        ).fetchall()
        return [(r["session_id"], r["chunk_seq"]) for r in best]

    return run


def store_search(store: shardstore.Store) -> Callable[[list[float], str], list[Any]]:
    def run(vec: list[float], tenant: str) -> list[Any]:
        return [(h.session_id, h.chunk_seq) for h in store.search(vec, tenant_id=tenant, k=K)]

    return run


@dataclass
class Config:
    name: str
    run: Callable[[list[float], str], list[Any]]
    ns: dict[str, list[list[int]]] = field(default_factory=dict)  # class -> rounds -> ns
    recalls: dict[str, list[float]] = field(default_factory=dict)  # class -> per query


def plan_of(conn: psycopg.Connection[Any], sql: str, params: Any) -> str:
    rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params, prepare=False).fetchall()
    return "\n".join(re.sub(r"'\[[-0-9.e,]+\]'", "'[<query vector>]'", r[0]) for r in rows)


def hash_plans(
    dsn: str, ds: Dataset, groups: dict[str, list[int]], ef: int, exact_rows: int
) -> dict[str, str]:
    """EXPLAIN ANALYZE of the statement store.search runs for the first query of each class
    on the hash layout (the exact one or the ANN one, as the store chooses)."""
    out = {}
    with psycopg.connect(dsn) as conn:
        for group, qids in groups.items():
            qi = qids[0]
            tenant = tenant_name(int(ds.q_tenant[qi]))
            text = vec_text(ds, qi)
            params = {**ann_params(text, tenant, max(ef, 4 * K)), "cap": exact_rows + 1}
            (count,) = conn.execute(query("vec_tenant_rows"), params).fetchone()
            if count <= exact_rows:
                out[group] = f"(tenant rows counted: {count})\n" + plan_of(
                    conn, query("vec_search_tenant_exact"), params
                )
            else:
                leaf_rows, share = conn.execute(query("vec_tenant_leaf"), (tenant,)).fetchone()
                from shardstore.search.vectors import ann_settings

                ann = ann_settings(ef, params["n"], leaf_rows, share, exact_rows + 1)
                with conn.transaction():
                    conn.execute(
                        query("vec_search_settings"),
                        (max(ann.ef_search, params["n"]), ann.max_scan_tuples),
                    )
                    out[group] = (
                        f"(leaf rows {leaf_rows:.0f}, share {share}, ef_search "
                        f"{ann.ef_search}, max_scan_tuples {ann.max_scan_tuples})\n"
                        + plan_of(conn, query("vec_search_ann"), params)
                    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data-dir", default="/tmp/vec2data")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--small", type=int, default=100, help="small-tenant queries per round")
    p.add_argument("--big", type=int, default=50, help="big-tenant queries per round")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--ef", default="100,400", help="hnsw_ef_search values of the hash rows")
    p.add_argument("--exact-rows", type=int, default=shardstore.Settings().vector_exact_rows)
    p.add_argument("--no-range", action="store_true", help="hash configurations only")
    p.add_argument("--out-dir", default=str(SCRATCH))
    p.add_argument("--name", default="search_scale_1m_v2")
    args = p.parse_args(argv)
    started = time.perf_counter()
    srv = embedded(args.data_dir, cleanup_mode=None)
    admin = srv.get_uri()
    info = json.loads((Path(args.data_dir) / "load_info.json").read_text())
    ds = make_dataset(dataset_args(info["chunks"]))
    truth = ground_truth(ds)
    names = list(ds.groups)
    groups = {
        names[0]: ds.groups[names[0]][: args.small],
        names[1]: ds.groups[names[1]][: args.big],
    }
    hash_dsn = make_conninfo(admin, dbname="vl_hash")
    range_dsn = make_conninfo(admin, dbname="vl_range")
    configs: list[Config] = []
    stores: list[shardstore.Store] = []
    conns: list[psycopg.Connection[Any]] = []
    if not args.no_range:
        rc = psycopg.connect(range_dsn, autocommit=True)
        conns.append(rc)
        configs.append(
            Config(
                f"range layout, {info['partitions']} partitions (main: ef_search {RANGE_EF})",
                range_search(rc),
            )
        )
    for ef in (int(x) for x in args.ef.split(",")):
        st = shardstore.connect(
            hash_dsn,
            embedding_model=SyntheticEmbedder(),
            hnsw_ef_search=ef,
            vector_exact_rows=args.exact_rows,
        )
        stores.append(st)
        configs.append(
            Config(
                f"hash layout, store.search (hnsw_ef_search {ef}, "
                f"vector_exact_rows {args.exact_rows})",
                store_search(st),
            )
        )
    with psycopg.connect(admin) as a:
        env = {
            "server": a.execute("SELECT version()").fetchone()[0].split(" on ")[0],
            "pgvector": a.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone(),
            "shared_buffers": a.execute("SHOW shared_buffers").fetchone()[0],
            "load_at_start": os.getloadavg(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        }
    vecs = {qi: [float(x) for x in ds.queries[qi]] for qs in groups.values() for qi in qs}
    for cfg in configs:
        for group, qids in groups.items():
            cfg.ns[group] = []
            for qi in qids[: args.warmup]:
                cfg.run(vecs[qi], tenant_name(int(ds.q_tenant[qi])))
    for rnd in range(args.rounds):
        progress(f"round {rnd + 1}/{args.rounds}")
        for group, qids in groups.items():
            for cfg in configs:
                cfg.ns[group].append([])
            for j, qi in enumerate(qids):
                tenant = tenant_name(int(ds.q_tenant[qi]))
                order = configs[j % len(configs) :] + configs[: j % len(configs)]
                for cfg in order:
                    t0 = time.perf_counter_ns()
                    found = cfg.run(vecs[qi], tenant)
                    cfg.ns[group][-1].append(time.perf_counter_ns() - t0)
                    if rnd == 0:
                        cfg.recalls.setdefault(group, []).append(recall(ds, qi, truth[qi], found))
    plans = hash_plans(hash_dsn, ds, groups, int(args.ef.split(",")[0]), args.exact_rows)
    for st in stores:
        st.close()
    for c in conns:
        c.close()
    results = []
    for group in groups:
        base = configs[0].ns[group] if not args.no_range else None
        for cfg in configs:
            p50s = [pct([x / 1e6 for x in r], 50) for r in cfg.ns[group]]
            p99s = [pct([x / 1e6 for x in r], 99) for r in cfg.ns[group]]
            ratios = (
                [p / pct([x / 1e6 for x in b], 50) for p, b in zip(p50s, base, strict=True)]
                if base is not None
                else []
            )
            rec = cfg.recalls[group]
            results.append(
                {
                    "config": cfg.name,
                    "tenants": group,
                    "queries": len(rec),
                    "recall": statistics.fmean(rec),
                    "recall_min": min(rec),
                    "perfect": sum(r >= 1.0 for r in rec) / len(rec),
                    "p50_ms": statistics.median(p50s),
                    "p50_min": min(p50s),
                    "p50_max": max(p50s),
                    "p99_ms": statistics.median(p99s),
                    "p99_min": min(p99s),
                    "p99_max": max(p99s),
                    "p50_ratio_to_range": statistics.median(ratios) if ratios else None,
                    "ratio_min": min(ratios) if ratios else None,
                    "ratio_max": max(ratios) if ratios else None,
                }
            )
    env["load_at_end"] = os.getloadavg()
    total = time.perf_counter() - started
    md = write_results(
        Path(args.out_dir) / args.name,
        report(args, env, info, total, results, plans),
        {
            "args": vars(args),
            "env": env,
            "load": info,
            "total_s": total,
            "results": results,
            "plans": plans,
        },
    )
    progress(f"wrote {md} in {total:.0f} s")
    for r in results:
        progress(
            f"{r['tenants']:<14} {r['config'][:60]:<60} recall {r['recall']:.3f} "
            f"min {r['recall_min']:.1f} p50 {r['p50_ms']:.1f} "
            f"[{r['p50_min']:.1f}-{r['p50_max']:.1f}] ratio {r['p50_ratio_to_range']}"
        )
    return 0


def report(
    args: argparse.Namespace,
    env: dict[str, Any],
    info: dict[str, Any],
    total: float,
    results: list[dict[str, Any]],
    plans: dict[str, str],
) -> str:
    lines = [
        "# Tenant search at 10^6 vectors: hash layout (vector_layout) vs range layout",
        "",
        f"benchmarks/search_layout.py on the databases of benchmarks/search_layout_load.py: "
        f"{info['chunks']:,} vectors (384-dim halfvec, one window per chunk), 50 tenants "
        "(tenant-000 owns 30%, each other ~1.4%), chunk_start spread over "
        f"{info['partitions']} daily partitions; the data and queries of "
        "search_scale_1m.md (same generator and seed). `vl_range`: migrations before "
        "vector_layout (chunk_vectors RANGE-partitioned like agent_history, one HNSW per "
        "partition), searched by main's statements replayed by hand. `vl_hash`: a copy of "
        "it upgraded by the vector_layout migration (32 hash leaves by tenant_id; the rows "
        "copied in the old partitions' order, i.e. by time as the worker writes them), "
        "searched by `store.search(vector, tenant_id=..., k=10)`.",
        "",
        f"{args.rounds} rounds; each round runs {args.small} small-tenant and {args.big} "
        "big-tenant queries through every configuration, interleaved query by query in a "
        f"rotating order, after {args.warmup} warm-up queries per class. p50/p99: median "
        "over rounds [min-max of the rounds]; ratio: the round's p50 over the range "
        "layout's p50 of the same round (median [min-max]). recall@10 from the first round "
        "(the results do not change between rounds), exact numpy truth.",
        "",
        f"Server: {env['server']}, pgvector {env['pgvector'][0] if env['pgvector'] else '?'}, "
        f"shared_buffers {env['shared_buffers']}; {env['cpus']} CPUs shared with other work, "
        f"load average {tuple(round(x, 2) for x in env['load_at_start'])} at start, "
        f"{tuple(round(x, 2) for x in env['load_at_end'])} at end; took {total:.0f} s.",
        "",
        "| tenant | configuration | recall@10 | min recall | queries 10/10 | p50 ms | "
        "p99 ms | p50 / range p50 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = (
            "1 (baseline)"
            if r["config"].startswith("range")
            else "-"
            if r["p50_ratio_to_range"] is None
            else f"{r['p50_ratio_to_range']:.3f} [{r['ratio_min']:.3f}-{r['ratio_max']:.3f}]"
        )
        lines.append(
            f"| {r['tenants']} | {r['config']} | {r['recall']:.4f} | {r['recall_min']:.1f} | "
            f"{r['perfect']:.0%} | {r['p50_ms']:.1f} [{r['p50_min']:.1f}-{r['p50_max']:.1f}] | "
            f"{r['p99_ms']:.1f} [{r['p99_min']:.1f}-{r['p99_max']:.1f}] | {ratio} |"
        )
    lines += [
        "",
        "## Load and upgrade",
        "",
        "```",
        json.dumps(info, indent=1),
        "```",
        "",
        "## Plans of the hash layout (first query of each class, first hash row's ef)",
        "",
    ]
    for group, plan in plans.items():
        lines += [f"{group}:", "", "```", plan, "```", ""]
    return "\n".join(lines) + "\n"
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
