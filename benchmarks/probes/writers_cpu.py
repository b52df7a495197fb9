#!/usr/bin/env python
"""Where the CPU of 8 concurrent writers goes: turns/s, and CPU seconds per turn on the
client (this process) and on the server (every postgres process), per contender.

    python -m benchmarks.probes.writers_cpu [--rounds 7] [--per 300] [--text-off]
                                           [--only ss,lc,floor]

Runs on a fresh embedded server (deleted afterwards). Each round, each contender in turn
gets 8 threads, each with its own connection and session, appending ``--per`` messages of
the compare suite's synthetic agent corpus; then its background work is drained (shardstore's
folds), so the server CPU counted is all the work the turns caused. Client CPU is this
process's user + system time (the background folder thread included); server CPU is the
user + system time of the server's processes from /proc (Linux only). Prints one line per
contender: medians over rounds [min-max]. ``--text-off`` switches shardstore's full-text
indexing off (configure_text_search(None)) to show its share.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import shardstore
from benchmarks.lib.contenders import CONTENDERS, FLOOR, LC, SS, Contender
from benchmarks.lib.corpus import Corpus
from benchmarks.lib.report import progress
from benchmarks.lib.server import open_server


def server_cpu_s() -> float:
    """User + system seconds of every postgres process on this machine."""
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:  # the process ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name.startswith(("postgres", "postmaster")):
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def client_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_round(c: Contender, corpus: Corpus, per: int) -> tuple[float, float, float]:
    """(turns/s, client us per turn, server us per turn) of 8 writers."""
    writers = [c.writer() for _ in range(8)]
    sids = [c.new_session(w) for w in writers]
    work = [[w.prepare(i) for i in corpus.take(per)] for w in writers]
    barrier = threading.Barrier(9)

    def run(j: int) -> None:
        barrier.wait()
        for obj in work[j]:
            writers[j].append(sids[j], obj)

    threads = [threading.Thread(target=run, args=(j,)) for j in range(8)]
    for t in threads:
        t.start()
    c0, s0 = client_cpu_s(), server_cpu_s()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    c.settle()  # the background folds the turns caused count too
    c1, s1 = client_cpu_s(), server_cpu_s()
    for w in writers:
        w.close()
    n = 8 * per
    return n / wall, (c1 - c0) / n * 1e6, (s1 - s0) / n * 1e6


def summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f} [{min(xs):,.0f}-{max(xs):,.0f}]"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--per", type=int, default=300, help="appends per writer per round")
    p.add_argument("--text-off", action="store_true")
    p.add_argument("--only", default="ss,lc,floor")
    a = p.parse_args(argv)
    kinds = {"ss": SS, "lc": LC, "floor": FLOOR}
    with open_server(None, keep=False) as srv:
        corpus = Corpus(2000)
        counter = shardstore.history.tokens.make_counter(None)
        cs: dict[str, Any] = {}
        for k in a.only.split(","):
            cs[k] = CONTENDERS[kinds[k]](srv.dsn, corpus, counter)
            cs[k].setup()
        if a.text_off and "ss" in cs:
            cs["ss"].store.configure_text_search(None)
        res: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cs}
        for r in range(a.rounds):
            order = list(cs)[r % len(cs) :] + list(cs)[: r % len(cs)]
            for k in order:
                res[k].append(one_round(cs[k], corpus, a.per))
            progress(f"round {r + 1}/{a.rounds}")
        for k, rows in res.items():
            print(
                f"{k}: turns/s {summary([x[0] for x in rows])}, "
                f"client us/turn {summary([x[1] for x in rows])}, "
                f"server us/turn {summary([x[2] for x in rows])}"
            )
        for c in cs.values():
            c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
