#!/usr/bin/env python
"""A small probe of the hot path: ``append_turn`` and ``tail(n=20)`` latency, per round.

    python -m benchmarks.probes.hot_path --dsn DSN [--rounds 7] [--calls 200]

Creates one session in the database ``DSN`` names (migrating it if needed), fills it with
200 turns (folded chunks and a buffered open chunk), then per round times ``calls``
single-turn appends of a 1.6 kB message and ``calls`` tails, one call at a time on one
connection (autocommit). Prints one JSON line: the p50 of each round, in milliseconds.
Used for docs/scale-out.md: the same probe against two code versions on one server (A/B,
interleaved) and against a Citus coordinator. ``--distribute`` runs store.distribute()
first (Citus), ``--no-delegate`` without function delegation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Sequence

import shardstore

MESSAGE = {"role": "user", "content": "lorem ipsum dolor sit amet " * 60}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn", required=True)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--distribute", action="store_true")
    p.add_argument("--no-delegate", action="store_true")
    args = p.parse_args(argv)
    store = shardstore.connect(args.dsn, background_fold=False)
    if args.distribute:
        store.distribute(delegate=not args.no_delegate)
    sid = store.create_session(f"probe-{uuid.uuid4().hex[:6]}", "u", "a")
    store.append_turns(sid, [MESSAGE] * 200)
    for _ in range(20):  # warm the connection, plans and caches
        store.append_turn(sid, MESSAGE)
        store.tail(sid, n=20)
    appends: list[float] = []
    tails: list[float] = []
    for _ in range(args.rounds):
        times = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            store.append_turn(sid, MESSAGE)
            times.append(time.perf_counter() - t0)
        appends.append(statistics.median(times) * 1000)
        times = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            store.tail(sid, n=20)
            times.append(time.perf_counter() - t0)
        tails.append(statistics.median(times) * 1000)
    store.close()
    print(json.dumps({"append_p50_ms": appends, "tail_p50_ms": tails}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
