#!/usr/bin/env python
"""Where the single-turn append statement's time goes against a bare INSERT, SQL only.

    python -m benchmarks.probes.append_statement [--dsn DSN] [--rounds 7] [--calls 300]

No Python of shardstore's on the timed path: each contender is one statement sent by
psycopg (prepared, autocommit, its own connection and session), interleaved call by call
in random order with the same ~1.4 kB random-word message, and compared round by round
with the floor, an INSERT of the same columns into a plain ``(session_id, seq, ...)`` table
with its primary key. Contenders, each one step less than the one before:

* ``append_one_v2``: the statement ``append_turn`` sends (``query("append_one")``): two
  PL/pgSQL layers around the fast path's CTE;
* ``one_layer``: the same CTE inside one PL/pgSQL function (a scratch function, not
  shipped), with append_v2 as its fallback;
* ``cte_full``: the fast path's CTE sent as plain SQL (head UPDATE with its checks, the
  idempotency-key CTE, the buffer INSERT);
* ``cte_nokeyed``: without the idempotency-key CTE;
* ``cte_bare``: the head UPDATE matching on session_id alone, and the buffer INSERT;
* ``head_scratch`` and ``headless``, on scratch tables shaped like the floor's: a bare head
  UPDATE of a small row plus the INSERT, and a head-less append that takes its seq from the
  session's last row (what dropping the session head would leave).

Budgets and the partition interval are set so that no call seals a chunk (the fast path
always applies). Prints each round's p50s and, per contender, the median and range of its
p50 / the floor's p50. Results: docs/architecture.md, "Round 4".
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import shardstore
from benchmarks.lib.server import open_server
from shardstore.core.sql import query

_HEAD = """WITH head AS (
        UPDATE shardstore.sessions s
           SET next_turn_seq = s.next_turn_seq + 1, open_turns = s.open_turns + 1,
               open_tokens = s.open_tokens + {t}, open_bytes = s.open_bytes + {b},
               last_turn_at = greatest(statement_timestamp(), s.last_turn_at)
         WHERE s.session_id = {s} {checks}
        RETURNING s.next_turn_seq - 1 AS turn_seq, s.open_chunk_seq AS chunk_seq,
                  s.last_turn_at AS at, s.tenant_id
    ){keyed}
    INSERT INTO shardstore.turn_buffer AS b
           (session_id, turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key,
            message, tenant_id)
    SELECT {s}, head.turn_seq, head.chunk_seq, head.at, {t}, {b}, {k}, {m}, head.tenant_id
      FROM head
    RETURNING b.turn_seq, b.chunk_seq{into}"""
_CHECKS = """AND s.purged_at IS NULL AND s.open_turns > 0
           AND s.open_tokens + {t} <= {bt} AND s.open_bytes + {b} <= {bb}
           AND date_bin({iv}, greatest(statement_timestamp(), s.last_turn_at), {o})
             = date_bin({iv}, s.open_chunk_start, {o})
           AND ({k} IS NULL OR NOT EXISTS (
                   SELECT 1 FROM shardstore.turn_keys k
                    WHERE k.session_id = {s} AND k.idempotency_key = {k}))"""
_KEYED = """, keyed AS (
        INSERT INTO shardstore.turn_keys
               (session_id, idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id)
        SELECT {s}, {k}, head.turn_seq, head.chunk_seq, {t}, head.at, head.tenant_id
          FROM head WHERE {k} IS NOT NULL)"""
# placeholders as statement parameters, or as the scratch function's arguments
_PARAMS = {
    "s": "%(s)s::uuid",
    "t": "%(t)s::integer",
    "b": "%(b)s::integer",
    "k": "%(k)s::text",
    "m": "%(m)s::jsonb",
    "bt": "%(bt)s::bigint",
    "bb": "%(bb)s::bigint",
    "iv": "make_interval(secs => %(iv)s)",
    "o": "%(o)s::timestamptz",
}
_ARGS = {
    "s": "p_session_id",
    "t": "p_tokens",
    "b": "p_bytes",
    "k": "p_key",
    "m": "p_message",
    "bt": "p_budget_tokens",
    "bb": "p_budget_bytes",
    "iv": "p_interval",
    "o": "p_origin",
}


def _cte(names: dict[str, str], checks: bool, keyed: bool, into: str = "") -> str:
    return _HEAD.format(
        checks=_CHECKS.format(**names) if checks else "",
        keyed=_KEYED.format(**names) if keyed else "",
        into=into,
        **names,
    )


_ONE_LAYER = """CREATE FUNCTION public.probe_one_layer(
    p_session_id uuid, p_message jsonb, p_tokens integer, p_bytes integer, p_key text,
    p_budget_tokens bigint, p_budget_bytes bigint, p_interval interval, p_origin timestamptz)
RETURNS TABLE (r_turn_seq bigint, r_chunk_seq bigint, r_tokens integer, r_duplicate boolean,
               r_sealed boolean)
LANGUAGE plpgsql AS $f$
BEGIN
    {body};
    IF FOUND THEN
        r_tokens := p_tokens; r_duplicate := false; r_sealed := false;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM shardstore.append_v2(
        p_session_id, jsonb_build_array(p_message), ARRAY[p_tokens], ARRAY[p_bytes],
        ARRAY[p_key], p_budget_tokens, p_budget_bytes, p_interval, p_origin, 0);
