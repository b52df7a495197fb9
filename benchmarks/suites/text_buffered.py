"""Tenant text search over many active sessions: buffered turns indexed on the fly against
windows written ahead by the store (migration 0038), in one database.

Builds one tenant of ``--sessions`` sessions (default 100) of ``--turns`` turns each (default
30, appended one call at a time as agents write them: each session's newest turns stay
buffered, the sealed chunks a fold keeps for ``tail()`` among them), then times
``search(mode="text", tenant_id=...)`` for a few queries in four states of the same data:

* ``as appended``: what the store leaves (the fold after each seal indexed the kept chunks);
* ``none indexed``: every buffered turn's windows deleted again, what the store did before
  0038 (every search indexes every buffered turn of the tenant);
* ``after maintain``: ``maintain()``'s pass indexed the rest (open chunks included);
* ``all folded``: every session flushed (every turn folded, the floor of this design).

Each state: ``--rounds`` rounds, each query ``--calls`` times, the p50 per round; medians
over rounds [min-max]. The rankings of the four states are compared too (they must agree:
the tenant's windows stay under the ranking's exact-scope threshold only at small sizes, so
this is reported, not asserted).

    python -m benchmarks text-buffered --sessions 100 --turns 30
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.corpus import Corpus
from benchmarks.lib.report import command, progress, quick
from benchmarks.lib.server import open_server
from benchmarks.lib.stats import med, pct

QUERIES = ("refund order status", "timeout error retry", "customer invoice")


def timed(store: Any, tenant: str, rounds: int, calls: int) -> dict[str, list[float]]:
    """Per query, the p50 (ms) of each round."""
    out: dict[str, list[float]] = {q: [] for q in QUERIES}
    for _ in range(rounds):
        for q in QUERIES:
            lat = []
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                store.search(q, tenant_id=tenant, mode="text", k=5)
                lat.append(time.perf_counter_ns() - t0)
            out[q].append(pct(lat, 50) / 1e6)
    return out


def ranking(store: Any, tenant: str) -> list[list[tuple[Any, ...]]]:
    return [
        [
            (h.session_id, h.chunk_seq, [t.turn_seq for t in h.turns])
            for h in store.search(q, tenant_id=tenant, mode="text", k=5)
        ]
        for q in QUERIES
    ]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn")
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="10 sessions x 10 turns, 2 rounds")
    a = p.parse_args(argv)
    quick(a, p, sessions=10, turns=10, rounds=2, calls=2)
    with open_server(a.dsn, keep=False) as srv:
        store = shardstore.connect(srv.dsn)
        corpus = Corpus(a.sessions * a.turns + 1)
        tenant = f"bench-{uuid.uuid4().hex[:6]}"
        sids = [store.create_session(tenant, f"user:{i}", "agent") for i in range(a.sessions)]
        t0 = time.perf_counter()
        k = 0
        for j in range(a.turns):  # round robin: every session active at once
            for i, sid in enumerate(sids):
                # session i holds a stretch of the corpus, so tool results follow their calls
                store.append_turn(sid, corpus.msgs[(i * a.turns + j) % corpus.n])
                k += 1
        store.close()  # waits for the background folds
        store = shardstore.connect(srv.dsn)
        progress(f"built {k} turns in {time.perf_counter() - t0:.1f} s")
        with psycopg.connect(srv.dsn, autocommit=True) as c:

            def census() -> str:
                row = c.execute(
                    "SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM"
                    " shardstore.turn_text t WHERE t.session_id = b.session_id"
                    " AND t.turn_seq = b.turn_seq)) FROM shardstore.turn_buffer b"
                ).fetchone()
                assert row is not None
                return f"{row[0]} buffered turns, {row[1]} without windows"

            states: list[tuple[str, str, dict[str, list[float]], list[Any]]] = []

            def measure(name: str) -> None:
                c.execute("VACUUM ANALYZE shardstore.turn_text")
                c.execute("VACUUM ANALYZE shardstore.turn_buffer")
                seen = census()
                got = timed(store, tenant, a.rounds, a.calls)
                states.append((name, seen, got, ranking(store, tenant)))
                progress(f"{name}: {seen}; " + ", ".join(f"{med(v):.1f}" for v in got.values()))

            measure("as appended")
            c.execute(
                "DELETE FROM shardstore.turn_text t USING shardstore.turn_buffer b"
                " WHERE t.session_id = b.session_id AND t.turn_seq = b.turn_seq"
            )
            measure("none indexed (before 0038)")
            report = store.maintain(embed=False)
            progress(f"maintain indexed {report.text_turns_indexed} turns")
            measure("after maintain")
            for sid in sids:
                store.flush(sid)
            measure("all folded")
        store.close()
    print("# Tenant text search over active sessions (migration 0038)\n")
    print(
        f"`{command('text-buffered', argv)}` at "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: one tenant, {a.sessions} "
        f"sessions x {a.turns} turns appended one call at a time (round robin); "
        f"search(mode='text', tenant_id=..., k=5), p50 of {a.calls} calls per query per round, "
        f"medians over {a.rounds} rounds [min-max], ms.\n"
    )
    print("| state | buffer | " + " | ".join(f"`{q}`" for q in QUERIES) + " |")
    print("|---|---|" + "---|" * len(QUERIES))
    for name, seen, got, _ in states:
        cells = [f"{med(v):.1f} [{min(v):.1f}-{max(v):.1f}]" for v in got.values()]
        print(f"| {name} | {seen} | " + " | ".join(cells) + " |")
    same = all(s[3] == states[0][3] for s in states)
    print(f"\nSame top-5 in every state: {'yes' if same else 'no'}", end="")
    if not same:
        equal = [name for name, _, _, r in states if r == states[1][3]]
        print(f" (the on-the-fly state's in: {', '.join(equal)})", end="")
    print(".")
    base = statistics.median(med(v) for v in states[1][2].values())
    for name, _, got, _ in states:
        level = statistics.median(med(v) for v in got.values())
        print(f"- {name}: {level / base:.2f}x the on-the-fly state")
    return 0


if __name__ == "__main__":
    sys.exit(main())
