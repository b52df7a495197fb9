"""Search with encryption on against off, on the same data in one database: text (session
and tenant scope), vector (tenant scope, a precomputed query vector) and hybrid search.

One corpus is appended twice, one call at a time, into two tenants of ``--sessions``
sessions of ``--turns`` turns: once through a store connected with ``encryption=`` (every
session its own subject, so a tenant-wide search hashes its query for ``--sessions``
keys) and once in plaintext; both embedded with the same small deterministic embedder
(bag of hashed words, so the model's cost, the same either way, is left out of vector
search, which gets a vector). Each call is first made once (the encrypted store's text pass
indexes its sealed turns then), then timed interleaved: per round and per query, on and off
alternate call by call; p50 per round, medians over rounds [min-max], and on/off ratios.

    python -m benchmarks search-encrypted --sessions 50 --turns 40
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import shardstore
from benchmarks.lib.corpus import Corpus
from benchmarks.lib.report import command, progress, quick
from benchmarks.lib.server import open_server
from benchmarks.lib.stats import med, pct
from shardstore.encryption import LocalKeyProvider
from tests.embedders import HashEmbedder

QUERIES = ("refund order status", "timeout error retry", "customer invoice")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn")
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="8 sessions x 10 turns, 2 rounds")
    a = p.parse_args(argv)
    quick(a, p, sessions=8, turns=10, rounds=2, calls=3)
    model = HashEmbedder(dimension=256)
    with tempfile.TemporaryDirectory() as keydir, open_server(a.dsn, keep=False) as srv:
        keys = LocalKeyProvider(Path(keydir) / "keys", key_file=Path(keydir) / "kek")
        enc = shardstore.connect(srv.dsn, encryption=keys, embedding_model=model)
        plain = shardstore.connect(srv.dsn, embedding_model=model)
        corpus = Corpus(a.sessions * a.turns + 1)
        tag = uuid.uuid4().hex[:6]
        tenants = {"on": f"enc-{tag}", "off": f"plain-{tag}"}
        stores = {"on": enc, "off": plain}
        sids: dict[str, list[Any]] = {}
        t0 = time.perf_counter()
        for side, store in stores.items():
            sids[side] = [
                store.create_session(tenants[side], f"user:{i}", "agent") for i in range(a.sessions)
            ]
            for j in range(a.turns):
                for i, sid in enumerate(sids[side]):
                    store.append_turn(sid, corpus.msgs[(i * a.turns + j) % corpus.n])
            store.drain_folds()
            store.embed()
            # the plaintext side's buffered turns indexed too (a maintenance pass), so that
            # neither side indexes on the fly while it is timed
            store.maintain(embed=False)
        progress(f"built 2 x {a.sessions * a.turns} turns in {time.perf_counter() - t0:.1f} s")
        vectors = dict(zip(QUERIES, model.embed(list(QUERIES)), strict=True))

        def calls(side: str, q: str) -> dict[str, Callable[[], Any]]:
            store, tenant, sid = stores[side], tenants[side], sids[side][0]
            return {
                "text, session": lambda: store.search(q, session_id=sid, mode="text", k=5),
                "text, tenant": lambda: store.search(q, tenant_id=tenant, mode="text", k=5),
                "vector, tenant": lambda: store.search(list(vectors[q]), tenant_id=tenant, k=5),
                "hybrid, tenant": lambda: store.search(q, tenant_id=tenant, mode="hybrid", k=5),
            }

        kinds = list(calls("on", QUERIES[0]))
        same: dict[str, int] = {k: 0 for k in kinds}
        scores: dict[str, int] = {k: 0 for k in kinds}
        for q in QUERIES:  # first calls: the text pass; and the rankings compared
            for kind in kinds:
                on = calls("on", q)[kind]()
                off = calls("off", q)[kind]()
                same[kind] += [[t.turn_seq for t in h.turns] for h in on] == [
                    [t.turn_seq for t in h.turns] for h in off
                ]
                # equal scores in equal order: what differs is then only the order of ties
                # (broken by session id, which differs between the two tenants)
                scores[kind] += [round(h.score, 9) for h in on] == [round(h.score, 9) for h in off]
        got: dict[tuple[str, str], list[float]] = {(k, s): [] for k in kinds for s in stores}
        for r in range(a.rounds):
            for kind in kinds:
                lat: dict[str, list[int]] = {"on": [], "off": []}
                for q in QUERIES:
                    fns = {side: calls(side, q)[kind] for side in stores}
                    for _ in range(a.calls):
                        for side in ("on", "off") if r % 2 == 0 else ("off", "on"):
                            t = time.perf_counter_ns()
                            fns[side]()
                            lat[side].append(time.perf_counter_ns() - t)
                for side in stores:
                    got[(kind, side)].append(pct(lat[side], 50) / 1e6)
            progress(f"round {r + 1}/{a.rounds}")
        enc.close()
        plain.close()
    print("# Search with encryption on vs off (issue 36, point 4)\n")
    print(
        f"`{command('search-encrypted', argv)}` at "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: two tenants of {a.sessions} "
        f"sessions x {a.turns} turns (the same corpus; encrypted: one subject per session), "
        f"one database; k=5; per round the p50 of {a.calls} calls x {len(QUERIES)} queries, "
        f"on and off interleaved call by call; medians over {a.rounds} rounds [min-max], ms.\n"
    )
    print(
        f"| search | off | on | on / off | same turns (of {len(QUERIES)} queries) | same scores |"
    )
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        off, on = got[(kind, "off")], got[(kind, "on")]
        ratios = [x / y for x, y in zip(on, off, strict=True)]
        print(
            f"| {kind} | {med(off):.2f} [{min(off):.2f}-{max(off):.2f}] "
            f"| {med(on):.2f} [{min(on):.2f}-{max(on):.2f}] "
            f"| {med(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] | {same[kind]} "
            f"| {scores[kind]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
