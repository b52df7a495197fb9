#!/usr/bin/env python
"""Load the 10^6-vector search benchmark ONCE into a kept embedded server, in the range
layout of before the vector_layout migration (database ``vl_range``), then copy it
(CREATE DATABASE ... TEMPLATE) and upgrade the copy with the vector_layout migration
(database ``vl_hash``), timing the upgrade. ``benchmarks/search_layout.py`` measures both.

    nice -n 10 python -m benchmarks.probes.search_layout_load --data-dir /tmp/vec2data

The data are those of the search suite (same generator, same seed): 50
tenants, tenant-000 owns 30% of the chunks, 100 daily partitions. ``--upgrade-only``
redoes just the copy and upgrade (after a change of the migration).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import shardstore
from benchmarks.lib.report import progress
from benchmarks.lib.server import embedded
from benchmarks.lib.vectors import (
    Dataset,
    SyntheticEmbedder,
    build_layout,
    dataset_args,
    make_dataset,
)
from shardstore.schema import migrate

LAYOUT_MIGRATION = "vector_layout"


def load_range(admin: str, ds: Dataset, parts: int) -> dict[str, Any]:
    """vl_range: migrations before vector_layout, then search_scale's load."""
    full = migrate.all_migrations()
    migrate.baseline()  # cached now: a shorter list then replays the legacy migrations
    cut = next(i for i, m in enumerate(full) if m.name == LAYOUT_MIGRATION)
    saved = migrate.all_migrations
    migrate.all_migrations = lambda: full[:cut]  # type: ignore[assignment]
    try:
        layout = build_layout(admin, "vl_range_tmp", ds, parts)
        layout.store.close()
    finally:
        migrate.all_migrations = saved  # type: ignore[assignment]
    with psycopg.connect(admin, autocommit=True) as a:
        a.execute('DROP DATABASE IF EXISTS "vl_range" WITH (FORCE)')
        a.execute(f'ALTER DATABASE "{layout.db}" RENAME TO "vl_range"')
    return {
        "copy_s": layout.load_s,
        "hnsw_build_s": layout.build_s,
        "vacuum_s": layout.vacuum_s,
        "heap_mb": layout.heap_mb,
        "index_mb": layout.index_mb,
    }


def upgrade(admin: str) -> dict[str, Any]:
    """vl_hash: a copy of vl_range, upgraded by shardstore.connect (the pending migration)."""
    with psycopg.connect(admin, autocommit=True) as a:
        a.execute('DROP DATABASE IF EXISTS "vl_hash" WITH (FORCE)')
        t0 = time.perf_counter()
        a.execute('CREATE DATABASE "vl_hash" TEMPLATE "vl_range"')
        copy_s = time.perf_counter() - t0
    dsn = make_conninfo(admin, dbname="vl_hash")
    t0 = time.perf_counter()
    store = shardstore.connect(dsn, embedding_model=SyntheticEmbedder())
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
    return {
        "template_copy_s": copy_s,
        "upgrade_s": upgrade_s,
        "vacuum_s": vacuum_s,
        "heap_mb": float(heap) / 2**20,
        "index_mb": float(idx) / 2**20,
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data-dir", default="/tmp/vec2data")
    p.add_argument("--chunks", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--upgrade-only", action="store_true")
    args = p.parse_args(argv)
    srv = embedded(args.data_dir, cleanup_mode=None)
    admin = srv.get_uri()
    info_path = Path(args.data_dir) / "load_info.json"
    info: dict[str, Any] = json.loads(info_path.read_text()) if info_path.exists() else {}
    t0 = time.perf_counter()
    if not args.upgrade_only:
        ds = make_dataset(dataset_args(args.chunks))
        progress("dataset made; loading vl_range")
        info = {
            "chunks": args.chunks,
            "partitions": args.partitions,
            "range": load_range(admin, ds, args.partitions),
        }
        info_path.write_text(json.dumps(info, indent=1))
    progress("upgrading a copy to vl_hash")
    info["hash"] = upgrade(admin)
    info["load_total_s"] = time.perf_counter() - t0
    info_path.write_text(json.dumps(info, indent=1))
    progress(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
