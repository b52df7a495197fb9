"""Text search latency and turn_text size: stripped tsvectors (0022) against tsvectors with
positions (0012-0019), in one database, interleaved.

Both forms predate 0042 (turn_text holds lexeme hashes since; the text-hashes suite compares
those), so the database is migrated to just before 0042. Builds one session of ``N`` turns
(default 10,000) of the comparison corpus, then for 3
rounds rewrites ``turn_text`` with positions, times ``search(mode="text")`` of common
words and of a rare lexeme (15 runs each, the median), rewrites it stripped and times the
same. Prints the median of the round medians with their range, and the table's size in
each form.

    nice -n 10 python -m benchmarks text-strip 10000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.corpus import Corpus
from benchmarks.lib.server import open_server
from shardstore.schema import migrate

LEXEME_MIGRATION = "text_lexeme_hashes"  # 0042

# 0019's text_windows_v1 (positions kept), under another name
POSITIONAL = """
CREATE OR REPLACE FUNCTION shardstore.text_windows_pos(p_config regconfig, p_message jsonb)
RETURNS TABLE (r_window integer, r_tsv tsvector) LANGUAGE sql IMMUTABLE AS $$
    WITH t AS (SELECT string_agg(x.v #>> '{}', ' ' ORDER BY x.ord) AS txt
          FROM jsonb_path_query(p_message, 'strict $.**') WITH ORDINALITY AS x(v, ord)
         WHERE jsonb_typeof(x.v) = 'string')
    SELECT w.i, w.tsv
      FROM t, LATERAL (SELECT g.i,
                              to_tsvector(p_config, substr(t.txt, g.i * 100000 + 1, 100000)) AS tsv
                         FROM generate_series(0, (length(t.txt) - 1) / 100000) AS g(i) OFFSET 0) w
     WHERE t.txt IS NOT NULL AND t.txt <> '' AND w.tsv <> ''::tsvector $$
"""


def rewrite(c: psycopg.Connection[Any], fn: str) -> int:
    """turn_text rebuilt from the chunks with ``fn`` (TRUNCATE: no old pages); its size."""
    c.execute("TRUNCATE shardstore.turn_text")
    c.execute(
        "INSERT INTO shardstore.turn_text (session_id, turn_seq, window_no, chunk_seq,"
        " tenant_id, agent_id, created_at, tsv)"
        " SELECT h.session_id, (e.v->>'s')::bigint, w.r_window, h.chunk_seq, h.tenant_id, NULL,"
        " (e.v->>'at')::timestamptz, w.r_tsv"
        " FROM shardstore.agent_history h, jsonb_array_elements(h.conversation_chunk) AS e(v),"
        f" LATERAL shardstore.{fn}('english', e.v->'m') w"
    )
    c.execute("VACUUM ANALYZE shardstore.turn_text")
    row = c.execute(
        "SELECT sum(pg_total_relation_size(inhrelid))::bigint FROM pg_inherits"
        " WHERE inhparent = 'shardstore.turn_text'::regclass"
    ).fetchone()
    return int(row[0]) if row else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("turns", type=int, nargs="?", default=10_000)
    p.add_argument("--dsn", help="a server to use (default: embedded)")
    p.add_argument("--quick", action="store_true", help="1,000 turns")
    a = p.parse_args(argv)
    n = 1_000 if a.quick else a.turns
    corpus = Corpus(2000)
    with open_server(a.dsn, keep=False) as server:
        full = migrate.all_migrations()
        migrate.baseline()  # cached now: a shorter list then replays the legacy migrations
        cut = next(i for i, m in enumerate(full) if m.name == LEXEME_MIGRATION)
        migrate.all_migrations = lambda: full[:cut]  # type: ignore[assignment]
        try:
            store = shardstore.connect(server.dsn)
        finally:
            migrate.all_migrations = lambda: full  # type: ignore[assignment]
        c = psycopg.connect(server.dsn, autocommit=True)
        c.execute(POSITIONAL)
        sid = store.create_session("bench", "s", "a")
        for lo in range(0, n, 500):
            store.append_turns(sid, [corpus.msgs[i] for i in corpus.seq(lo, 500)])
        store.drain_folds()
        row = c.execute(
            "SELECT l FROM (SELECT unnest(tsvector_to_array(tsv)) l FROM shardstore.turn_text"
            " LIMIT 3000) x WHERE length(l) > 10 ORDER BY l LIMIT 1"
        ).fetchone()
        queries = {"common": "the error file test", "rare": str(row[0]) if row else "zzz"}
        res: dict[str, dict[str, list[float]]] = {
            q: {"positions": [], "stripped": []} for q in queries
        }
        sizes: dict[str, int] = {}
        for _ in range(3):
            for form, fn in (("positions", "text_windows_pos"), ("stripped", "text_windows_v1")):
                sizes[form] = rewrite(c, fn)
                for name, q in queries.items():
                    store.search(q, session_id=sid, mode="text", k=10)
                    ts = []
                    for _ in range(15):
                        t0 = time.perf_counter()
                        store.search(q, session_id=sid, mode="text", k=10)
                        ts.append(time.perf_counter() - t0)
                    res[name][form].append(statistics.median(ts) * 1000)
        store.close()
        print(f"{n:,} turns; rare lexeme {queries['rare']!r}")
        for name in queries:
            for form in ("positions", "stripped"):
                v = res[name][form]
                print(
                    f"{name:7s} {form:9s} median {statistics.median(v):.1f} ms"
                    f" [{min(v):.1f}-{max(v):.1f}]"
                )
        print({k: f"{v / 1e6:.1f} MB" for k, v in sizes.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
