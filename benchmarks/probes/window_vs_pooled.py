#!/usr/bin/env python
"""Planted facts: one vector per turn (shardstore) vs packed windows vs one pooled vector.

A shardstore chunk (~8,333 cl100k tokens) is far longer than all-MiniLM-L6-v2's window
(256 word pieces). shardstore stores one vector per *window*, and ``plan_windows`` makes one
window per turn: a turn longer than ``window_tokens`` is cut by the embedder's ``split`` into
pieces at word starts, each a window of its own; turns are never packed together. A chunk
scores as its best window. This script measures, on a synthetic agent conversation with
planted facts, how well that finds the chunk holding a fact, against:

* **A (pooled)**: one vector per chunk, the mean of shardstore's window vectors,
  renormalised.
* **A0 (truncated)**: one vector per chunk, the first window of the packed plan below, i.e.
  about the chunk's first ``window_tokens`` (what a model does to a long text it truncates);
  a reference point, not a contender.
* **B packed**: the previous plan, kept here as a reference (shardstore no longer has it):
  consecutive turns packed greedily up to ``window_tokens``, a turn longer than a window
  split as in B. A short fact then shares its window with its neighbours and is averaged
  away by the model's mean pooling.
* **B (shardstore)**: the real ``plan_windows`` / ``chunk_windows``: one window per turn,
  long turns split.

It uses the project's real code: the conversation comes from ``shardstore.demo.synthetic``, it
is cut into chunks with the chunker's rule (consecutive turns while the cl100k count of
their stored JSON stays within ``Settings().budget_tokens``), each chunk is stored-format
JSON turned into windows by ``vector_ops.chunk_windows`` (``plan_windows``), and embedded
by ``SentenceTransformerEmbedder`` in batches of chunks as ``embed()`` does. Every distinct
text is embedded once (a cache by text: a packed window holding a single turn is the same
text as B's window for that turn). No database: search is exact cosine in numpy over
vectors rounded to float16 (pgvector halfvec), which isolates the representation question
from the index.

Run on demand (not part of the test suite)::

    python -m benchmarks.probes.window_vs_pooled [--chunks 40] [--quick] [--seed 7]

Markdown goes to stdout and to ``--out`` (default ``benchmarks/results/scratch/``); raw
numbers to the ``.json`` next to it. Progress goes to stderr. The default run embeds about
3,000 distinct windows (several minutes on a 2-CPU VM); ``--quick`` about a quarter of that.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.lib.report import SCRATCH, write_results
from shardstore.core import jsoncodec
from shardstore.demo import synthetic
from shardstore.history.tokens import make_counter
from shardstore.search.embedding import (
    SentenceTransformerEmbedder,
    Window,
    message_text,
)
from shardstore.search.ops import DEFAULT_BATCH
from shardstore.search.vectors import chunk_windows
from shardstore.settings import Settings

HALFVEC_HEADER = 8  # varlena header + dim + unused, per stored halfvec

# (fact said by the user, two paraphrased questions sharing few words with it)
FACTS: list[tuple[str, tuple[str, str]]] = [
    (
        "My refund reference number is QX-4471 and the charge was on the 3rd of March.",
        ("what was the refund reference?", "which code do I quote to get my money back?"),
    ),
    (
        "Our staging database runs on port 6543.",
        ("which port does staging use?", "how do I connect to the pre-production postgres?"),
    ),
    (
        "The customer's dog is called Biscuit.",
        ("what is the name of the client's pet?", "what did they name their puppy?"),
    ),
    (
        "I'm flying to Lisbon next Thursday for my sister's wedding, so I'll be offline for "
        "three days.",
        ("when will the user be away and why?", "which city is the family ceremony in?"),
    ),
    (
        "The VPN password rotates every 45 days and the current one expires on Friday.",
        (
            "how often must we change the remote access login?",
            "when does the current network secret stop working?",
        ),
    ),
    (
        "Our CFO, Margaret Okonkwo, has to sign off any purchase above 20,000 euros.",
        ("who approves big spending?", "how large an expense needs the finance chief's OK?"),
    ),
    (
        "The office coffee machine on the fourth floor has been broken since Monday.",
        ("is the espresso maker working?", "which floor's kitchen appliance is out of order?"),
    ),
    (
        "We switched the billing provider from Stripe to Adyen in January.",
        ("which payment processor do we use now?", "when did we change how customers get charged?"),
    ),
    (
        "My laptop is a 2019 ThinkPad X1 with only 8 GB of RAM, so large builds swap.",
        ("what computer does the user have?", "how much memory is on the developer's machine?"),
    ),
    (
        "The production cluster lives in the Frankfurt region, eu-central-1.",
        ("where is prod hosted geographically?", "which AWS datacenter serves live traffic?"),
    ),
    (
        "Please never email the client on weekends; they asked for Monday to Friday only.",
        ("when is it okay to contact the customer?", "are there days we must not message them?"),
    ),
    (
        "The on-call phone number for the database team is +44 20 7946 0321.",
        (
            "how do I reach the DB people in an emergency?",
            "what number should I ring when postgres pages at night?",
        ),
    ),
    (
        "Our company was founded in 2011 in a garage in Tallinn.",
        ("where did the firm start?", "how old is the business and what city is its origin?"),
    ),
    (
        "I'm allergic to peanuts, so please don't order satay for the team lunch.",
        ("what food can't the user eat?", "any dietary restrictions for the catering?"),
    ),
    (
        "The SSL certificate for api.example.com expires on 14 November.",
        ("when does the TLS cert need renewing?", "what date does the API host's HTTPS lapse?"),
    ),
    (
        "The quarterly board meeting moved from Tuesday to Wednesday at 3pm.",
        (
            "when do the directors meet this quarter?",
            "what day was the governance session moved to?",
        ),
    ),
    (
        "Our biggest customer, Hollins & Vale, accounts for 38 percent of revenue.",
        ("which client brings in the most money?", "how dependent are we on our top account?"),
    ),
    (
        "The intern, Tobias, starts on the 2nd of September and needs a GitHub account.",
        ("when does the new trainee join?", "who needs access to the code hosting site?"),
    ),
    (
        "The marketing site is built with Hugo and deployed to Netlify.",
        (
            "what static generator powers the public website?",
            "where is the promotional web page hosted?",
        ),
    ),
    (
        "Remember that the legal team wants every contract stored for seven years.",
        ("how long must agreements be retained?", "what is the lawyers' document retention rule?"),
    ),
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the conversation


def build_conversation(
    seed: int, n_chunks: int, n_facts: int, budget: int
) -> tuple[list[dict[str, Any]], list[int], dict[str, float]]:
    """Synthetic messages worth ~n_chunks chunks, with the facts inserted as user turns
    (each just before an ordinary user message, never inside a tool-call group), spread
    evenly by tokens. Returns the messages, the index of each fact, and timings."""
    counter = make_counter(None)
    target = n_chunks * budget
    base: list[dict[str, Any]] = []
    tokens: list[int] = []
    total = 0
    t0 = time.perf_counter()
    for message in synthetic.conversation(seed, 10**7):
        n = counter.count(jsoncodec.encode_message(message))
        if total + n > target and base:
            break
        base.append(message)
        tokens.append(n)
        total += n
    count_s = time.perf_counter() - t0
    # insertion points: the first user message after each (i + 0.5) / n_facts of the tokens
    cum = np.cumsum(tokens)
    points = []
    for i in range(n_facts):
        j = int(np.searchsorted(cum, (i + 0.5) / n_facts * total))
        while j < len(base) and base[j]["role"] != "user":
            j += 1
        points.append(min(j, len(base)))
    out: list[dict[str, Any]] = []
    fact_at: list[int] = []
    k = 0
    for j, message in enumerate(base):
        while k < n_facts and points[k] == j:
            fact_at.append(len(out))
            out.append({"role": "user", "content": FACTS[k][0]})
            k += 1
        out.append(message)
    while k < n_facts:
        fact_at.append(len(out))
        out.append({"role": "user", "content": FACTS[k][0]})
        k += 1
    return out, fact_at, {"count_base_s": count_s, "base_tokens": float(total)}


def chunk_messages(
    messages: list[dict[str, Any]], budget: int
) -> tuple[list[list[int]], list[int], float]:
    """The chunker's rule (append_v1): a turn opens a new chunk when it would take the open
    chunk over ``budget`` cl100k tokens of its stored JSON. Returns the turn indexes of each
    chunk, each chunk's tokens, and the seconds spent encoding + counting."""
    counter = make_counter(None)
    t0 = time.perf_counter()
    counts = [counter.count(jsoncodec.encode_message(m)) for m in messages]
    count_s = time.perf_counter() - t0
    chunks: list[list[int]] = []
    chunk_tokens: list[int] = []
    open_tokens = 0
    for i, n in enumerate(counts):
        if chunks and chunks[-1] and open_tokens + n <= budget:
            chunks[-1].append(i)
            open_tokens += n
        else:
            chunks.append([i])
            chunk_tokens.append(0)
            open_tokens = n
        chunk_tokens[-1] = open_tokens
    return chunks, chunk_tokens, count_s


