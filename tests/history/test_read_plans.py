"""Plan properties that keep the hot reads flat as partitions pile up (python -m benchmarks
scale measures the timings at hundreds of partitions; here a handful is enough to see the plan),
and stats() of a database with purged sessions."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.core.sql import query

HOURS = 6


def _session_jsonl(sid: uuid.UUID, start: datetime, turns: int, gap: timedelta) -> str:
    """One session in the JSONL export format, its turns ``gap`` apart from ``start``."""
    lines = [
        {
            "kind": "session",
            "format": "shardstore.jsonl",
            "version": 1,
            "session_id": str(sid),
            "tenant_id": "acme",
            "subject_id": "alice",
            "agent_id": None,
            "metadata": {},
            "created_at": start.isoformat(),
        }
    ]
    for i in range(turns):
        lines.append(
            {
                "kind": "turn",
                "turn_seq": i,
                "created_at": (start + i * gap).isoformat(),
                "idempotency_key": None,
                "message": {"role": "user", "content": f"turn {i} " + "word " * 40},
            }
        )
    lines.append({"kind": "end", "session_id": str(sid), "turns": turns})
    return "".join(json.dumps(line) + "\n" for line in lines)


@pytest.fixture
def spread(make_store: Callable[..., shardstore.Store]) -> tuple[shardstore.Store, uuid.UUID]:
    """A store with 1-hour partitions and one session whose chunks lie in HOURS past
    partitions (each hour boundary seals a chunk). One turn stays in the write buffer
    (``default_tail_turns=1``): with the default window the newest 20 turns' chunks would
    stay buffered too, outside every partition."""
    store = make_store(partition_interval=timedelta(hours=1), default_tail_turns=1)
    sid = uuid.uuid4()
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = hour - timedelta(hours=HOURS + 1)
    store.import_jsonl(io.StringIO(_session_jsonl(sid, start, HOURS * 4, timedelta(minutes=15))))
    return store, sid


def _scans(plan: dict[str, Any]) -> list[str]:
    """The agent_history partitions a plan scans."""
    name = plan.get("Relation Name", "")
    found = [name] if name.startswith("agent_history") else []
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


def _plan(dsn: str, name: str, params: tuple[Any, ...]) -> dict[str, Any]:
    """The plan of a named statement as the store sends its partition-key reads
    (unprepared, the values in the text)."""
    with psycopg.connect(dsn) as conn:
        cur = psycopg.ClientCursor(conn)
        cur.execute("EXPLAIN (FORMAT JSON) " + query(name), params)
        row = cur.fetchone()
        assert row is not None
        return dict(row[0][0]["Plan"])


def test_chunk_reads_scan_only_the_partitions_of_their_chunks(
    spread: tuple[shardstore.Store, uuid.UUID], dsn: str
) -> None:
    store, sid = spread
    partitions = store.stats().partitions
    chunks = [c for c in store.chunks(sid) if not c.is_open]
    assert len({c.partition for c in chunks}) >= HOURS - 1
    assert len(partitions) >= HOURS
    for name in ("chunk_texts", "chunk_meta"):
        one = chunks[len(chunks) // 2]
        scans = _scans(_plan(dsn, name, (sid, [one.chunk_seq], [one.chunk_start])))
        assert scans == [one.partition], (name, scans)
        two = [chunks[0], chunks[-1]]
        scans = _scans(
            _plan(dsn, name, (sid, [c.chunk_seq for c in two], [c.chunk_start for c in two]))
        )
        assert sorted(scans) == sorted(str(c.partition) for c in two), (name, scans)


def test_reads_of_a_spread_session_return_every_turn(
    spread: tuple[shardstore.Store, uuid.UUID],
) -> None:
    store, sid = spread
    last = store.chunks(sid, last=3)
    turns = list(store.history(sid, last[0].first_turn_seq))
    assert [t.turn_seq for t in turns] == list(range(last[0].first_turn_seq, HOURS * 4))
    assert [t.turn_seq for t in store.tail(sid, n=5)] == list(range(HOURS * 4 - 5, HOURS * 4))


def test_stats_leaves_out_purged_sessions(store: shardstore.Store) -> None:
    kept = store.create_session("acme", "bob")
    gone = store.create_session("acme", "alice")
    store.append_turns(kept, [{"role": "user", "content": f"k{i}"} for i in range(3)])
    store.append_turns(gone, [{"role": "user", "content": f"g{i}"} for i in range(5)])
    assert (store.stats().sessions, store.stats().turns) == (2, 8)
    store.purge_subject("acme", "alice")
    stats = store.stats()
    assert (stats.sessions, stats.turns) == (1, 3)
    assert len(list(store.history(kept))) == 3
