"""stats() against a brute-force count after random sequences of the operations that change
counts (append one / many, flush, fold, rewind, fork, import with past times, purge of a
session or a subject); and the one-statement reads (chunks(last=),
history(from_seq)) against the general multi-statement paths on the same sessions."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import hypothesis.strategies as st
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings

import shardstore
from shardstore.core.executor import run_sync
from shardstore.history.ops import _GENERAL_PATH

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

CHUNK_TOKENS = 60  # a few turns per chunk: many chunks from few turns


def _msg(i: int, words: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": " ".join(["w"] * words) + f" {i}"}


op_st = st.one_of(
    st.tuples(st.just("create"), st.integers(0, 3)),
    st.tuples(st.just("append"), st.integers(0, 9), st.integers(1, 30), st.integers(1, 40)),
    st.tuples(st.just("append_one"), st.integers(0, 9), st.integers(1, 40)),
    st.tuples(st.just("flush"), st.integers(0, 9)),
    st.tuples(st.just("fold")),
    st.tuples(st.just("rewind"), st.integers(0, 9), st.integers(0, 25)),
    st.tuples(st.just("fork"), st.integers(0, 9), st.integers(0, 60)),
    st.tuples(st.just("import"), st.integers(1, 40), st.integers(1, 30)),
    st.tuples(st.just("purge_session"), st.integers(0, 9)),
    st.tuples(st.just("purge_subject"), st.integers(0, 3)),
)


def _import_lines(sid: uuid.UUID, subject: str, turns: int, days_ago: int) -> list[str]:
    """One session in the JSONL format, its turns ``days_ago`` days back (past partitions)."""
    first = datetime.now(UTC) - timedelta(days=days_ago)
    head = {
        "kind": "session",
        "format": "shardstore.jsonl",
        "version": 1,
        "session_id": str(sid),
        "tenant_id": "acme",
        "subject_id": subject,
        "agent_id": None,
        "metadata": {},
        "created_at": first.isoformat(),
    }
    lines = [json.dumps(head) + "\n"]
    for i in range(turns):
        turn = {
            "kind": "turn",
            "turn_seq": i,
            "created_at": (first + timedelta(minutes=7 * i)).isoformat(),
            "idempotency_key": None,
            "message": _msg(i, 5 + i % 9),
        }
        lines.append(json.dumps(turn) + "\n")
    lines.append(json.dumps({"kind": "end", "session_id": str(sid), "turns": turns}) + "\n")
    return lines


class _Lines:
    def __init__(self, lines: list[str]) -> None:
        self.lines = iter(lines)

    def readline(self, size: int = -1) -> str:
        return next(self.lines, "")


def _brute(dsn: str) -> dict[str, Any]:
    """Every count stats() reports, by scanning the tables themselves."""
    with psycopg.connect(dsn) as conn:
        (sessions,) = conn.execute(
            "SELECT count(*) FROM shardstore.sessions WHERE purged_at IS NULL"
        ).fetchone() or (0,)
        # turns stored in a live session's own rows: folded envelopes plus buffered turns
        (folded,) = conn.execute(
            "SELECT coalesce(sum(jsonb_array_length(h.conversation_chunk)), 0)"
            "  FROM shardstore.agent_history h JOIN shardstore.sessions s USING (session_id)"
            " WHERE s.purged_at IS NULL"
        ).fetchone() or (0,)
        (buffered_live,) = conn.execute(
            "SELECT count(*) FROM shardstore.turn_buffer b JOIN shardstore.sessions s"
            " USING (session_id) WHERE s.purged_at IS NULL"
        ).fetchone() or (0,)
        (buffered,) = conn.execute("SELECT count(*) FROM shardstore.turn_buffer").fetchone() or (0,)
        rows = dict(
            conn.execute(
                "SELECT tableoid::regclass::text, count(*) FROM shardstore.agent_history GROUP BY 1"
            ).fetchall()
        )
    return {
        "sessions": sessions,
        "turns": folded + buffered_live,
        "buffered": buffered,
        "rows": {name.removeprefix("shardstore."): n for name, n in rows.items()},
    }


def _check_stats(store: shardstore.Store, dsn: str) -> None:
    got = store.stats()
    want = _brute(dsn)
    assert got.sessions == want["sessions"]
    assert got.turns == want["turns"]
    assert got.buffered_turns == want["buffered"]
    assert {p.name: p.rows for p in got.partitions if p.rows} == want["rows"]
    assert got.chunks == sum(want["rows"].values())


def _general_chunks(store: shardstore.Store, sid: uuid.UUID, last: int | None) -> Any:
    """chunks() by its general path (as for a fork): the four-statement read."""
    from shardstore.history import ops as h

    def op() -> Any:
        head = yield from h._head_op(sid, live=True)
        return (yield from _general_chunks_op(h, sid, head, last))

    return run_sync(store.connector, op())


def _general_chunks_op(h: Any, sid: uuid.UUID, head: Any, last: int | None) -> Any:
    open_seq, open_turns = head["open_chunk_seq"], head["open_turns"]
    newest = open_seq if open_turns else open_seq - 1
    first = 0 if last is None else max(0, newest - last + 1)
    merged: dict[int, Any] = {}
    for seg in (yield from h.segments_op(sid, head)):
        upper = newest + 1 if seg.chunk_hi is None else min(newest + 1, seg.chunk_hi)
        if max(first, seg.chunk_lo) < upper:
            merged.update((yield from h._segment_chunks_op(seg, max(first, seg.chunk_lo), upper)))
    ordered = [merged[s] for s in sorted(merged)]
    if ordered and open_turns and ordered[-1].chunk_seq == open_seq:
        import dataclasses

        ordered[-1] = dataclasses.replace(ordered[-1], is_open=True)
    return ordered


def _check_reads(store: shardstore.Store, sid: uuid.UUID, fork: bool) -> None:
    info = store.session(sid)
    if info.purged:
        return
    every = store.chunks(sid)
    assert every == _general_chunks(store, sid, None)
    if not fork:  # a fork whose parent was purged lost the turns it inherited
        assert sum(c.turn_count for c in every) == info.turn_count
    for last in (1, 3, 10):
        assert store.chunks(sid, last=last) == _general_chunks(store, sid, last)
    whole = list(store.history(sid))
    assert [t.turn_seq for t in whole] == sorted(t.turn_seq for t in whole)
    for lo in {0, max(0, info.turn_count - 5), max(0, info.turn_count - 40)}:
        assert list(store.history(sid, lo)) == [t for t in whole if t.turn_seq >= lo]
        hi = lo + 7
        assert list(store.history(sid, lo, hi)) == [t for t in whole if lo <= t.turn_seq < hi]


def _run(store: shardstore.Store, dsn: str, ops: list[tuple[Any, ...]]) -> None:
    sids: list[uuid.UUID] = [store.create_session("acme", "user:0")]
    forks: set[uuid.UUID] = set()
    n = 0
    for op in ops:
        kind = op[0]
        sid = sids[op[1] % len(sids)] if kind not in ("create", "fold", "import") else None
        live = sid is not None and not store.session(sid).purged
        if kind == "create":
            sids.append(store.create_session("acme", f"user:{op[1]}"))
        elif kind == "append" and live:
            store.append_turns(sid, [_msg(n + i, op[3]) for i in range(op[2])])
            n += op[2]
        elif kind == "append_one" and live:
            store.append_turn(sid, _msg(n, op[2]))
            n += 1
        elif kind == "flush" and live:
            store.flush(sid)
        elif kind == "fold":
            store.drain_folds()
        elif kind == "rewind" and live:
            count = store.session(sid).turn_count
            store.rewind(sid, max(0, count - op[2]))
        elif kind == "fork" and live:
            count = store.session(sid).turn_count
            if count:
                sids.append(store.fork(sid, at_turn_seq=op[2] % count))
                forks.add(sids[-1])
        elif kind == "import":
            new = uuid.uuid4()
            store.import_jsonl(_Lines(_import_lines(new, "user:imp", op[2], op[1])))
            sids.append(new)
        elif kind == "purge_session" and live:
            store.purge_session(sid)
        elif kind == "purge_subject":
            store.purge_subject("acme", f"user:{op[1]}")
        _check_stats(store, dsn)
    for sid in sids:
        _check_reads(store, sid, sid in forks)


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op_st, min_size=1, max_size=25))
def test_stats_and_reads_match_brute_force(
    new_database: Callable[[], str], ops: list[tuple[Any, ...]]
) -> None:
    dsn = new_database()  # one database per example: a failure replays and shrinks alone
    with shardstore.connect(dsn, chunk_tokens=CHUNK_TOKENS, background_fold=False) as store:
        _run(store, dsn, ops)


def test_a_long_session_reads_its_newest_chunks_in_one_statement(dsn: str) -> None:
    """40 chunks: the last 10 are one chunk_list_v1 and one history_range_v1 call (no
    marker row); the whole history is over 16 chunks and takes the general path."""
    with shardstore.connect(dsn, chunk_tokens=CHUNK_TOKENS, background_fold=False) as store:
        sid = store.create_session("acme")
        for k in range(40):
            store.append_turns(sid, [_msg(k * 4 + i, 10) for i in range(4)])
        store.drain_folds()
        store.append_turn(sid, _msg(999, 3))  # an open chunk in the buffer
        last = store.chunks(sid, last=10)
        assert len(last) == 10 and last[-1].is_open and not any(c.is_open for c in last[:-1])
        assert last == _general_chunks(store, sid, 10)
        with psycopg.connect(dsn) as conn:
            marks = [
                r[0]
                for r in conn.execute(
                    "SELECT r_kind FROM shardstore.history_range_v1(%s, %s, NULL, 16)",
                    (sid, last[0].first_turn_seq),
                )
            ]
            assert marks and not set(marks) & _GENERAL_PATH
            (whole,) = conn.execute(
                "SELECT r_kind FROM shardstore.history_range_v1(%s, 0, NULL, 16)", (sid,)
            ).fetchone() or (None,)
            assert whole == "long"
            (fork,) = conn.execute(
                "SELECT r_fork FROM shardstore.chunk_list_v1(%s, 3)",
                (store.fork(sid, at_turn_seq=5),),
            ).fetchone() or (None,)
            assert fork is True
        turns = list(store.history(sid, last[0].first_turn_seq))
        assert [t.turn_seq for t in turns] == list(range(last[0].first_turn_seq, 161))
        _check_stats(store, dsn)


def test_reads_of_unknown_and_purged_sessions_raise_typed_errors(dsn: str) -> None:
    with shardstore.connect(dsn, background_fold=False) as store:
        with pytest.raises(shardstore.SessionNotFound):
            store.chunks(uuid.uuid4(), last=3)
        with pytest.raises(shardstore.SessionNotFound):
            list(store.history(uuid.uuid4(), 5))
        sid = store.create_session("acme")
        store.append_turn(sid, _msg(0, 3))
        store.purge_session(sid)
        with pytest.raises(shardstore.SessionPurged):
            store.chunks(sid, last=3)
        with pytest.raises(shardstore.SessionPurged):
            list(store.history(sid, 0))


async def _async_reads(dsn: str) -> tuple[Any, Any, Any]:
    store = await shardstore.connect_async(dsn, chunk_tokens=CHUNK_TOKENS)
    try:
        sid = await store.create_session("acme")
        await store.append_turns(sid, [_msg(i, 10) for i in range(30)])
        chunks = await store.chunks(sid, last=3)
        turns = [t async for t in store.history(sid, chunks[0].first_turn_seq)]
        return sid, chunks, turns
    finally:
        await store.close()


def test_async_reads_match_sync(dsn: str) -> None:
    import asyncio

    sid, chunks, turns = asyncio.run(_async_reads(dsn))
    with shardstore.connect(dsn, chunk_tokens=CHUNK_TOKENS) as store:
        assert store.chunks(sid, last=3) == chunks
        assert list(store.history(sid, chunks[0].first_turn_seq)) == turns