def stored_chunk_text(messages: list[dict[str, Any]], turns: list[int], start: datetime) -> str:
    """A chunk as agent_history stores it: a JSON array of {s, at, m} envelopes."""
    envelopes = [
        {"s": i, "at": (start + timedelta(seconds=i)).isoformat(), "m": messages[i]} for i in turns
    ]
    return "[" + ",".join(json.dumps(e, ensure_ascii=False) for e in envelopes) + "]"


# ------------------------------------------------------------------ scoring


def to_half(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


def normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def rank_of(scores: np.ndarray, target: int) -> int:
    """1 + how many candidates score strictly higher than the target."""
    return 1 + int(np.sum(scores > scores[target]))


def summarise(ranks: list[int]) -> dict[str, float]:
    return {
        "hit@1": sum(r == 1 for r in ranks) / len(ranks),
        "hit@5": sum(r <= 5 for r in ranks) / len(ranks),
        "mrr": sum(1 / r for r in ranks) / len(ranks),
        "median_rank": float(statistics.median(ranks)),
        "worst_rank": float(max(ranks)),
    }


# ------------------------------------------------------------------ the packed plan (reference)


def chunk_turns(chunk_text: str) -> list[tuple[int, datetime, str]]:
    """A stored chunk's turns as ``chunk_windows`` reads them: (turn_seq, created_at, text)."""
    return [
        (int(e["s"]), datetime.fromisoformat(e["at"]), message_text(e["m"]))
        for e in jsoncodec.loads_envelopes(chunk_text)
    ]


def packed_windows(
    turns: Sequence[tuple[int, datetime, str]],
    window_tokens: int,
    token_counts: Callable[[Sequence[str]], list[int]],
    split: Callable[[str, int], list[str]],
) -> list[Window]:
    """The previous ``plan_windows``, kept as a reference: consecutive whole turns packed
    greedily up to ``window_tokens`` model tokens (joined by newlines), a turn longer than
    a window split into pieces that are windows of their own."""
    counts = token_counts([t[2] for t in turns]) if turns else []
    windows: list[Window] = []
    group: list[tuple[int, datetime, str]] = []
    used = 0

    def close() -> None:
        nonlocal group, used
        if group:
            text = "\n".join(t[2] for t in group)
            windows.append(Window(group[0][0], group[-1][0], group[0][1], group[-1][1], text))
        group, used = [], 0

    for turn, count in zip(turns, counts, strict=True):
        seq, at, text = turn
        if count > window_tokens:
            close()
            windows.extend(Window(seq, seq, at, at, p) for p in split(text, window_tokens))
            continue
        # +1: the newline joining two turns may count as a token
        if group and used + count + 1 > window_tokens:
            close()
        group.append(turn)
        used += count + (1 if len(group) > 1 else 0)
    close()
    return windows


# ------------------------------------------------------------------ main


class VectorCache:
    """float16-rounded vectors by text: each distinct text is embedded once."""

    def __init__(self, embedder: SentenceTransformerEmbedder) -> None:
        self.embedder = embedder
        self.vectors: dict[str, np.ndarray] = {}

    def add(self, texts: Sequence[str]) -> int:
        """Embed the texts not seen yet; returns how many were embedded."""
        new = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if new:
            out = to_half(np.asarray(self.embedder.embed(new), dtype=np.float32))
            self.vectors.update(zip(new, out, strict=True))
        return len(new)

    def stack(self, windows: Sequence[Window]) -> np.ndarray:
        return np.stack([self.vectors[w.text] for w in windows])


def best_per_chunk(scores: np.ndarray, owner: np.ndarray, n_c: int) -> np.ndarray:
    out = np.full(n_c, -np.inf, dtype=np.float32)
    np.maximum.at(out, owner, scores)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=40, help="chunks of conversation (40)")
    parser.add_argument("--quick", action="store_true", help="12 chunks, 10 facts")
    parser.add_argument("--facts", type=int, default=len(FACTS), help="planted facts (20)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=32, help="model batch size (32)")
    parser.add_argument("--out", type=Path, default=SCRATCH / "window_vs_pooled.md")
    args = parser.parse_args(argv)
    n_chunks = 12 if args.quick else args.chunks
    n_facts = min(10 if args.quick else args.facts, len(FACTS))
    if n_facts > n_chunks:
        parser.error("need at least as many chunks as facts")
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    wall0 = time.perf_counter()
    load_before = os.getloadavg()

    settings = Settings()
    budget = settings.budget_tokens
    log(f"building ~{n_chunks} chunks of <= {budget} cl100k tokens, {n_facts} facts")
    messages, fact_at, conv_info = build_conversation(args.seed, n_chunks, n_facts, budget)
    chunks, chunk_tokens, count_s = chunk_messages(messages, budget)
    chunk_of = {i: c for c, turns in enumerate(chunks) for i in turns}
    start = datetime(2025, 1, 1, tzinfo=UTC)
    texts = [stored_chunk_text(messages, turns, start) for turns in chunks]
    n_c = len(chunks)

    t0 = time.perf_counter()
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2", batch_size=args.batch_size)
    window_tokens = embedder.window_tokens  # loads the model
    load_s = time.perf_counter() - t0

    # planning, per stored chunk: shardstore's (the real code), then the packed reference
    t0 = time.perf_counter()
    plans: list[list[Window]] = [chunk_windows(embedder, t, window_tokens) for t in texts]
    plan_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    packed_plans = [
        packed_windows(chunk_turns(t), window_tokens, embedder.token_counts, embedder.split)
        for t in texts
    ]
    packed_plan_s = time.perf_counter() - t0
    flat = [w for plan in plans for w in plan]
    owner = np.array([c for c, plan in enumerate(plans) for _ in plan])
    flat_p = [w for plan in packed_plans for w in plan]
    owner_p = np.array([c for c, plan in enumerate(packed_plans) for _ in plan])
    win_counts = embedder.token_counts([w.text for w in flat])
    win_counts_p = embedder.token_counts([w.text for w in flat_p])
    over = [n - window_tokens for n in win_counts if n > window_tokens]
    over_p = [n - window_tokens for n in win_counts_p if n > window_tokens]
    turn_windows: dict[int, int] = {}
    for w in flat:
        turn_windows[w.first_seq] = turn_windows.get(w.first_seq, 0) + 1
    split_turns = sum(n > 1 for n in turn_windows.values())
    split_pieces = sum(n for n in turn_windows.values() if n > 1)
    log(
        f"{n_c} chunks, window_tokens={window_tokens}: shardstore {len(flat)} windows "
        f"(planning {plan_s:.1f} s, {len(over)} over window_tokens, {split_turns} turns "
        f"split into {split_pieces}); packed {len(flat_p)} windows ({len(over_p)} over)"
    )

    cache = VectorCache(embedder)
    embedder.embed([flat[0].text] * 4)  # warm-up (not timed): first forward pass allocates
    embedded = 0
    t0 = time.perf_counter()
    for b in range(0, n_c, DEFAULT_BATCH):  # as embed(): DEFAULT_BATCH chunks a call
        embedded += cache.add([w.text for plan in plans[b : b + DEFAULT_BATCH] for w in plan])
        done = min(b + DEFAULT_BATCH, n_c)
        rate = embedded / (time.perf_counter() - t0)
        log(f"  B: embedded {done}/{n_c} chunks, {embedded} distinct windows ({rate:.1f}/s)")
    embed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    packed_new = cache.add([w.text for w in flat_p])
    packed_s = time.perf_counter() - t0
    log(f"  B packed: {len(flat_p)} windows, {packed_new} not already embedded, {packed_s:.0f} s")
    W = cache.stack(flat)
    WP = cache.stack(flat_p)

    pooled = np.zeros((n_c, W.shape[1]), dtype=np.float32)
    np.add.at(pooled, owner, W)
    pooled = to_half(normalise(pooled))
    first = np.array([int(np.flatnonzero(owner_p == c)[0]) for c in range(n_c)])
    truncated = WP[first]

    questions = [(k, q) for k in range(n_facts) for q in FACTS[k][1]]
    t0 = time.perf_counter()
    Q = np.asarray(embedder.embed([q for _, q in questions]), dtype=np.float32)
    query_s = time.perf_counter() - t0

    # where each fact sits: its chunk, its windows in each plan, its position in the chunk
    fact_rows = []
    for k in range(n_facts):
        i = fact_at[k]
        c = chunk_of[i]
        wins = [
            int(j) for j in np.flatnonzero(owner == c) if flat[j].first_seq <= i <= flat[j].last_seq
        ]
        wins_p = [
            int(j)
            for j in np.flatnonzero(owner_p == c)
            if flat_p[j].first_seq <= i <= flat_p[j].last_seq
        ]
        turns = chunks[c]
        fact_rows.append(
            {
                "fact": FACTS[k][0],
                "turn": i,
                "chunk": c,
                "windows": wins,
                "packed_windows": wins_p,
                "turn_in_chunk": turns.index(i),
                "turns_in_chunk": len(turns),
                "windows_in_chunk": len(plans[c]),
                "packed_windows_in_chunk": len(packed_plans[c]),
                "chunk_tokens": chunk_tokens[c],
                "fact_model_tokens": embedder.token_counts([message_text(messages[i])])[0],
                "fact_window_model_tokens": [win_counts[j] for j in wins],
                "fact_packed_window_model_tokens": [win_counts_p[j] for j in wins_p],
            }
        )
    fact_chunks = [r["chunk"] for r in fact_rows]
    if len(set(fact_chunks)) != len(fact_chunks):
        log("warning: two facts share a chunk")

    keys = ("A", "A0", "Bp", "B")
    ranks: dict[str, list[int]] = {key: [] for key in keys}
    margins: dict[str, list[float]] = {
        key: [] for key in ("A", "Bp", "B", "window", "window_packed")
    }
    best_is_fact = {"B": 0, "Bp": 0}
    per_question = []
    for qi, (k, q) in enumerate(questions):
        c = fact_rows[k]["chunk"]
        s_win = W @ Q[qi]
        s_pwin = WP @ Q[qi]
        scores = {
            "A": pooled @ Q[qi],
            "A0": truncated @ Q[qi],
            "Bp": best_per_chunk(s_pwin, owner_p, n_c),
            "B": best_per_chunk(s_win, owner, n_c),
        }
        r = {key: rank_of(scores[key], c) for key in keys}
        for key, value in r.items():
            ranks[key].append(value)
        for key in ("A", "Bp", "B"):
            margins[key].append(float(scores[key][c] - np.delete(scores[key], c).max()))
        best = {}
        for key, s, wins, m in (
            ("B", s_win, fact_rows[k]["windows"], "window"),
            ("Bp", s_pwin, fact_rows[k]["packed_windows"], "window_packed"),
        ):
            best[key] = int(np.argmax(s)) in wins
            best_is_fact[key] += best[key]
            margins[m].append(float(max(s[j] for j in wins) - np.delete(s, wins).max()))
        per_question.append(
            {
                "fact": k,
                "question": q,
                "chunk": c,
                "rank_A": r["A"],
                "rank_A0": r["A0"],
                "rank_B_packed": r["Bp"],
                "rank_B": r["B"],
                "best_window_is_fact": best["B"],
                "best_packed_window_is_fact": best["Bp"],
                "window_margin": margins["window"][-1],
                "A_margin": margins["A"][-1],
                "B_packed_margin": margins["Bp"][-1],
                "B_margin": margins["B"][-1],
            }
        )
        log(
            f"  q{qi:02d} rank A={r['A']:>2} A0={r['A0']:>2} Bpacked={r['Bp']:>2} "
            f"B={r['B']:>2}  {q}"
        )

    summary = {key: summarise(v) for key, v in ranks.items()}
    bytes_vec = W.shape[1] * 2

    def per_chunk_stats(counts: list[int], prefix: str) -> dict[str, float]:
        mean = statistics.fmean(counts)
        return {
            f"{prefix}windows_per_chunk_mean": mean,
            f"{prefix}windows_per_chunk_median": float(statistics.median(counts)),
            f"{prefix}windows_per_chunk_min": min(counts),
            f"{prefix}windows_per_chunk_max": max(counts),
            f"{prefix}bytes_per_chunk": bytes_vec * mean,
            f"{prefix}bytes_per_chunk_with_header": (bytes_vec + HALFVEC_HEADER) * mean,
        }

    storage = {
        "dimension": int(W.shape[1]),
        "A_bytes_per_chunk": bytes_vec,
        "A_bytes_per_chunk_with_header": bytes_vec + 8,
        **per_chunk_stats([len(p) for p in plans], "B_"),
        **per_chunk_stats([len(p) for p in packed_plans], "B_packed_"),
    }
    total_tokens = sum(chunk_tokens)
    distinct = len({w.text for w in flat})
    throughput = {
        "embed_s": embed_s,
        "windows_embedded": embedded,
        "windows_per_s": embedded / embed_s,
        "chunks_per_s": n_c / embed_s,
        "plan_s": plan_s,
        "plan_chunks_per_s": n_c / plan_s,
        "packed_plan_s": packed_plan_s,
        "packed_plan_chunks_per_s": n_c / packed_plan_s,
        "cl100k_count_s": count_s,
        "cl100k_tokens_per_s": total_tokens / count_s,
        "query_embed_ms_each": 1000 * query_s / len(questions),
        "model_load_s": load_s,
        "packed_extra_windows": packed_new,
        "packed_extra_embed_s": packed_s,
        "batch_size": args.batch_size,
        "chunks_per_embed_call": DEFAULT_BATCH,
        "torch_threads": _torch_threads(),
    }
    import sentence_transformers
    import torch

    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "numpy": np.__version__,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "config": {
            "model": embedder.name,
            "window_tokens": window_tokens,
            "seed": args.seed,
            "budget_tokens": budget,
            "chunk_tokens_setting": settings.chunk_tokens,
            "n_chunks": n_c,
            "n_windows": len(flat),
            "n_distinct_windows": distinct,
            "n_packed_windows": len(flat_p),
            "n_turns": len(messages),
            "n_split_turns": split_turns,
            "n_split_pieces": split_pieces,
            "n_facts": n_facts,
            "n_questions": len(questions),
            "total_cl100k_tokens": total_tokens,
            "total_model_tokens": int(sum(win_counts)),
            "scoring": "exact cosine, float16-rounded vectors (halfvec)",
        },
        "windows_over_window_tokens": {"count": len(over), "max_excess": max(over, default=0)},
        "packed_windows_over_window_tokens": {
            "count": len(over_p),
            "max_excess": max(over_p, default=0),
        },
        "summary": {
            "A": summary["A"],
            "A0": summary["A0"],
            "B_packed": summary["Bp"],
            "B": summary["B"],
        },
        "best_window_is_fact_window": best_is_fact["B"] / len(questions),
        "best_packed_window_is_fact_window": best_is_fact["Bp"] / len(questions),
        "margins_median": {
            "window": statistics.median(margins["window"]),
            "window_packed": statistics.median(margins["window_packed"]),
            "A": statistics.median(margins["A"]),
            "B_packed": statistics.median(margins["Bp"]),
            "B": statistics.median(margins["B"]),
        },
        "storage": storage,
        "throughput": throughput,
        "facts": fact_rows,
        "questions": per_question,
        "runtime_s": time.perf_counter() - wall0,
        "conversation": conv_info,
    }
    md = render(result)
    print(md)
    write_results(args.out, md, result, indent=2)
    log(f"wrote {args.out} and {args.out.with_suffix('.json')} in {result['runtime_s']:.0f} s")


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def render(r: dict[str, Any]) -> str:
    cfg, s, st, th = r["config"], r["summary"], r["storage"], r["throughput"]
    mm = r["margins_median"]
    wpc = st["B_windows_per_chunk_mean"]
    wpc_p = st["B_packed_windows_per_chunk_mean"]
    fact_tok = statistics.median(f["fact_model_tokens"] for f in r["facts"])
    win_tok = statistics.median(max(f["fact_packed_window_model_tokens"]) for f in r["facts"])
    over, over_p = r["windows_over_window_tokens"], r["packed_windows_over_window_tokens"]
    lines = [
        "# Planted facts: one vector per turn (shardstore) vs packed windows vs one pooled "
        "vector per chunk",
        "",
        f"{r['date']} · {cfg['model']} (window_tokens={cfg['window_tokens']}) · torch "
        f"{r['versions']['torch']} · sentence-transformers "
        f"{r['versions']['sentence_transformers']} · {r['machine']['cpus']} CPUs, load "
        f"{r['machine']['loadavg_before'][0]:.1f}→{r['machine']['loadavg_after'][0]:.1f}",
        "",
        "shardstore's `plan_windows` makes one window per turn; a turn longer than "
        "window_tokens is cut by `split` at word starts into pieces, each a window. Turns are "
        "not packed together. A chunk scores as its best window (B). The packed plan (B "
        "packed) is the previous one, kept in this script as a reference.",
        "",
        f"Synthetic conversation (seed {cfg['seed']}): {cfg['n_turns']} turns, "
        f"{cfg['total_cl100k_tokens']:,} cl100k tokens cut into {cfg['n_chunks']} chunks of "
        f"<= {cfg['budget_tokens']:,} tokens; shardstore's plan: {cfg['n_windows']:,} windows "
        f"({wpc:.1f} per chunk; {cfg['n_split_turns']} turns longer than a window split into "
        f"{cfg['n_split_pieces']}); packed plan: {cfg['n_packed_windows']:,} windows "
        f"({wpc_p:.1f} per chunk). {cfg['n_facts']} planted one-turn facts, 2 paraphrased "
        f"questions each ({cfg['n_questions']} queries). Exact cosine over float16 vectors.",
        "",
        "## Retrieval of the chunk holding the fact",
        "",
        "| representation | vectors/chunk | hit@1 | hit@5 | MRR | median rank | worst rank "
        "| median margin |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [
        ("A", "A: pooled (mean of shardstore's windows, renormalised)", "1", mm["A"]),
        ("A0", "A0: first packed window only (≈ truncation)", "1", None),
        (
            "B_packed",
            "B packed: the previous plan, kept as a reference (consecutive turns "
            "packed greedily up to window_tokens), chunk = best window",
            f"{wpc_p:.1f}",
            mm["B_packed"],
        ),
        (
            "B",
            "**B: shardstore (one window per turn, long turns split), chunk = best window**",
            f"{wpc:.1f}",
            mm["B"],
        ),
    ]
    for key, name, vpc, margin in rows:
        m = s[key]
        mtext = "" if margin is None else f"{margin:+.3f}"
        lines.append(
            f"| {name} | {vpc} | {m['hit@1']:.2f} | {m['hit@5']:.2f} | {m['mrr']:.3f} "
            f"| {m['median_rank']:.0f} | {m['worst_rank']:.0f} | {mtext} |"
        )
    lines += [
        "",
        f"Out of {cfg['n_chunks']} chunks. Margin: the fact chunk's score minus the best other "
        "chunk's (positive = ranked first). B's best window over all "
        f"{cfg['n_windows']:,} windows is the fact's own turn for "
        f"{r['best_window_is_fact_window']:.0%} of the questions (median margin over the best "
        f"other window {mm['window']:+.3f}); B packed's best of its "
        f"{cfg['n_packed_windows']:,} windows is the one holding the fact for "
        f"{r['best_packed_window_is_fact_window']:.0%} ({mm['window_packed']:+.3f}). In B "
        f"packed a fact of {fact_tok:.0f} word pieces (median) shares its window with other "
        f"turns: the window holds {win_tok:.0f} (median), so the fact is "
        f"~{fact_tok / win_tok:.0%} of what is mean-pooled into that window's vector; in B "
        "it is the whole window.",
        "",
        "## Cost",
        "",
        "| | value |",
        "|---|---:|",
        f"| B embedding, windows/s (batch {th['batch_size']}, {th['chunks_per_embed_call']} "
        f"chunks a call, {th['torch_threads']} torch threads) | {th['windows_per_s']:.1f} |",
        f"| B embedding, chunks/s | {th['chunks_per_s']:.2f} |",
        f"| B embedding, total for {th['windows_embedded']:,} distinct windows (of "
        f"{cfg['n_windows']:,}) | {th['embed_s']:.0f} s |",
        f"| B packed extra: {th['packed_extra_windows']:,} of its {cfg['n_packed_windows']:,} "
        f"windows not already embedded for B | {th['packed_extra_embed_s']:.0f} s |",
        f"| planning B (`chunk_windows`: MiniLM token counts + windows), chunks/s "
        f"| {th['plan_chunks_per_s']:.1f} |",
        f"| planning B packed, chunks/s | {th['packed_plan_chunks_per_s']:.1f} |",
        f"| chunker's cl100k counting, tokens/s | {th['cl100k_tokens_per_s']:,.0f} |",
        f"| one query embedding | {th['query_embed_ms_each']:.0f} ms |",
        f"| storage A, per chunk (1 × {st['dimension']} × 2 B halfvec) | "
        f"{st['A_bytes_per_chunk']:,} B |",
        f"| storage B, per chunk ({wpc:.1f} × {st['dimension']} × 2 B; windows/chunk "
        f"{st['B_windows_per_chunk_min']}–{st['B_windows_per_chunk_max']}) | "
        f"{st['B_bytes_per_chunk']:,.0f} B |",
        f"| storage B packed, per chunk ({wpc_p:.1f} × {st['dimension']} × 2 B; windows/chunk "
        f"{st['B_packed_windows_per_chunk_min']}–{st['B_packed_windows_per_chunk_max']}) | "
        f"{st['B_packed_bytes_per_chunk']:,.0f} B |",
        "",
        "A is computed from B's window vectors, so its embedding cost is B's (one pass over "
        "every window); it only saves storage and search work. Each distinct text is embedded "
        "once. The halfvec header (8 B a vector) and row overhead are not counted above.",
        "",
        f"Windows longer than window_tokens after `split` (re-tokenised): B "
        f"{over['count']} (max excess {over['max_excess']} token), B packed "
        f"{over_p['count']} (max excess {over_p['max_excess']}). Run time "
        f"{r['runtime_s']:.0f} s.",
        "",
        "## Per question (rank of the fact's chunk)",
        "",
        "| question | fact turn / turns in chunk | A | A0 | B packed | B | B: best window = fact |",
        "|---|---:|---:|---:|---:|---:|:---:|",
    ]
    facts = r["facts"]
    for q in r["questions"]:
        f = facts[q["fact"]]
        lines.append(
            f"| {q['question']} | {f['turn_in_chunk']}/{f['turns_in_chunk']} | {q['rank_A']} "
            f"| {q['rank_A0']} | {q['rank_B_packed']} | {q['rank_B']} "
            f"| {'yes' if q['best_window_is_fact'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"
    return 0


if __name__ == "__main__":
    sys.exit(main())
