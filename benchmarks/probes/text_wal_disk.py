"""Where an append's WAL and disk go, full-text index by full-text index lever (issue 41).

One embedded server; per corpus and variant a fresh database: one session of ``--turns``
messages appended one call at a time (background folds drained, then ``flush``), beside a
bare INSERT floor of the same messages in the same database, each after a CHECKPOINT (so
both pay the same first-touch full-page images). WAL from ``pg_current_wal_lsn()`` (the
server is the run's alone; the record and full-page-image counts of ``pg_stat_wal`` are
printed as a hint, they lag behind the backends' stats flushes); one part of the index is
told apart by a variant without it. Disk per relation after VACUUM. A variant is SQL run on
the freshly migrated database before the appends (a lever tried, not what the store ships).

    python -m benchmarks.probes.text_wal_disk --turns 2000 --corpus both
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, corpus_sources, encode, messages
from benchmarks.lib.server import create_database, drop_database, lsn, lsn_diff, open_server
from benchmarks.lib.stats import spread

PARTS = [f"shardstore.turn_text_h{i:02d}_tsv_idx" for i in range(16)]

CHUNK_LEXEMES = (
    "CREATE FUNCTION shardstore.probe_chunk_lexemes(p_chunk jsonb) RETURNS integer[]"
    " LANGUAGE sql IMMUTABLE AS $$"
    " SELECT coalesce(array_agg(DISTINCT h ORDER BY h), '{}')"
    "   FROM jsonb_array_elements(p_chunk) e(v),"
    "        shardstore.text_windows('english'::regconfig, e.v->'m') w, unnest(w.r_tsv) h $$"
)
CHUNK_GIN = (
    "CREATE INDEX probe_chunk_gin ON shardstore.agent_history USING gin"
    " (shardstore.probe_chunk_lexemes(conversation_chunk)) WITH (gin_pending_list_limit = 256)"
)
TEXT_OFF = "UPDATE shardstore.text_search_config SET config = NULL"

#: a lever tried: SQL run on the migrated database before the appends
VARIANTS: dict[str, list[str]] = {
    "defaults": [],
    "text off": [TEXT_OFF],
    "no text pass every 16th turn": [],  # TEXT_INDEX_EVERY = 0, below
    "no tenant btree on turn_text": ["DROP INDEX shardstore.turn_text_tenant"],
    "GIN fastupdate off": [f"ALTER INDEX {p} SET (fastupdate = off)" for p in PARTS],
    "GIN pending list 4 MB": [f"ALTER INDEX {p} RESET (gin_pending_list_limit)" for p in PARTS],
    "per-turn rows, no GIN": ["DROP INDEX shardstore.turn_text_tsv"],
    "per-turn rows, GIN per chunk": [
        "DROP INDEX shardstore.turn_text_tsv",
        CHUNK_LEXEMES,
        CHUNK_GIN,
    ],
    "no per-turn rows, GIN per chunk": [TEXT_OFF, CHUNK_LEXEMES, CHUNK_GIN],
    "GIN built once after the appends": ["DROP INDEX shardstore.turn_text_tsv"],
    # the buffer's messages compressed in their row (pglz on the append), not moved to TOAST
    "turn_buffer compressed inline": [
        "ALTER TABLE shardstore.turn_buffer ALTER COLUMN message SET STORAGE MAIN",
        "ALTER TABLE shardstore.turn_buffer SET (toast_tuple_target = 128)",
    ],
    "turn_buffer compressed inline, text off": [
        "ALTER TABLE shardstore.turn_buffer ALTER COLUMN message SET STORAGE MAIN",
        "ALTER TABLE shardstore.turn_buffer SET (toast_tuple_target = 128)",
        TEXT_OFF,
    ],
    # the windows and their GIN index kept out of the WAL: derived data, but an unlogged
    # table is emptied by crash recovery and is empty on every replica
    "turn_text unlogged": [
        f"ALTER TABLE shardstore.turn_text_h{i:02d} SET UNLOGGED" for i in range(16)
    ],
    # a server setting, not the store's: compresses full-page images (floor's too)
    "wal_compression = pglz": [
        "ALTER SYSTEM SET wal_compression = pglz",
        "SELECT pg_reload_conf()",
    ],
}

#: what a variant builds after the appends and the flush, its WAL counted apart (an index
#: built once over sealed data instead of kept up to date turn by turn)
VARIANT_BUILD: dict[str, list[str]] = {
    "GIN built once after the appends": [
        f"CREATE INDEX {p.split('.')[1]} ON shardstore.turn_text_h{i:02d} USING gin (tsv)"
        " WITH (gin_pending_list_limit = 256)"
        for i, p in enumerate(PARTS)
    ],
}

#: server settings a variant changed, put back after it
VARIANT_UNDO: dict[str, list[str]] = {
    "wal_compression = pglz": ["ALTER SYSTEM RESET wal_compression", "SELECT pg_reload_conf()"],
}

GROUPS = (
    "turn_text",
    "agent_history",
    "turn_buffer",
    "sessions",
    "chunk_map",
    "embed_queue",
    "summary_queue",
    "turn_keys",
    "floor",
)


def group_of(rel: str) -> str:
    name = rel.split(".")[-1]
    for g in GROUPS:
        if name.startswith(g):
            return g
    return "other"


def wal_stats(admin: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """The cluster's (WAL records, full-page images, WAL bytes) so far (pg_stat_wal; the
    embedded server has neither pg_walinspect nor a pg_waldump that reads its segments)."""
    row = admin.execute("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def sizes(admin: psycopg.Connection[Any]) -> dict[str, int]:
    rels = admin.execute(
        "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid ="
        " c.relnamespace WHERE n.nspname IN ('shardstore', 'bench') AND c.relkind = 'r'"
    ).fetchall()
    out: dict[str, int] = {}
    for (rel,) in rels:
        admin.execute(f"VACUUM {rel}")
        row = admin.execute("SELECT pg_total_relation_size(%s::regclass)", (rel,)).fetchone()
        assert row is not None
        g = group_of(rel)
        out[g] = out.get(g, 0) + int(row[0])
    return out


def run_one(
    admin_dsn: str, corpus: str, variant: str, msgs: list[dict[str, Any]]
) -> dict[str, Any]:
    db = f"probe_{uuid.uuid4().hex[:8]}"
    dsn = create_database(admin_dsn, db)
    from shardstore.history import ops

    ops.TEXT_INDEX_EVERY = 0 if variant == "no text pass every 16th turn" else 16
    try:
        store = shardstore.connect(dsn)
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE SCHEMA bench")
            admin.execute(
                "CREATE TABLE bench.floor (session_id uuid, seq bigint, message jsonb,"
                " PRIMARY KEY (session_id, seq))"
            )
            for stmt in VARIANTS[variant]:
                admin.execute(stmt)
            empty = sizes(admin)
            texts = [encode(m) for m in msgs]
            payload = sum(len(t.encode()) for t in texts)
            sid = store.create_session("probe", "a", "s")
            admin.execute("CHECKPOINT")
            a = lsn(admin)
            sa = wal_stats(admin)
            lat = []
            for m in msgs:
                t0 = time.perf_counter_ns()
                store.append_turn(sid, m)
                lat.append(time.perf_counter_ns() - t0)
            store.drain_folds()
            b = lsn(admin)
            sb = wal_stats(admin)
            store.flush(sid)
            c = lsn(admin)
            admin.execute("CHECKPOINT")
            c2 = lsn(admin)
            for stmt in VARIANT_BUILD.get(variant, []):
                admin.execute(stmt)
            wal_build = lsn_diff(admin, c2, lsn(admin))
            admin.execute("CHECKPOINT")
            d = lsn(admin)
            fsid = uuid.uuid4()
            flat = []
            for i, t in enumerate(texts):
                t0 = time.perf_counter_ns()
                admin.execute(
                    "INSERT INTO bench.floor VALUES (%s, %s, %s::jsonb)", (fsid, i, t), prepare=True
                )
                flat.append(time.perf_counter_ns() - t0)
            e = lsn(admin)
            res = {
                "corpus": corpus,
                "variant": variant,
                "payload": payload,
                "wal_appends": lsn_diff(admin, a, b),
                "wal_flush": lsn_diff(admin, b, c),
                "wal_build": wal_build,
                "wal_floor": lsn_diff(admin, d, e),
                "p50_ms": statistics.median(lat) / 1e6,
                "floor_p50_ms": statistics.median(flat) / 1e6,
            }
            store.close()
            after = sizes(admin)
            res["wal_records"] = sb[0] - sa[0]
            res["wal_fpi"] = sb[1] - sa[1]
            res["disk"] = {g: after.get(g, 0) - empty.get(g, 0) for g in after}
        return res
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as server:
            for stmt in VARIANT_UNDO.get(variant, []):
                server.execute(stmt)
        drop_database(admin_dsn, db)


def render(results: list[dict[str, Any]]) -> str:
    """Per corpus and variant: medians [min–max] over rounds; ratios to the floor pair by
    pair within a run (the floor in the same database, right after)."""
    lines = [
        "| corpus | variant | rounds | WAL / payload byte | WAL / the INSERT's | disk / payload"
        " byte | disk / the INSERT's | append p50 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    keys: list[tuple[str, str]] = []
    for r in results:
        if (r["corpus"], r["variant"]) not in keys:
            keys.append((r["corpus"], r["variant"]))
    for corpus, variant in keys:
        rs = [r for r in results if r["corpus"] == corpus and r["variant"] == variant]
        wal = [(r["wal_appends"] + r.get("wal_build", 0)) / r["payload"] for r in rs]
        wal_ratio = [(r["wal_appends"] + r.get("wal_build", 0)) / r["wal_floor"] for r in rs]
        disk = [sum(n for g, n in r["disk"].items() if g != "floor") / r["payload"] for r in rs]
        disk_ratio = [d * r["payload"] / r["disk"]["floor"] for d, r in zip(disk, rs, strict=True)]
        p50 = [r["p50_ms"] for r in rs]
        lines.append(
            f"| {CORPUS_LABELS.get(corpus, corpus)} | {variant} | {len(rs)} | {spread(wal, 2)} |"
            f" {spread(wal_ratio, 2)} | {spread(disk, 3)} | {spread(disk_ratio, 2)} |"
            f" {spread(p50, 3)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--turns", type=int, default=2000)
    p.add_argument("--corpus", choices=CORPUS_CHOICES, default="both")
    p.add_argument("--variants", default=";".join(VARIANTS), help="names, separated by ;")
    p.add_argument("--repeat", type=int, default=1, help="rounds over every variant")
    p.add_argument("--dsn")
    p.add_argument("--json")
    p.add_argument("--render", help="print the table of a --json file of an earlier run")
    args = p.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            print(render(json.load(f)), end="")
        return 0
    results = []
    with open_server(args.dsn) as srv:
        corpora = {s: messages(s, args.turns, 7) for s in corpus_sources(args.corpus)}
        for source, v in (
            (s, v) for _ in range(args.repeat) for s in corpora for v in args.variants.split(";")
        ):
            msgs = corpora[source]
            r = run_one(srv.admin_dsn, source, v, msgs)
            results.append(r)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1, default=str)
            pay = r["payload"]
            disk = r["disk"]
            fl = disk.get("floor", 0) / pay
            ss = sum(n for g, n in disk.items() if g != "floor") / pay
            print(
                f"{source:9} {v:30} WAL/B {r['wal_appends'] / pay:5.2f} "
                f"(+flush {r['wal_flush'] / pay:4.2f}, +build {r['wal_build'] / pay:4.2f}) "
                f"floor {r['wal_floor'] / pay:4.2f} "
                f"ratio {r['wal_appends'] / r['wal_floor']:5.2f} | disk/B {ss:5.3f} "
                f"floor {fl:5.3f} ratio {ss / fl:4.2f} | p50 {r['p50_ms']:.3f} "
                f"floor {r['floor_p50_ms']:.3f}",
                flush=True,
            )
            print(
                f"   WAL records {r['wal_records']}, full-page images {r['wal_fpi']}",
                flush=True,
            )
            print(
                "   disk/B: "
                + ", ".join(
                    f"{g} {n / pay:.3f}" for g, n in sorted(disk.items(), key=lambda x: -x[1])
                ),
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
