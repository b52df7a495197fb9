"""tail_v1 (the newest buffered turns in one index scan, then the per-chunk walk) returns
exactly what the earlier tail_v1 (the per-chunk walk alone) returned, in every state a
session can reach: turns buffered and folded, open chunks partly folded (flush), kept sealed
chunks, gaps left by purge_range, cuts by rewind, batches that write chunks straight to
agent_history. The earlier body is read from the historical migration that created it and
installed beside the current one under another name; after every operation both are called
with a spread of (n, max_tokens)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore

# the body tail_v1 had before (a historical migration, kept for upgrades)
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations" / "legacy"


def _install_chunk_walk_body(dsn: str) -> None:
    text = (MIGRATIONS / "0023_append_speed.sql").read_text()
    found = re.search(
        r"CREATE OR REPLACE FUNCTION shardstore\.tail_v1\(.*?\n\$\$;", text, flags=re.S
    )
    assert found is not None
    body = found.group(0).replace("shardstore.tail_v1(", "shardstore.tail_v1_chunk_walk(", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(body)


def _same_tails(dsn: str, sid: Any, next_turn: int) -> int:
    """Both bodies on the same snapshot for several windows; returns the checks made."""
    windows = [(20, None), (1, None), (0, None), (7, None), (None, None), (3, 10**9)]
    windows += [(None, t) for t in (1, 40, 150, 600)] + [(50, 200), (next_turn + 5, None)]
    checks = 0
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for n, max_tokens in windows:
            new = conn.execute(
                "SELECT * FROM shardstore.tail_v1(%s, %s, %s)", (sid, n, max_tokens)
            ).fetchall()
            old = conn.execute(
                "SELECT * FROM shardstore.tail_v1_chunk_walk(%s, %s, %s)", (sid, n, max_tokens)
            ).fetchall()
            assert new == old, (n, max_tokens, [r[0] for r in new], [r[0] for r in old])
            checks += 1
    return checks


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=0, max_value=120)),
        st.tuples(st.just("batch"), st.lists(st.integers(0, 120), min_size=1, max_size=12)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("rewind"), st.integers(min_value=0, max_value=100)),
        st.tuples(st.just("purge_range"), st.integers(min_value=0, max_value=100)),
    ),
    min_size=1,
    max_size=30,
)


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations)
def test_tail_equals_the_chunk_walk_in_every_state(dsn: str, ops: list[tuple[str, Any]]) -> None:
    _install_chunk_walk_body(dsn)
    # small chunks (a handful of turns each) and inline folds: every state is reached
    # deterministically, and windows of 20 span several chunks
    with shardstore.connect(
        dsn, chunk_tokens=200, background_fold=False, default_tail_turns=5, pool_max_size=2
    ) as store:
        _run(store, dsn, ops)


def _run(store: shardstore.Store, dsn: str, ops: list[tuple[str, Any]]) -> None:
    sid = store.create_session("acme")
    checks = 0
    for kind, arg in ops:
        next_turn = store.session(sid).turn_count
        if kind == "append":
            store.append_turn(sid, {"role": "user", "content": "w " * arg})
        elif kind == "batch":
            store.append_turns(sid, [{"role": "assistant", "content": "v " * k} for k in arg])
        elif kind == "flush":
            store.flush(sid)
        elif kind in ("rewind", "purge_range") and next_turn:
            try:
                if kind == "rewind":
                    store.rewind(sid, arg % next_turn)
                else:
                    store.purge_range(sid, before_turn_seq=arg % next_turn)
            except shardstore.InvalidInput:
                pass  # e.g. a rewind below a range purge's cut: refused, nothing changed
        checks += _same_tails(dsn, sid, store.session(sid).turn_count)
    assert checks >= len(ops)
