"""A JSONL import writes the chunks a batch starts and seals straight into agent_history
(import_turns_v2, decision 0019): what it stores is what import_turns stored once its
folds ran (chunks with their envelopes and times, partitions, chunk map, queues, text
windows, keys, buffer, session head), and only the open chunk's turns touch turn_buffer. The
long transaction of an import no longer walks its own dead buffer rows on every fold."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
import shardstore.importers.writer as writer
from shardstore.core.sql import query
from shardstore.importers.writer import Batch, _array, _chunking

HOUR = timedelta(hours=1)
SETTINGS = {"chunk_tokens": 240, "partition_interval": HOUR, "background_fold": False}
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


def _message(i: int, size: int) -> dict[str, Any]:
    words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(size))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} {words} zz{i}q"}


def _jsonl(sid: uuid.UUID, sizes: list[int], gaps: list[int], keyed: bool) -> str:
    """One session's export: turn i has ``sizes[i]`` words and comes ``gaps[i]`` minutes
    after the turn before (the first 30 hours ago, or earlier if the gaps add up to more),
    so chunks seal by tokens and by partition."""
    span = timedelta(minutes=sum(gaps)) + HOUR  # the last turn an hour ago at the latest
    at = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - max(30 * HOUR, span)
    docs: list[dict[str, Any]] = [
        {
            "kind": "session",
            "format": "shardstore.jsonl",
            "version": 1,
            "session_id": str(sid),
            "tenant_id": "acme",
            "subject_id": "user:1",
            "agent_id": "agent-x",
            "metadata": {},
            "created_at": at.isoformat(),
        }
    ]
    for i, (size, gap) in enumerate(zip(sizes, gaps, strict=True)):
        at += timedelta(minutes=gap)
        docs.append(
            {
                "kind": "turn",
                "turn_seq": i,
                "created_at": at.isoformat(),
                "idempotency_key": f"k{i}" if keyed and i % 3 == 0 else None,
                "message": _message(i, size),
            }
        )
    docs.append({"kind": "end", "session_id": str(sid), "turns": len(sizes)})
    return "".join(json.dumps(d) + "\n" for d in docs)


def _stored(dsn: str, sid: uuid.UUID) -> dict[str, Any]:
    """Every row stored for one session, times included (an import keeps them)."""
    with psycopg.connect(dsn) as c:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in c.execute(sql, (sid,)).fetchall()]

        return {
            "chunks": rows(
                "SELECT tableoid::regclass::text, chunk_seq, chunk_start, chunk_end,"
                " first_turn_seq, turn_count, token_count, byte_count, tenant_id,"
                " conversation_chunk::text"
                " FROM shardstore.agent_history WHERE session_id = %s ORDER BY chunk_seq"
            ),
            "chunk_map": rows(
                "SELECT chunk_seq, chunk_start, first_turn_seq, tenant_id"
                " FROM shardstore.chunk_map WHERE session_id = %s ORDER BY 1"
            ),
            "embed_queue": rows(
                "SELECT chunk_seq, chunk_start, tenant_id FROM shardstore.embed_queue"
                " WHERE session_id = %s ORDER BY 1"
            ),
            "summary_queue": rows(
                "SELECT chunk_seq, chunk_start, tenant_id FROM shardstore.summary_queue"
                " WHERE session_id = %s ORDER BY 1"
            ),
            "turn_text": rows(
                "SELECT turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at,"
                " tsv::text FROM shardstore.turn_text WHERE session_id = %s ORDER BY 1, 2"
            ),
            "turn_buffer": rows(
                "SELECT turn_seq, chunk_seq, created_at, tokens, bytes, idempotency_key,"
                " message::text, tenant_id FROM shardstore.turn_buffer"
                " WHERE session_id = %s ORDER BY 1"
            ),
            "turn_keys": rows(
                "SELECT idempotency_key, turn_seq, chunk_seq, tokens, created_at, tenant_id"
                " FROM shardstore.turn_keys WHERE session_id = %s ORDER BY 2"
            ),
            "head": rows(
                "SELECT next_turn_seq, open_chunk_seq, open_chunk_start, open_turns,"
                " open_tokens, open_bytes, last_turn_at"
                " FROM shardstore.sessions WHERE session_id = %s"
            ),
        }


@pytest.fixture
def two_databases(new_database: Callable[[], str]) -> Iterator[tuple[str, str]]:
    a, b = new_database(), new_database()
    for dsn in (a, b):  # records the partition interval
        shardstore.connect(dsn, **SETTINGS).close()
    yield a, b


def _import_both(a: str, b: str, text: str, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``text`` imported into ``a`` by import_turns_v3 and into ``b`` by import_turns
    (the older path: every turn buffered, then fold_sealed keeping nothing). In ``a``
    the sealed chunks holding the newest default_tail_turns turns stay buffered (decision 0020):
    checked here against the keep window, then folded, so that both store the same rows."""
    with shardstore.connect(a, **SETTINGS) as store:
        store.import_jsonl(io.StringIO(text), batch_size=batch)
        keep = store.ctx.settings.default_tail_turns
    imported = [d["session_id"] for d in map(json.loads, text.splitlines()) if d["kind"] == "end"]
    with psycopg.connect(a) as c:
        for sid in imported:
            _check_keep_window(a, sid, keep)
            c.execute("SELECT shardstore.fold_sealed_v2(%s, 0)", (sid,))
    # v1 takes no keep count: the query's last parameter is read and dropped
    v1 = query("import_turns").replace("import_turns_v3", "import_turns")
    v1 = v1.replace("%s, %s)", "%s) CROSS JOIN (SELECT %s::integer) AS unused_keep")
    assert v1.count("%s") == query("import_turns").count("%s") and "unused_keep" in v1
    with monkeypatch.context() as m:
        m.setattr(writer, "query", lambda name: v1 if name == "import_turns" else query(name))
        with shardstore.connect(b, **SETTINGS) as store:
            store.import_jsonl(io.StringIO(text), batch_size=batch)


