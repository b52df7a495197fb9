#!/usr/bin/env python
"""Encryption at rest on against off: ``append_turn``, ``tail(n=20)`` and ``restore(n=20)``
latency, interleaved call by call, and disk per payload byte, on the synthetic and the
real-text corpus.

    nice -n 10 python -m benchmarks encryption [--quick] [--corpus synthetic|real|both]

For each corpus two databases on one server, one written by a store without encryption
("off"), one by a store connected with ``encryption=LocalKeyProvider(...)`` ("on"), the same
messages in both. Each round appends ``--calls`` turns to a fresh session of each database,
the two alternating call by call (the one that goes first alternates by round), then reads
``tail(n=20)`` and ``restore(n=20)`` of a ``--history``-turn session (built with
``append_turns`` in batches, folded, a checkpoint at its end) the same way. Reports the
median over rounds of each round's p50, with [min-max] of the rounds, and of the per-round
ratio on / off (goal: at most 1.25); then ``pg_total_relation_size`` of the schema after
``VACUUM`` per payload byte, once a maintenance pass has written every text window (the
encrypted store's keyed windows are written by its client, at a search or ``maintain()``;
the plaintext ones by the server as it folds). Each call's statements: an encrypted append
is one statement from the head the store kept after its previous append to the session (the
first append of each round's session reads the head, locked, in a transaction of its own);
an encrypted ``tail`` or ``restore(n=...)`` as many as the plain one (the session's rewind
epochs come with the window).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

import shardstore
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, Corpus, corpus_sources
from benchmarks.lib.report import Report, command, progress, quick, write_results
from benchmarks.lib.server import create_database, drop_database, open_server, schema_bytes
from benchmarks.lib.stats import med_range, spread
from shardstore.encryption import LocalKeyProvider

MODES = ("off", "on")
GOAL = 1.25


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e6


def _build(store: shardstore.Store, corpus: Corpus, turns: int) -> tuple[uuid.UUID, int]:
    """A session of ``turns`` turns of the corpus, folded, a checkpoint at its end."""
    sid = store.create_session("bench", "subject", "agent")
    payload = 0
    for lo in range(0, turns, 200):
        idx = corpus.seq(lo, min(200, turns - lo))
        store.append_turns(sid, [corpus.msgs[i] for i in idx])
        payload += corpus.payload(idx)
    store.checkpoint(sid, {"step": turns, "plan": "resume from here"})
    store.flush(sid)
    store.drain_folds()
    return sid, payload


def run_corpus(
    a: argparse.Namespace, server_admin: str, base: str, source: str, key_dir: Path
) -> dict[str, Any]:
    corpus = Corpus(2000, source=source)
    dsns = {mode: create_database(server_admin, f"{base}_{source}_{mode}") for mode in MODES}
    stores = {
        "off": shardstore.connect(dsns["off"]),
        "on": shardstore.connect(
            dsns["on"], encryption=LocalKeyProvider(key_dir / source, key_file=key_dir / "kek")
        ),
    }
    try:
        t0 = time.perf_counter()
        history: dict[str, uuid.UUID] = {}
        payload = {mode: 0 for mode in MODES}
        for mode, store in stores.items():
            history[mode], payload[mode] = _build(store, corpus, a.history)
        progress(f"{source}: built {a.history}-turn sessions in {time.perf_counter() - t0:.0f} s")
        p50: dict[tuple[str, str], list[float]] = {}
        for r in range(a.rounds):
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            sessions = {m: stores[m].create_session("bench", f"r{r}", "agent") for m in MODES}
            idx = corpus.take(a.calls)
            lat: dict[tuple[str, str], list[float]] = {}
            for i in idx:
                for mode in order:
                    s, sid, m = stores[mode], sessions[mode], corpus.msgs[i]
                    lat.setdefault(("append_turn", mode), []).append(
                        _timed(partial(s.append_turn, sid, m))
                    )
                    payload[mode] += corpus.nbytes[i]
            for _ in range(a.calls):
                for mode in order:
                    s, sid = stores[mode], history[mode]
                    lat.setdefault(("tail(n=20)", mode), []).append(
                        _timed(partial(s.tail, sid, n=20))
                    )
                    lat.setdefault(("restore(n=20)", mode), []).append(
                        _timed(partial(s.restore, sid, n=20))
                    )
            for key, values in lat.items():
                p50.setdefault(key, []).append(statistics.median(values))
            for mode in MODES:
                stores[mode].drain_folds()
            progress(f"{source}: round {r + 1}/{a.rounds}")
        disk: dict[str, float] = {}
        for mode in MODES:
            stores[mode].maintain(embed=False)  # every text window written, on both sides
            with psycopg.connect(dsns[mode], autocommit=True) as c:
                disk[mode] = schema_bytes(c, "shardstore") / payload[mode]
        calls = sorted(
            {call for call, _ in p50}, key=["append_turn", "tail(n=20)", "restore(n=20)"].index
        )
        result: dict[str, Any] = {"calls": {}, "disk_per_payload_byte": disk}
        for call in calls:
            off, on = p50[(call, "off")], p50[(call, "on")]
            ratios = [b / x for b, x in zip(on, off, strict=True)]
            result["calls"][call] = {
                "off_ms": med_range(off),
                "on_ms": med_range(on),
                "ratio": med_range(ratios),
                "rounds": {"off": off, "on": on},
            }
        return result
    finally:
        for store in stores.values():
            store.close()
        for mode in MODES:
            drop_database(server_admin, f"{base}_{source}_{mode}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", choices=CORPUS_CHOICES, default="both")
    p.add_argument("--history", type=int, default=2000, help="turns of the read sessions")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=60, help="timed calls per round and contender")
    p.add_argument("--dsn", help="a server to use (default: embedded)")
    p.add_argument("--out", help="OUT.md and OUT.json")
    p.add_argument("--quick", action="store_true", help="400 turns, 2 rounds of 15 calls")
    a = p.parse_args(argv)
    quick(a, p, history=400, rounds=2, calls=15)
    results: dict[str, Any] = {}
    with open_server(a.dsn, keep=False) as server, tempfile.TemporaryDirectory() as keys:
        base = conninfo_to_dict(server.dsn)["dbname"]
        for source in corpus_sources(a.corpus):
            results[source] = run_corpus(a, server.admin_dsn, str(base), source, Path(keys))
    rep = Report()
    rep.add(
        "# Encryption at rest: on vs off",
        "",
        f"`{command('encryption', argv)}`: {a.rounds} rounds of {a.calls} calls per contender,"
        f" read sessions of {a.history} turns (folded, a checkpoint at the end); p50 per round,"
        " median [min–max] over rounds; ratio = on / off within each round"
        f" (goal ≤ {GOAL}). Encrypted append: one statement from the head the store kept"
        " after its previous append (a session's first: the head read, locked, and the append"
        " in one transaction); encrypted `tail` and `restore(n=...)`: as many statements as"
        " the plain ones (the rewind epochs come with the window). A commit's fsync dominates"
        " `append_turn` in rounds where the disk is slow. Disk: after a maintenance pass"
        " (every text window written: keyed ones by the encrypted store's client).",
        "",
    )
    for source, res in results.items():
        rep.add(f"## {CORPUS_LABELS.get(source, source)}", "")
        rows = []
        for call, r in res["calls"].items():
            ratio = r["ratio"]["p50"]
            rows.append(
                [
                    f"`{call}`",
                    spread(r["rounds"]["off"], 3),
                    spread(r["rounds"]["on"], 3),
                    f"{ratio:.2f} [{r['ratio']['min']:.2f}–{r['ratio']['max']:.2f}]",
                    "yes" if ratio <= GOAL else "**no**",
                ]
            )
        rep.table(["call", "off, ms", "on, ms", "on / off", f"≤ {GOAL}"], rows)
        d = res["disk_per_payload_byte"]
        rep.table(
            ["disk per payload byte", "off", "on", "on / off"],
            [
                [
                    "schema after VACUUM",
                    f"{d['off']:.3f}",
                    f"{d['on']:.3f}",
                    f"{d['on'] / d['off']:.2f}",
                ]
            ],
        )
    if a.out:
        write_results(a.out, rep.text(), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
