#!/usr/bin/env python
"""Citus against one node: ``append_turn`` and ``tail(n=20)`` through a Citus coordinator
and on a single PostgreSQL, interleaved call by call, on the synthetic and the real-text
corpus; and the profile of one call on Citus (issue 41, goal 5).

    SHARDSTORE_CITUS_DSN=postgresql://USER@COORDINATOR/DB \\
        nice -n 10 python -m benchmarks citus [--quick] [--single-dsn DSN]

Needs a Citus coordinator with workers, and ``citus`` and ``vector`` created in the database
``SHARDSTORE_CITUS_DSN`` names on every node (``--citus-dsn`` overrides it); without one it
says so and exits 2. That database is migrated and distributed (``store.distribute()``,
idempotent) and written to: use a scratch database. The single node is the embedded server
(a scratch database, dropped afterwards) or ``--single-dsn``'s server (a scratch database
there too); name a plain PostgreSQL of the Citus build's major version to compare the
engines alike.

Per corpus, one store on each side (defaults: background folds) builds a ``--history``-turn
session with ``append_turns`` (its newest turns buffered, as a session written turn by turn
leaves them); then each round appends ``--calls`` turns to a fresh session on each side, the
two alternating call by call (which one goes first alternates by round), then reads
``tail(n=20)`` of the history sessions the same way. Reports the median over rounds of each
round's p50, with [min–max] of the rounds, and of the per-round ratio Citus / one node
(goals: append ≤ 2, tail ≤ 1.5).

The profile, on Citus: the client's round trips per call (tests/wire.py's proxy, a store
without a background folder), the coordinator's remote commands per call
(``citus.log_remote_commands`` on the store's one connection: how many, whether a
transaction block or 2PC wraps them), and what the call runs on the worker holding the
session (the same statement sent to that worker with ``citus.log_local_commands``: the
statements Citus plans and runs on the shards; none where the call works on the shards
directly, docs/decisions/0027-citus-append-and-tail.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import shardstore
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, Corpus, corpus_sources
from benchmarks.lib.report import Report, command, progress, quick, write_results
from benchmarks.lib.server import open_server
from benchmarks.lib.stats import med_range, spread
from shardstore.core import jsoncodec
from shardstore.core.sql import query
from tests.wire import WireProxy

SIDES = ("single", "citus")
GOALS = {"append_turn": 2.0, "tail(n=20)": 1.5}
ENV = "SHARDSTORE_CITUS_DSN"


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e6


def _build(store: shardstore.Store, corpus: Corpus, turns: int) -> uuid.UUID:
    sid = store.create_session("bench", "history", "agent")
    for lo in range(0, turns, 100):
        store.append_turns(sid, [corpus.msgs[i] for i in corpus.seq(lo, min(100, turns - lo))])
    store.drain_folds()
    return sid


def run_corpus(
    a: argparse.Namespace, stores: dict[str, shardstore.Store], source: str
) -> dict[str, Any]:
    corpus = Corpus(2000, source=source)
    history = {side: _build(stores[side], corpus, a.history) for side in SIDES}
    progress(f"{source}: built the {a.history}-turn sessions")
    p50: dict[tuple[str, str], list[float]] = {}
    for r in range(a.rounds):
        order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
        sessions = {s: stores[s].create_session("bench", f"r{r}", "agent") for s in SIDES}
        for side in SIDES:  # a session's first turn takes the batch path: not what is timed
            stores[side].append_turn(sessions[side], corpus.msgs[0])
        lat: dict[tuple[str, str], list[float]] = {}
        for i in corpus.take(a.calls):
            for side in order:
                fn = partial(stores[side].append_turn, sessions[side], corpus.msgs[i])
                lat.setdefault(("append_turn", side), []).append(_timed(fn))
        for _ in range(a.calls):
            for side in order:
                read = partial(stores[side].tail, history[side], n=20)
                lat.setdefault(("tail(n=20)", side), []).append(_timed(read))
        for key, values in lat.items():
            p50.setdefault(key, []).append(statistics.median(values))
        for side in SIDES:
            stores[side].drain_folds()
        progress(f"{source}: round {r + 1}/{a.rounds}")
    out: dict[str, Any] = {}
    for call in GOALS:
        single, citus = p50[(call, "single")], p50[(call, "citus")]
        ratios = [c / s for c, s in zip(citus, single, strict=True)]
        out[call] = {
            "single_ms": med_range(single),
            "citus_ms": med_range(citus),
            "ratio": med_range(ratios),
            "rounds": {"single": single, "citus": citus},
        }
    return out


DURABILITY = ("fsync", "synchronous_commit")


def _settings(dsn: str) -> dict[str, str]:
    """The server's version and its commit durability settings."""
    with psycopg.connect(dsn, autocommit=True) as c:
        return {
            name: str(c.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
            for name in ("server_version", *DURABILITY)
        }


def _align(admin_dsn: str, wanted: dict[str, str]) -> None:
    """Give the embedded server (a temporary one) the coordinator's commit durability, so
    that a commit costs alike on both sides (the Citus nodes of a test cluster often run
    with fsync off)."""
    with psycopg.connect(admin_dsn, autocommit=True) as c:
        for name in DURABILITY:
            c.execute(f"ALTER SYSTEM SET {name} = '{wanted[name]}'")
        c.execute("SELECT pg_reload_conf()")


def _shown(settings: dict[str, str]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in settings.items() if k in DURABILITY)


def _worker_dsn(citus_dsn: str, sid: uuid.UUID) -> str:
    """The DSN of the worker holding ``sid``'s shard of ``sessions``."""
    with psycopg.connect(citus_dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT nodename, nodeport FROM pg_dist_shard_placement WHERE shardid ="
            " get_shard_id_for_distribution_column('shardstore.sessions', %s::uuid)",
            (sid,),
        ).fetchone()
    assert row is not None
    return make_conninfo(citus_dsn, host=str(row[0]), port=str(row[1]))


def _logged(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    """The server's LOG notices on ``conn`` that start with ``prefix``, gathered as they
    come (the list grows; clear it between calls)."""
    seen: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        text = d.message_primary or ""
        if text.startswith(prefix):
            seen.append(text[len(prefix) :].strip())

    conn.add_notice_handler(keep)
    return seen


def _short(sql: str, width: int = 90) -> str:
    one = " ".join(sql.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def profile(citus_dsn: str, corpus: Corpus, calls: int) -> dict[str, Any]:
    """Round trips, the coordinator's remote commands and the worker's shard statements
    of one ``append_turn`` (the open chunk's fast path) and one ``tail(n=20)``."""
    msg = corpus.msgs[1]
    result: dict[str, Any] = {}
    with WireProxy(citus_dsn) as proxy:
        store = shardstore.connect(proxy.dsn(), background_fold=False)
        try:
            sid = store.create_session("bench", "profile", "agent")
            store.append_turns(sid, [corpus.msgs[i] for i in corpus.seq(0, 40)])
            trips: dict[str, list[int]] = {"append_turn": [], "tail(n=20)": []}
            for _ in range(calls):
                with proxy.counting() as n:
                    store.append_turn(sid, msg)
                trips["append_turn"].append(n[0])
                with proxy.counting() as n:
                    store.tail(sid, n=20)
                trips["tail(n=20)"].append(n[0])
            result["round_trips"] = {k: statistics.median(v) for k, v in trips.items()}
        finally:
            store.close()
    conn = psycopg.connect(citus_dsn, autocommit=True)
    remote = _logged(conn, "issuing")
    conn.execute("SET citus.log_remote_commands = on")
    conn.execute("SET client_min_messages = log")
    store = shardstore.connect(conn, background_fold=False)
    try:
        sid = store.create_session("bench", "profile", "agent")
        store.append_turns(sid, [corpus.msgs[i] for i in corpus.seq(0, 40)])
        per_call: dict[str, list[str]] = {}
        calls_made: dict[str, Callable[[], Any]] = {
            "append_turn": partial(store.append_turn, sid, msg),
            "tail(n=20)": partial(store.tail, sid, n=20),
        }
        for name, fn in calls_made.items():
            for _ in range(3):  # the last of three: plans and connections warm
                remote.clear()
                fn()
            per_call[name] = list(remote)
        result["remote_commands"] = {k: [_short(c) for c in v] for k, v in per_call.items()}
        result["two_phase_commit"] = any(
            "PREPARE TRANSACTION" in c for v in per_call.values() for c in v
        )
        ctx = store.ctx
    finally:
        store.close()
        conn.close()
    worker = psycopg.connect(_worker_dsn(citus_dsn, sid), autocommit=True)
    local = _logged(worker, "executing the command locally:")
    worker.execute("SET citus.log_local_commands = on")
    worker.execute("SET client_min_messages = log")
    text = jsoncodec.encode_message(msg)
    statements = {
        "append_turn": (
            query("append_one"),
            (
                sid,
                text,
                ctx.counter.count(text),
                len(text.encode()),
                None,
                ctx.settings.budget_tokens,
                ctx.settings.chunk_max_bytes,
                ctx.partition_interval.total_seconds(),
                ctx.partition_origin,
            ),
        ),
        "tail(n=20)": (query("tail_window"), (sid, 20, None)),
    }
    on_worker: dict[str, list[str]] = {}
    try:
        for name, (sql, params) in statements.items():
            for _ in range(3):
                local.clear()
                worker.execute(sql, params).fetchall()
            on_worker[name] = [_short(c) for c in local]
    finally:
        worker.close()
    result["worker_statements"] = on_worker
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--citus-dsn", default=os.environ.get(ENV), help=f"default: ${ENV}")
    p.add_argument("--single-dsn", help="the single node's server (default: embedded)")
    p.add_argument("--corpus", choices=CORPUS_CHOICES, default="both")
    p.add_argument("--history", type=int, default=400, help="turns of the tail sessions")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=150, help="timed calls per round and side")
    p.add_argument("--out", help="OUT.md and OUT.json")
    p.add_argument("--quick", action="store_true", help="200 turns, 3 rounds of 40 calls")
    a = p.parse_args(argv)
    quick(a, p, history=200, rounds=3, calls=40)
    if not a.citus_dsn:
        print(
            f"citus: no Citus coordinator to measure: set {ENV} (or --citus-dsn) to a scratch"
            " database with citus and vector on every node",
            file=sys.stderr,
        )
        return 2
    results: dict[str, Any] = {"calls": {}}
    durability = _settings(a.citus_dsn)
    with open_server(a.single_dsn) as server:
        if server.embedded:
            _align(server.admin_dsn, durability)
        single_settings = _settings(server.dsn)
        single_version = single_settings.pop("server_version")
        stores = {
            "single": shardstore.connect(server.dsn),
            "citus": shardstore.connect(a.citus_dsn),
        }
        try:
            report = stores["citus"].distribute()
            if report.citus_version is None:
                print("citus: the database of --citus-dsn has no Citus", file=sys.stderr)
                return 2
            citus_version = durability.pop("server_version")
            for source in corpus_sources(a.corpus):
                results["calls"][source] = run_corpus(a, stores, source)
        finally:
            for store in stores.values():
                store.close()
    progress("profile")
    results["profile"] = profile(a.citus_dsn, Corpus(200, source="synthetic"), 20)
    results["servers"] = {
        "single": f"PostgreSQL {single_version}"
        + (" (embedded)" if a.single_dsn is None else "")
        + f", {_shown(single_settings)}",
        "citus": f"Citus {report.citus_version} on PostgreSQL {citus_version},"
        f" {report.workers} workers, coordinator {_shown(durability)}",
    }
    rep = Report()
    rep.add(
        "# Citus against one node: append_turn and tail(n=20)",
        "",
        f"`{command('citus', argv)}`: {a.rounds} rounds of {a.calls} calls per side,"
        " the two sides alternating call by call; tail sessions of"
        f" {a.history} turns written with `append_turns` (newest turns buffered). p50 per"
        " round, median [min–max] over rounds; ratio = Citus / one node within each round.",
        f"One node: {results['servers']['single']}; Citus: {results['servers']['citus']}"
        " (every node on one machine).",
        "",
    )
    for source, res in results["calls"].items():
        rep.add(f"## {CORPUS_LABELS.get(source, source)}", "")
        rows = []
        for call, r in res.items():
            ratio = r["ratio"]
            rows.append(
                [
                    f"`{call}`",
                    spread(r["rounds"]["single"], 3),
                    spread(r["rounds"]["citus"], 3),
                    f"{ratio['p50']:.2f} [{ratio['min']:.2f}–{ratio['max']:.2f}]",
                    f"≤ {GOALS[call]}: " + ("met" if ratio["p50"] <= GOALS[call] else "**missed**"),
                ]
            )
        rep.table(["call", "one node, ms", "Citus, ms", "Citus / one node", "goal"], rows)
    prof = results["profile"]
    rep.add("## Profile of one call on Citus", "")
    rows = []
    for call in GOALS:
        rows.append(
            [
                f"`{call}`",
                f"{prof['round_trips'][call]:g}",
                str(len(prof["remote_commands"][call])),
                str(len(prof["worker_statements"][call])),
            ]
        )
    rep.table(
        [
            "call",
            "client round trips",
            "coordinator → worker commands",
            "statements Citus runs on the worker (its local executor)",
        ],
        rows,
    )
    rep.add(f"2PC: {'yes' if prof['two_phase_commit'] else 'no'}.", "")
    for call in GOALS:
        rep.add(f"`{call}`, sent by the coordinator:", "")
        rep.add(*[f"* `{c}`" for c in prof["remote_commands"][call]], "")
        rep.add(f"`{call}`, run by Citus on the worker's shards:", "")
        rep.add(*([f"* `{c}`" for c in prof["worker_statements"][call]] or ["* none"]), "")
    if a.out:
        write_results(a.out, rep.text(), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
