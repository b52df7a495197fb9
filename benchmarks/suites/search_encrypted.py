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
On the synthetic corpus and the real-text one (``--corpus``), each in tenants of its own.

    python -m benchmarks search-encrypted --sessions 50 --turns 40
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import shardstore
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, Corpus, corpus_sources
from benchmarks.lib.report import command, progress, quick
from benchmarks.lib.server import open_server
from benchmarks.lib.stats import med, pct
from shardstore.encryption import LocalKeyProvider
from tests.embedders import HashEmbedder

QUERIES = ("refund order status", "timeout error retry", "customer invoice")


def real_queries(corpus: Corpus, turns: int, count: int = 3, seed: int = 11) -> tuple[str, ...]:
    """Queries for the real-text corpus: two words each, drawn from the prose of the first
    session's messages (a word of at least five letters), so that the session search and
    the tenant search have matches."""
    rng = random.Random(seed)
    words: list[str] = []
    for m in corpus.msgs[:turns]:
        content = m.get("content")
        if isinstance(content, str):
            words.extend(w.lower() for w in re.findall(r"\b[A-Za-z]{5,12}\b", content[:2000]))
    if len(words) < 2 * count:
        raise SystemExit("the real-text corpus holds too few words for queries")
    return tuple(" ".join(rng.sample(words, 2)) for _ in range(count))


def run_corpus(a: argparse.Namespace, dsn: str, source: str, keydir: Path) -> dict[str, Any]:
    """Both tenants built from ``source``'s messages, then every search timed on and off."""
    model = HashEmbedder(dimension=256)
    keys = LocalKeyProvider(keydir / source, key_file=keydir / "kek")
    enc = shardstore.connect(dsn, encryption=keys, embedding_model=model)
    plain = shardstore.connect(dsn, embedding_model=model)
    corpus = Corpus(a.sessions * a.turns + 1, source=source)
    queries = QUERIES if source != "real" else real_queries(corpus, a.turns)
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
    progress(
        f"{source}: built 2 x {a.sessions * a.turns} turns in {time.perf_counter() - t0:.1f} s"
    )
    vectors = dict(zip(queries, model.embed(list(queries)), strict=True))

    def calls(side: str, q: str) -> dict[str, Callable[[], Any]]:
        store, tenant, sid = stores[side], tenants[side], sids[side][0]
        return {
            "text, session": lambda: store.search(q, session_id=sid, mode="text", k=5),
            "text, tenant": lambda: store.search(q, tenant_id=tenant, mode="text", k=5),
            "vector, tenant": lambda: store.search(list(vectors[q]), tenant_id=tenant, k=5),
            "hybrid, tenant": lambda: store.search(q, tenant_id=tenant, mode="hybrid", k=5),
        }

    kinds = list(calls("on", queries[0]))
    same: dict[str, int] = {k: 0 for k in kinds}
    scores: dict[str, int] = {k: 0 for k in kinds}
    hits: dict[str, int] = {k: 0 for k in kinds}
    for q in queries:  # first calls: the text pass; and the rankings compared
        for kind in kinds:
            on = calls("on", q)[kind]()
            off = calls("off", q)[kind]()
            hits[kind] += len(off)
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
            for q in queries:
                fns = {side: calls(side, q)[kind] for side in stores}
                for _ in range(a.calls):
                    for side in ("on", "off") if r % 2 == 0 else ("off", "on"):
                        t = time.perf_counter_ns()
                        fns[side]()
                        lat[side].append(time.perf_counter_ns() - t)
            for side in stores:
                got[(kind, side)].append(pct(lat[side], 50) / 1e6)
        progress(f"{source}: round {r + 1}/{a.rounds}")
    enc.close()
    plain.close()
    return {
        "queries": queries,
        "kinds": kinds,
        "got": got,
        "same": same,
        "scores": scores,
        "hits": hits,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn")
    p.add_argument("--corpus", choices=CORPUS_CHOICES, default="both")
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="8 sessions x 10 turns, 2 rounds")
    a = p.parse_args(argv)
    quick(a, p, sessions=8, turns=10, rounds=2, calls=3)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as keydir, open_server(a.dsn, keep=False) as srv:
        for source in corpus_sources(a.corpus):
            results[source] = run_corpus(a, srv.dsn, source, Path(keydir))
    print("# Search with encryption on vs off (issue 36, point 4)\n")
    print(
        f"`{command('search-encrypted', argv)}` at "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: per corpus two tenants of "
        f"{a.sessions} sessions x {a.turns} turns (the same messages; encrypted: one subject "
        f"per session), one database; k=5; per round the p50 of {a.calls} calls x 3 queries, "
        f"on and off interleaved call by call; medians over {a.rounds} rounds [min-max], ms. "
        "Queries: the synthetic corpus's own words; for real text, two words drawn from the "
        "prose of the first session's messages (the one the session search reads).\n"
    )
    for source, res in results.items():
        print(f"## {CORPUS_LABELS[source]}\n")
        print("queries: " + ", ".join(f"`{q}`" for q in res["queries"]) + "\n")
        print(
            "| search | off | on | on / off | same turns (of 3 queries) | same scores "
            "| hits (off, 3 queries) |"
        )
        print("|---|---|---|---|---|---|---|")
        for kind in res["kinds"]:
            off, on = res["got"][(kind, "off")], res["got"][(kind, "on")]
            ratios = [x / y for x, y in zip(on, off, strict=True)]
            print(
                f"| {kind} | {med(off):.2f} [{min(off):.2f}-{max(off):.2f}] "
                f"| {med(on):.2f} [{min(on):.2f}-{max(on):.2f}] "
                f"| {med(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] "
                f"| {res['same'][kind]} | {res['scores'][kind]} | {res['hits'][kind]} |"
            )
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
