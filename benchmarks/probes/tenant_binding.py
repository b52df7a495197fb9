#!/usr/bin/env python
"""What binding a tenant store per transaction costs: ``append_turn`` and ``tail(n=20)``
through ``rls.connect_tenant`` (``SET LOCAL`` of the tenant pipelined with each
transaction's first statement, the default) against the same store with the binding taken
off, on a direct connection whose session-level setting names the tenant (what the store
did before it bound per transaction, unsafe behind a pooler), RLS on.

    python -m benchmarks.probes.tenant_binding --dsn DSN [--rounds 8] [--calls 150]

``DSN`` names a database the user owns and may create roles in (a superuser: the tenant
role is taken with SET ROLE). Makes a tenant role and a session of 200 turns, turns row
security on (off again at the end if it was off), then per round times ``calls`` appends
of a 1.6 kB message and ``calls`` tails on each of two connections of that role, one per
binding, the order alternating between rounds. Prints one JSON line: each round's p50 per
binding (ms) and the round's ratio per-transaction / session-level, with their medians
and ranges. Used for docs/scale-out.md (plain PostgreSQL, and a Citus coordinator after
``store.distribute()``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

import shardstore
from shardstore.schema import rls

MESSAGE = {"role": "user", "content": "lorem ipsum dolor sit amet " * 60}


def _timed(call: Any, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn", required=True)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--calls", type=int, default=150)
    args = p.parse_args(argv)
    owner = shardstore.connect(args.dsn, background_fold=False)
    tenant = f"probe-{uuid.uuid4().hex[:6]}"
    sid = owner.create_session(tenant, "u", "a")
    owner.append_turns(sid, [MESSAGE] * 200)
    role = f"ss_probe_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        was_on = rls.rls_enabled(admin)
        admin.execute(f'CREATE ROLE "{role}" NOLOGIN')
        rls.grant_tenant_role(admin, role)
        rls.enable_rls(admin)
    conns = []
    try:
        stores = {}
        for per in (False, True):
            conn = psycopg.connect(args.dsn, autocommit=True)
            conns.append(conn)
            conn.execute(f'SET ROLE "{role}"')
            if not per:
                rls.set_session_tenant(conn, tenant)
            stores[per] = rls.connect_tenant(conn, tenant=tenant, background_fold=False)
            if not per:  # the session-level setting alone decides on this direct connection
                stores[per].connector.prologue = None
        for store in stores.values():  # warm plans and caches
            for _ in range(20):
                store.append_turn(sid, MESSAGE)
                store.tail(sid, n=20)
        p50: dict[str, dict[bool, list[float]]] = {
            "append": {False: [], True: []},
            "tail": {False: [], True: []},
        }
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for per in order:
                store = stores[per]
                p50["append"][per].append(
                    _timed(lambda s=store: s.append_turn(sid, MESSAGE), args.calls)
                )
                p50["tail"][per].append(_timed(lambda s=store: s.tail(sid, n=20), args.calls))
        out: dict[str, Any] = {"rounds": args.rounds, "calls": args.calls}
        for call, by in p50.items():
            ratios = [b / a for a, b in zip(by[False], by[True], strict=True)]
            out[call] = {
                "session_level_ms": _summary(by[False]),
                "per_transaction_ms": _summary(by[True]),
                "ratio": _summary(ratios),
                "rounds_session_level": [round(v, 3) for v in by[False]],
                "rounds_per_transaction": [round(v, 3) for v in by[True]],
            }
        print(json.dumps(out))
    finally:
        for conn in conns:
            conn.close()
        owner.close()
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            if not was_on:
                rls.disable_rls(admin)
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