END
$f$"""


_HEAD_SCRATCH = """WITH h AS (
        UPDATE probe_heads SET next = next + 1, open_tokens = open_tokens + %(t)s,
               open_bytes = open_bytes + %(b)s, last_at = statement_timestamp()
         WHERE id = %(s)s RETURNING next - 1 AS seq)
    INSERT INTO probe_head_rows SELECT %(s)s, h.seq, %(t)s, %(b)s, statement_timestamp(), %(m)s
      FROM h RETURNING seq"""
_HEADLESS = """INSERT INTO probe_headless
    SELECT %(s)s, coalesce(l.seq + 1, 0), %(t)s, %(b)s, statement_timestamp(), %(m)s
      FROM (SELECT 1) one
      LEFT JOIN LATERAL (SELECT seq FROM probe_headless WHERE session_id = %(s)s
                          ORDER BY seq DESC LIMIT 1) l ON true
    RETURNING seq"""


def _named(positional: str) -> str:
    """query('append_one') with named parameters (its nine %s, in order)."""
    names = iter(["s", "m", "t", "b", "k", "bt", "bb", "iv", "o"])
    parts = positional.split("%s")
    return parts[0] + "".join(f"%({next(names)})s" + part for part in parts[1:])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn", default=None, help="server to use (default: embedded)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args(argv)
    rng = random.Random(1)
    words = [
        "".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 9)))
        for _ in range(2000)
    ]
    append_one = _named(query("append_one"))
    statements = {
        "floor": "INSERT INTO probe_floor VALUES (%(s)s, %(n)s, %(t)s, %(b)s, "
        "statement_timestamp(), %(m)s)",
        "append_one_v2": append_one,
        "one_layer": append_one.replace("shardstore.append_one_v2", "public.probe_one_layer"),
        "cte_full": _cte(_PARAMS, checks=True, keyed=True),
        "cte_nokeyed": _cte(_PARAMS, checks=True, keyed=False),
        "cte_bare": _cte(_PARAMS, checks=False, keyed=False),
        "head_scratch": _HEAD_SCRATCH,
        "headless": _HEADLESS,
    }
    with open_server(args.dsn, False) as server:
        sessions: dict[str, uuid.UUID] = {}
        with shardstore.connect(server.dsn) as store:
            for name in statements:
                sessions[name] = store.create_session(tenant_id="probe")
                # the fast path needs an open chunk that holds a turn
                store.append_turn(sessions[name], {"role": "user", "content": "hi"})
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            for table in ("probe_floor", "probe_head_rows", "probe_headless"):
                conn.execute(
                    f"CREATE TABLE {table} (session_id uuid, seq bigint, tokens int, bytes int, "
                    "created_at timestamptz, message jsonb, PRIMARY KEY (session_id, seq))"
                )
            conn.execute(
                "CREATE TABLE probe_heads (id uuid PRIMARY KEY, next bigint NOT NULL, "
                "open_tokens bigint NOT NULL, open_bytes bigint NOT NULL, last_at timestamptz) "
                "WITH (fillfactor = 70)"
            )
            conn.execute(
                "INSERT INTO probe_heads VALUES (%s, 0, 0, 0, now())", (sessions["head_scratch"],)
            )
            body = _cte(_ARGS, checks=True, keyed=True, into=" INTO r_turn_seq, r_chunk_seq")
            conn.execute(_ONE_LAYER.format(body=body))
        conns = {
            k: psycopg.connect(server.dsn, autocommit=True, prepare_threshold=0) for k in statements
        }
        seq = dict.fromkeys(statements, 0)
        rounds: dict[str, list[float]] = {k: [] for k in statements}
        origin = datetime(2000, 1, 1, tzinfo=UTC)
        for r in range(args.rounds):
            latencies: dict[str, list[float]] = {k: [] for k in statements}
            for _ in range(args.calls):
                message = Jsonb(
                    {
                        "role": "assistant",
                        "content": " ".join(rng.choice(words) for _ in range(230)),
                    }
                )
                order = list(statements)
                rng.shuffle(order)
                for name in order:
                    params: dict[str, Any] = {
                        "s": sessions[name],
                        "n": seq[name],
                        "t": 300,
                        "b": 1400,
                        "m": message,
                        "k": None,
                        "bt": 10**12,
                        "bb": 10**12,
                        "iv": 10**8,
                        "o": origin,
                    }
                    t0 = time.perf_counter()
                    cur = conns[name].execute(statements[name], params)
                    row = cur.fetchone() if cur.description else (True,)
                    latencies[name].append(time.perf_counter() - t0)
                    assert row is not None and row[0] is not None, (name, row)
                    seq[name] += 1
            for name in statements:
                rounds[name].append(statistics.median(latencies[name]))
            print(
                f"round {r + 1}:",
                ", ".join(f"{k} {rounds[k][-1] * 1000:.3f} ms" for k in statements),
                flush=True,
            )
        for conn in conns.values():
            conn.close()
    print("| statement | p50 / floor p50 |\n|---|---|")
    for name in statements:
        ratios = [a / b for a, b in zip(rounds[name], rounds["floor"], strict=True)]
        print(f"| {name} | {statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
