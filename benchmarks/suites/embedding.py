"""Embedding worker throughput end to end (database -> model -> vectors committed), beside
the model alone on the same windows, and what a running worker does to appends.

    nice -n 10 python -m benchmarks embedding [--corpus both] [--turns 2000] [--rounds 3]
        [--batch-sizes 16,64] [--model all-MiniLM-L6-v2] [--device cpu] [--model-batch 32]

Per corpus (the synthetic one and the real-text one, ``--corpus``), in one database of one
server: a warm-up loads the model; then each round appends ``--turns`` turns in sessions of
100 (``append_turns``, folds drained, untimed) and times ``store.embed(batch_size=B)`` until
the backlog is empty, for each ``--batch-sizes`` B in turn, interleaved with the model
alone embedding the very windows the worker cut (``plan_windows`` over the same turns), so
``model share`` says how much of the worker's time is the model. Throughput is turns/s,
windows/s and model tokens/s (the model tokenizer's count of every window, what a GPU
throughput figure means); turns/s is the number to size workers with: one worker drains
that many turns a second, so an append rate of R turns/s needs R / turns-per-second
workers (each its own process, or machine with its own accelerator).

``--appends`` (default on): append p50 of a second session while a worker thread embeds a
backlog, against the same appends with no worker, blocks of 50 calls alternating; on a
machine with as many cores as processes the ratio is ~1 (appends never wait for the
worker: it takes no lock an append needs); on fewer cores it is the CPU the model takes.

``--device cuda --model /path/to/bge-m3 --fp16`` runs the production model on a GPU (the
model must be on local disk; nothing is downloaded).

``--free-dimension D`` (default 1024, BGE-M3's; 0 skips it): the database's side alone, the
ceiling of a worker whose model costs nothing (what a fast GPU approaches). The same
turns, cut into windows of ``--free-window`` model tokens (default 8190, BGE-M3's: a turn
is one window unless it is longer) counted by the model's tokenizer, embedded by a free
embedder (pseudo-random unit vectors of D dimensions, a hash of the text each) into a
database of their own: claims, reads, windows, vector writes into the HNSW index, queue
updates.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

import shardstore
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, corpus_sources, messages
from benchmarks.lib.report import progress, quick, write_results
from benchmarks.lib.server import create_database, drop_database, open_server
from benchmarks.lib.stats import med, spread
from shardstore.search.embedding import (
    Embedder,
    SentenceTransformerEmbedder,
    message_text,
    plan_windows,
)

SESSION_TURNS = 100
APPEND_BLOCK = 50


def _embedder(args: argparse.Namespace) -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder(
        args.model, device=args.device, batch_size=args.model_batch
    )
    if args.fp16:
        embedder._load().half()  # the model object sentence-transformers returns
    return embedder


def _append(store: shardstore.Store, msgs: Sequence[dict[str, Any]], tenant: str) -> None:
    for lo in range(0, len(msgs), SESSION_TURNS):
        sid = store.create_session(tenant, f"user-{lo // SESSION_TURNS}", "agent")
        store.append_turns(sid, list(msgs[lo : lo + SESSION_TURNS]))
        store.flush(sid)
    store.drain_folds()


def _windows(embedder: Embedder, msgs: Sequence[dict[str, Any]]) -> list[str]:
    now = datetime.now(UTC)
    turns = [(i, now, message_text(m)) for i, m in enumerate(msgs)]
    return [
        w.text
        for w in plan_windows(turns, embedder.window_tokens, embedder.token_counts, embedder.split)
    ]


@dataclass(frozen=True)
class FreeEmbedder:
    """The model's tokenizer, windows of ``window_tokens``, and vectors that cost nothing to
    compute: a unit vector of ``dimension`` pseudo-random numbers seeded by each text."""

    model: SentenceTransformerEmbedder
    dimension: int
    window_tokens: int

    @property
    def name(self) -> str:
        return f"bench/free-{self.dimension}"

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return self.model.token_counts(texts)

    def split(self, text: str, max_tokens: int) -> list[str]:
        return self.model.split(text, max_tokens)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest())
            v = np.random.default_rng(seed).standard_normal(self.dimension)
            out.append((v / np.linalg.norm(v)).tolist())
        return out


def _database_side(
    args: argparse.Namespace, admin: str, source: str, model: SentenceTransformerEmbedder
) -> dict[str, list[float]]:
    """Turns, windows and model tokens a second of ``embed()`` with a free embedder."""
    db = f"shardstore_embed_free_{os.getpid()}_{source}"
    dsn = create_database(admin, db)
    free = FreeEmbedder(model, args.free_dimension, args.free_window)
    out: dict[str, list[float]] = {"turns": [], "windows": [], "tokens": []}
    try:
        with shardstore.connect(dsn, embedding_model=free) as store:
            for r in range(args.rounds):
                msgs = messages(source, args.turns, 1000 + r)
                texts = _windows(free, msgs)
                tokens = sum(free.token_counts(texts))
                _append(store, msgs, f"free-{r}")
                t0 = time.perf_counter()
                store.embed(batch_size=max(int(b) for b in args.batch_sizes.split(",") if b))
                seconds = time.perf_counter() - t0
                out["turns"].append(len(msgs) / seconds)
                out["windows"].append(len(texts) / seconds)
                out["tokens"].append(tokens / seconds)
                progress(
                    f"{CORPUS_LABELS[source]} round {r + 1} free embedder "
                    f"({args.free_dimension} dimensions): {len(texts) / seconds:,.0f} windows/s"
                )
    finally:
        drop_database(admin, db)
    return out


def _embed_until_done(worker: shardstore.Store, result: list[int], done: threading.Event) -> None:
    try:
        result.append(worker.embed(batch_size=4))
    finally:
        done.set()


def _appends_beside_worker(
    store: shardstore.Store, worker: shardstore.Store, msgs: Sequence[dict[str, Any]], blocks: int
) -> tuple[float, float, int]:
    """Append p50 (ms) with no worker and with a worker embedding, alternating blocks; the
    chunks the worker stored meanwhile."""
    sid = store.create_session("appends", "writer", "agent")
    alone: list[float] = []
    beside: list[float] = []
    stored = 0
    k = 0

    def one_block(into: list[float]) -> None:
        nonlocal k
        for _ in range(APPEND_BLOCK):
            t0 = time.perf_counter_ns()
            store.append_turn(sid, msgs[k % len(msgs)])
            into.append((time.perf_counter_ns() - t0) / 1e6)
            k += 1

    for _ in range(blocks):
        one_block(alone)
        _append(worker, msgs[: SESSION_TURNS * 2], "backlog")
        done = threading.Event()
        result: list[int] = []
        thread = threading.Thread(
            target=_embed_until_done, args=(worker, result, done), daemon=True
        )
        thread.start()
        time.sleep(0.5)  # the worker is past its first claim and into the model
        if not done.is_set():
            one_block(beside)
        thread.join()
        stored += sum(result)
    return med(alone), med(beside), stored


def run_corpus(
    args: argparse.Namespace, admin: str, source: str, lines: list[str], raw: dict[str, Any]
) -> None:
    db = f"shardstore_embed_{os.getpid()}_{source}"
    dsn = create_database(admin, db)
    label = CORPUS_LABELS[source]
    try:
        embedder = _embedder(args)
        with shardstore.connect(dsn, embedding_model=embedder) as store:
            progress(f"{label}: warm-up (loads {args.model} on {args.device})")
            _append(store, messages(source, 8, 99), "warm")
            store.embed()
            batches = [int(b) for b in args.batch_sizes.split(",") if b]
            per: dict[str, dict[str, list[float]]] = {
                str(b): {"turns": [], "windows": [], "tokens": [], "share": []} for b in batches
            }
            model_alone: dict[str, list[float]] = {"turns": [], "tokens": []}
            for r in range(args.rounds):
                msgs = messages(source, args.turns, 1000 + r)
                texts = _windows(embedder, msgs)
                tokens = sum(embedder.token_counts(texts))
                t0 = time.perf_counter()
                embedder.embed(texts)
                alone = time.perf_counter() - t0
                model_alone["turns"].append(len(msgs) / alone)
                model_alone["tokens"].append(tokens / alone)
                for b in batches:
                    _append(store, msgs, f"round-{r}-{b}")
                    t0 = time.perf_counter()
                    store.embed(batch_size=b)
                    seconds = time.perf_counter() - t0
                    row = per[str(b)]
                    row["turns"].append(len(msgs) / seconds)
                    row["windows"].append(len(texts) / seconds)
                    row["tokens"].append(tokens / seconds)
                    row["share"].append(alone / seconds)
                    progress(
                        f"{label} round {r + 1} batch {b}: {len(msgs) / seconds:,.0f} turns/s, "
                        f"{tokens / seconds:,.0f} tokens/s (model alone {tokens / alone:,.0f})"
                    )
            lines += [
                f"## {label}: {args.turns:,} turns a round, "
                f"{len(texts) / len(msgs):.2f} windows and {tokens / len(msgs):,.0f} model tokens "
                "a turn (last round)",
                "",
                "| worker | turns/s | windows/s | model tokens/s | model share of the time |",
                "|---|---|---|---|---|",
            ]
            for b in batches:
                row = per[str(b)]
                lines.append(
                    f"| `embed(batch_size={b})` end to end | {spread(row['turns'], 0)} | "
                    f"{spread(row['windows'], 0)} | {spread(row['tokens'], 0)} | "
                    f"{spread(row['share'], 2)} |"
                )
            lines.append(
                f"| the model alone, same windows | {spread(model_alone['turns'], 0)} | — | "
                f"{spread(model_alone['tokens'], 0)} | 1 |"
            )
            raw[source] = {"batches": per, "model_alone": model_alone}
            if args.free_dimension:
                free = _database_side(args, admin, source, embedder)
                lines.append(
                    f"| the database alone: a free embedder, {args.free_dimension} dimensions, "
                    f"windows of {args.free_window:,} tokens "
                    f"| {spread(free['turns'], 0)} | {spread(free['windows'], 0)} | "
                    f"{spread(free['tokens'], 0)} | 0 |"
                )
                raw[source]["database_alone"] = free
            lines.append("")
            if args.appends:
                with shardstore.connect(dsn, embedding_model=embedder) as worker:
                    a, w, stored = _appends_beside_worker(
                        store, worker, messages(source, 400, 5), args.append_blocks
                    )
                lines += [
                    f"Appends with a worker embedding beside them ({args.append_blocks} blocks "
                    f"of {APPEND_BLOCK} calls each way; the worker stored {stored} chunks): "
                    f"append p50 {a:.3f} ms alone, {w:.3f} ms beside the worker "
                    f"(**{w / a:.2f}×**, {os.cpu_count()} CPUs).",
                    "",
                ]
                raw[source]["appends"] = {"alone_ms": a, "beside_ms": w}
    finally:
        drop_database(admin, db)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=None, help="server to use (default: embedded)")
    parser.add_argument("--corpus", choices=CORPUS_CHOICES, default="both")
    parser.add_argument("--turns", type=int, default=2000, help="turns embedded a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-sizes", default="16,64", help="embed(batch_size=) values")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model-batch", type=int, default=32, help="the model's batch size")
    parser.add_argument("--fp16", action="store_true", help="half precision (GPU)")
    parser.add_argument(
        "--free-dimension", type=int, default=1024, help="the database-side run's vectors (0: none)"
    )
    parser.add_argument(
        "--free-window", type=int, default=8190, help="the database-side run's window tokens"
    )
    parser.add_argument("--no-appends", dest="appends", action="store_false")
    parser.add_argument("--append-blocks", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="200 turns, 1 round")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    quick(args, parser, turns=200, rounds=1, append_blocks=2)
    lines = [
        "# Embedding worker throughput",
        "",
        f"`python -m benchmarks embedding{' --quick' if args.quick else ''}`: model "
        f"`{args.model}` on `{args.device}`{' fp16' if args.fp16 else ''}, model batch "
        f"{args.model_batch}, {args.rounds} round(s); medians [min–max] of rounds. End to end "
        "= `store.embed()` from a backlog of folded chunks to vectors committed (claims, "
        "reads, windows, model, vector writes, queue updates).",
        "",
    ]
    raw: dict[str, Any] = {}
    with open_server(args.dsn) as server:
        for source in corpus_sources(args.corpus):
            run_corpus(args, server.admin_dsn, source, lines, raw)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_results(args.out, text, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
