"""Checkpoints, facts, summaries, restore, context, fork and rewind with encryption on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import DecryptionFailed

MARKER = "okapi-marker-9931"


@pytest.fixture
def enc(make_store: Callable[..., shardstore.Store], tmp_path: Path) -> shardstore.Store:
    return make_store(encryption=LocalKeyProvider(tmp_path / "keys"), chunk_tokens=60)


def _raw(dsn: str, sql: str, params: Any = None) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _dump_text(dsn: str) -> str:
    """Every row of every shardstore table as text."""
    tables = _raw(
        dsn,
        "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
        " WHERE schemaname = 'shardstore'",
    )
    out = []
    for (table,) in tables:
        out += [str(r) for r in _raw(dsn, f"SELECT t::text FROM {table} t")]
    return "\n".join(out)


def test_state_round_trips_and_no_table_holds_plaintext(enc: shardstore.Store, dsn: str) -> None:
    sid = enc.create_session(tenant_id="t1", subject_id="bob")
    messages = [{"role": "user", "content": f"{MARKER} turn {i} " + "w " * 30} for i in range(12)]
    enc.append_turns(sid, messages[:6])
    r = enc.append_turn(sid, messages[6], checkpoint={"plan": f"{MARKER} appended"})
    for m in messages[7:]:
        enc.append_turn(sid, m)
    cp = enc.checkpoint(
        sid, {"plan": f"{MARKER} state"}, tool_calls=[f"{MARKER} call"], tool_results={"r": MARKER}
    )
    assert enc.restore(sid).checkpoint == cp
    assert [t.message for t in enc.restore(sid).turns] == messages
    assert [t.message for t in enc.restore(sid, n=3).turns] == messages[-3:]
    assert enc.restore(sid, r.checkpoint_id).checkpoint.state == {"plan": f"{MARKER} appended"}
    assert enc.checkpoints(sid)[0].tool_results == {"r": MARKER}
    fact = enc.remember("t1", "bob", "likes", {"food": MARKER}, source=(sid, 2))
    assert fact.value == {"food": MARKER}
    assert enc.recall("t1", "bob")[0].value == {"food": MARKER}
    assert enc.fact_history("t1", "bob", "likes")[0].value == {"food": MARKER}
    assert enc.forget("t1", "bob", "likes").value == {"food": MARKER}
    enc.flush(sid)
    enc.drain_folds()
    seen: list[list[Any]] = []

    def summarizer(turns: list[shardstore.Turn]) -> str:
        seen.append([t.message for t in turns])
        return f"{MARKER} summary of {len(turns)}"

    stored = enc.summarize(summarizer, session_id=sid)
    assert stored >= 1 and all(m in messages for batch in seen for m in batch)
    summaries = enc.summaries(sid)
    assert summaries and all(s.text.startswith(f"{MARKER} summary") for s in summaries)
    ctx = enc.context(sid, max_tokens=400, facts_subject="bob")
    assert ctx.messages and ctx.messages[-1] == messages[-1]
    assert _raw(dsn, "SELECT count(*) FROM shardstore.chunk_summaries")[0][0] >= 1
    assert MARKER not in _dump_text(dsn)
    # search works over sealed turns (keyed lexeme hashes, docs/decisions/0025) and writes
    # no plaintext anywhere
    hits = enc.search(f"{MARKER} turn 3", session_id=sid, mode="text")
    assert hits and messages[3] in [t.message for t in hits[0].turns]
    assert enc.context(sid, max_tokens=400, recall=MARKER).messages
    assert MARKER not in _dump_text(dsn)


def test_checkpoint_and_fact_copied_elsewhere_fail(enc: shardstore.Store, dsn: str) -> None:
    a = enc.create_session(tenant_id="t1", subject_id="bob")
    b = enc.create_session(tenant_id="t1", subject_id="bob")
    enc.append_turn(a, {"role": "user", "content": "x"})
    enc.append_turn(b, {"role": "user", "content": "y"})
    ca = enc.checkpoint(a, {"s": "a"})
    enc.checkpoint(b, {"s": "b"})
    _raw(
        dsn,
        "UPDATE shardstore.checkpoints SET state = (SELECT state FROM shardstore.checkpoints"
        " WHERE checkpoint_id = %s) WHERE session_id = %s",
        (ca.checkpoint_id, b),
    )
    with pytest.raises(DecryptionFailed):
        enc.restore(b)
    enc.remember("t1", "bob", "k1", "v1", source=None)
    enc.remember("t1", "carol", "k1", "v2", source=None)
    _raw(
        dsn,
        "UPDATE shardstore.facts SET value = (SELECT value FROM shardstore.facts WHERE subject ="
        " 'bob') WHERE subject = 'carol'",
    )
    with pytest.raises(DecryptionFailed):
        enc.recall("t1", "carol")
    assert enc.recall("t1", "bob")[0].value == "v1"


def test_fork_and_rewind_with_encryption(enc: shardstore.Store) -> None:
    sid = enc.create_session(tenant_id="t1", subject_id="dan")
    messages = [{"role": "user", "content": f"{MARKER} {i}"} for i in range(10)]
    enc.append_turns(sid, messages)
    child = enc.fork(sid, at_turn_seq=5)
    enc.append_turn(child, {"role": "assistant", "content": "child's own"})
    assert [t.message for t in enc.history(child)] == [
        *messages[:6],
        {"role": "assistant", "content": "child's own"},
    ]
    assert enc.tail(child, n=2)[0].message == messages[5]
    enc.rewind(sid, to_turn_seq=3)
    enc.append_turn(sid, {"role": "user", "content": "after rewind"})
    assert [t.message for t in enc.history(sid)] == [
        *messages[:3],
        {"role": "user", "content": "after rewind"},
    ]
    assert [t.message for t in enc.history(child)][:6] == messages[:6]
