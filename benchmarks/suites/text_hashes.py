#!/usr/bin/env python
"""Text windows as lexeme hashes (migration 0042) against stripped tsvectors (0022-0041):
turn_text's size and text search latency, two databases on one server, interleaved.

    nice -n 10 python -m benchmarks text-hashes [--turns 10000] [--sessions 100]

Builds the same history in two databases, one migrated up to 0041 (tsvectors), one to the
newest migration (hashes): one session of ``--turns`` turns of the comparison corpus and a
second tenant of ``--sessions`` sessions of 100 turns, each with ``append_turns`` in
batches and folded. Reports ``turn_text``'s heap, TOAST and index bytes per payload byte
after ``VACUUM``, and the median of per-round medians [min-max] of ``search(mode="text")``
in a session and in a tenant, for common words and for a rare lexeme, the two databases
queried call by call in turn. Prints markdown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

import shardstore
from benchmarks.lib.corpus import Corpus
from benchmarks.lib.report import progress, quick
from benchmarks.lib.server import create_database, drop_database, open_server
from benchmarks.lib.stats import spread
from shardstore.schema import migrate

LEXEME_MIGRATION = "text_lexeme_hashes"
SIZES = (
    "SELECT sum(pg_relation_size(i.inhrelid)), sum(pg_indexes_size(i.inhrelid)),"
    " sum(pg_total_relation_size(i.inhrelid))"
    " FROM pg_inherits i WHERE i.inhparent = 'shardstore.turn_text'::regclass"
)


def build(store: shardstore.Store, corpus: Corpus, turns: int, sessions: int) -> tuple[Any, int]:
    """The long session (returned) and the tenant's sessions; the payload in bytes."""
    payload = 0
    sid = store.create_session("long", "s", "a")
    for lo in range(0, turns, 500):
        idx = corpus.seq(lo, min(500, turns - lo))
        store.append_turns(sid, [corpus.msgs[i] for i in idx])
        payload += corpus.payload(idx)
    store.flush(sid)
    for k in range(sessions):
        other = store.create_session("many", f"s{k}", "a")
        idx = corpus.seq(turns + k * 100, 100)
        store.append_turns(other, [corpus.msgs[i] for i in idx])
        payload += corpus.payload(idx)
        store.flush(other)
    store.drain_folds()
    return sid, payload


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--turns", type=int, default=10_000)
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=11)
    p.add_argument("--dsn", help="a server to use (default: embedded)")
    p.add_argument("--quick", action="store_true", help="1,000 turns, 10 sessions, 2 rounds")
    a = p.parse_args(argv)
    quick(a, p, turns=1_000, sessions=10, rounds=2, calls=3)
    corpus = Corpus(5000)
    full = migrate.all_migrations()
    migrate.baseline()  # cached now: a shorter list then replays the legacy migrations
    cut = next(i for i, m in enumerate(full) if m.name == LEXEME_MIGRATION)
    with open_server(a.dsn, keep=False) as server:
        tsv_db = conninfo_to_dict(server.dsn)["dbname"] + "_tsv"
        dsns = {
            "tsvector": create_database(server.admin_dsn, tsv_db),
            "hashes": server.dsn,
        }
        stores: dict[str, shardstore.Store] = {}
        migrate.all_migrations = lambda: full[:cut]  # type: ignore[assignment]
        stores["tsvector"] = shardstore.connect(dsns["tsvector"])
        migrate.all_migrations = lambda: full  # type: ignore[assignment]
        stores["hashes"] = shardstore.connect(dsns["hashes"])
        sids: dict[str, Any] = {}
        payload = 0
        for form, store in stores.items():
            t0 = time.perf_counter()
            sids[form], payload = build(store, corpus, a.turns, a.sessions)
            progress(f"{form}: built in {time.perf_counter() - t0:.0f} s")
        sizes: dict[str, tuple[float, float, float]] = {}
        rare = "zzz"
        for form, dsn in dsns.items():
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("VACUUM ANALYZE")
                heap, idx, total = c.execute(SIZES).fetchone()  # type: ignore[misc]
                sizes[form] = (heap / payload, idx / payload, total / payload)
        with psycopg.connect(dsns["tsvector"]) as c:
            row = c.execute(
                "SELECT l FROM (SELECT unnest(tsvector_to_array(tsv)) l FROM shardstore.turn_text"
                " LIMIT 3000) x WHERE length(l) > 10 ORDER BY l LIMIT 1"
            ).fetchone()
            rare = str(row[0]) if row else rare
        queries = {"common words": "the error file test", "a rare lexeme": rare}
        scopes = {"session (10^4 turns)": "session", f"tenant ({a.sessions} x 100)": "tenant"}
        res: dict[tuple[str, str, str], list[float]] = {}
        for r in range(a.rounds):
            for scope_name, scope in scopes.items():
                for qname, q in queries.items():
                    lat: dict[str, list[float]] = {f: [] for f in stores}
                    order = list(stores) if r % 2 == 0 else list(reversed(stores))
                    for _ in range(a.calls):
                        for form in order:
                            store = stores[form]
                            kw: dict[str, Any] = (
                                {"session_id": sids[form]}
                                if scope == "session"
                                else {"tenant_id": "many"}
                            )
                            t0 = time.perf_counter()
                            store.search(q, mode="text", k=10, **kw)
                            lat[form].append((time.perf_counter() - t0) * 1000)
                    for form in stores:
                        res.setdefault((scope_name, qname, form), []).append(
                            statistics.median(lat[form])
                        )
            progress(f"round {r + 1}/{a.rounds}")
        for store in stores.values():
            store.close()
        drop_database(server.admin_dsn, tsv_db)
    print("# Text windows as lexeme hashes (0042) vs stripped tsvectors\n")
    print(
        f"`python -m benchmarks text-hashes --turns {a.turns} --sessions {a.sessions}`;"
        f" {payload / 1e6:.1f} MB of payload in each database; rare lexeme {rare!r}.\n"
    )
    print("| turn_text per payload byte | heap | indexes | total (with TOAST) |")
    print("|---|---:|---:|---:|")
    for form, (h, i, t) in sizes.items():
        print(f"| {form} | {h:.3f} | {i:.3f} | {t:.3f} |")
    print("\n| search(mode='text'), ms | tsvector | hashes | hashes / tsvector |")
    print("|---|---|---|---|")
    for scope_name in scopes:
        for qname in queries:
            old, new = res[(scope_name, qname, "tsvector")], res[(scope_name, qname, "hashes")]
            ratios = [n / o for n, o in zip(new, old, strict=True)]
            cells = [f"{scope_name}, {qname}", spread(old, 1), spread(new, 1), spread(ratios, 2)]
            print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