def _check_keep_window(dsn: str, sid: str, keep: int) -> None:
    """After an import the buffer holds exactly what fold_sealed_v2(keep) leaves there: the
    session's newest ``keep`` turns (all, if fewer) and no sealed chunk it would fold."""
    with psycopg.connect(dsn) as c:
        (total,) = c.execute(
            "SELECT next_turn_seq FROM shardstore.sessions WHERE session_id = %s", (sid,)
        ).fetchone() or (0,)
        buffered = [
            int(t)
            for (t,) in c.execute(
                "SELECT turn_seq FROM shardstore.turn_buffer WHERE session_id = %s"
                " ORDER BY turn_seq",
                (sid,),
            )
        ]
        assert buffered[-keep:] == list(range(max(0, total - keep), total))
        with c.transaction(force_rollback=True):
            (moved,) = c.execute(
                "SELECT shardstore.fold_sealed_v2(%s, %s)", (sid, keep)
            ).fetchone() or (None,)
        assert moved == 0


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 7, 500])
def test_an_import_stores_what_the_buffered_path_stored(
    two_databases: tuple[str, str], batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """120 turns over many token seals and partition crossings, keys on every third turn:
    every stored row of both paths is the same, and the history reads back as imported."""
    a, b = two_databases
    sid = uuid.uuid4()
    sizes = [5 + (i * 13) % 40 for i in range(120)]
    gaps = [0 if i % 5 else 17 for i in range(120)]
    _import_both(a, b, _jsonl(sid, sizes, gaps, keyed=True), batch, monkeypatch)
    direct, buffered = _stored(a, sid), _stored(b, sid)
    assert len(direct["chunks"]) > 10
    assert len({row[0] for row in direct["chunks"]}) > 3  # several partitions
    assert direct == buffered
    with shardstore.connect(a, **SETTINGS) as store:
        history = list(store.history(sid))
    assert [t.message for t in history] == [_message(i, s) for i, s in enumerate(sizes)]


@pytest.mark.slow
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    turns=st.lists(
        st.tuples(st.integers(0, 150), st.sampled_from([0, 0, 1, 30, 61, 200])),
        min_size=0,
        max_size=80,
    ),
    batch=st.integers(1, 40),
    keyed=st.booleans(),
)
def test_any_import_stores_what_the_buffered_path_stored(
    two_databases: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    turns: list[tuple[int, int]],
    batch: int,
    keyed: bool,
) -> None:
    """Random sizes (up to a turn over the whole chunk budget), time gaps (equal times,
    partition crossings, hours) and batch sizes: both paths store the same rows."""
    a, b = two_databases
    sid = uuid.uuid4()
    sizes, gaps = [t[0] for t in turns], [t[1] for t in turns]
    _import_both(a, b, _jsonl(sid, sizes, gaps, keyed), batch, monkeypatch)
    assert _stored(a, sid) == _stored(b, sid)


def _buffer_counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT n_tup_ins, n_tup_del FROM pg_stat_xact_user_tables"
        " WHERE schemaname = 'shardstore' AND relname = 'turn_buffer'"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_batch_buffers_only_the_open_chunk_and_the_keep_window(dsn: str) -> None:
    """In the import statement's own transaction: turn_buffer gets only the turns of the
    chunk left open, of the sealed chunks holding the newest default_tail_turns turns
    (decision 0020) and of the chunk open before the batch; the statement folds what an
    earlier batch kept there once the window moved on, and nothing is lost."""
    shardstore.connect(dsn, **SETTINGS).close()
    with psycopg.connect(dsn) as conn:
        store = shardstore.connect(conn, **SETTINGS)
        keep = store.ctx.settings.default_tail_turns
        sid = store.create_session("acme", "user:1", "agent-x")
        conn.commit()
        start = datetime.now(UTC) - 3 * HOUR
        seq = before = 0
        for _ in range(3):
            batch = Batch()
            for _ in range(60):
                batch.add(store.ctx, _message(seq, 30), f"turn {seq}")
                batch.times.append(start + timedelta(seconds=seq))
                seq += 1
            with conn.transaction():
                # counts of this backend not yet reported (they span transactions): a diff
                ready = _buffer_counts(conn)
                row = conn.execute(
                    query("import_turns"),
                    (
                        sid,
                        seq - 60,
                        _array(batch.texts),
                        batch.tokens,
                        batch.sizes,
                        batch.keys,
                        batch.times,
                        *_chunking(store.ctx),
                        keep,
                    ),
                ).fetchone()
                assert row is not None and row[0] == "ok" and row[2] is False
                done = _buffer_counts(conn)
                ins, dele = done[0] - ready[0], done[1] - ready[1]
                rows = conn.execute(
                    "SELECT turn_seq, chunk_seq FROM shardstore.turn_buffer"
                    " WHERE session_id = %s ORDER BY turn_seq",
                    (sid,),
                ).fetchall()
                folded = conn.execute(
                    "SELECT count(*), sum(turn_count) FROM shardstore.agent_history"
                    " WHERE session_id = %s",
                    (sid,),
                ).fetchone()
                assert folded is not None
                buffered = len(rows)
                chunks = [c for _, c in rows]
                assert [t for t, _ in rows] == list(range(seq - buffered, seq))
                # the window: newest 20 turns; its oldest chunk is needed for them
                assert buffered >= keep
                assert buffered - chunks.count(chunks[0]) < keep
                assert folded[1] + buffered == seq  # nothing lost
                if seq == 60:
                    assert (ins, dele) == (buffered, 0)
                else:  # the earlier window and open chunk: continued or folded here
                    assert dele >= before
                    assert ins - dele == buffered - before
                before = buffered
        store.close()


def test_an_import_still_refuses_what_v1_refused(store: shardstore.Store) -> None:
    """The checks are v1's: a turn before the one preceding it is refused and the session's
    transaction leaves nothing."""
    sid = uuid.uuid4()
    text = _jsonl(sid, [5, 5, 5], [0, 10, 0], keyed=False)
    lines = text.splitlines(keepends=True)
    turn = json.loads(lines[3])
    turn["created_at"] = "2001-01-01T00:00:00+00:00"
    lines[3] = json.dumps(turn) + "\n"
    with pytest.raises(shardstore.errors.ImportRejected, match="line 4: created_at 2001"):
        store.import_jsonl(io.StringIO("".join(lines)))
    with pytest.raises(shardstore.errors.SessionNotFound):
        store.session(sid)
