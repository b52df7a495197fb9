"""GDPR purge: every purge_* function, tombstones, reports, dry runs, vacuum, the registry."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.lifecycle.purge import AGENT_HISTORY, SESSIONS, PurgeReport, TableRemoval
from tests.purge_support import (
    converse,
    hits,
    message,
    next_second,
    rich_session,
    snapshot,
    table_rows,
    without,
)

# default_tail_turns=1: a fold keeps no sealed chunk in the buffer (0035), so the chunks these
# tests purge are in agent_history's partitions as soon as their folds ran
SMALL = {"chunk_tokens": 200, "partition_interval": timedelta(seconds=1), "default_tail_turns": 1}
CORE = [
    "shardstore.turn_buffer",
    AGENT_HISTORY,
    "shardstore.chunk_map",
    "shardstore.turn_keys",
]


@pytest.fixture
def small(make_store: Callable[..., shardstore.Store]) -> shardstore.Store:
    return make_store(**SMALL)


@pytest.mark.slow
def test_purge_subject_leaves_no_marker_and_every_other_subject_unchanged(
    small: shardstore.Store, dsn: str
) -> None:
    victim = f"VICTIM-{uuid.uuid4().hex}"
    others = [f"OTHER{i}-{uuid.uuid4().hex}" for i in range(2)]
    victim_sessions = [
        rich_session(small, victim, subject=f"user:{victim}"),
        rich_session(small, victim, subject=f"user:{victim}"),
    ]
    other_sessions = [rich_session(small, m, subject=f"user:{m}") for m in others]
    empty = small.create_session("acme", f"user:{victim}", metadata={"m": victim})
    victim_sessions.append(empty)
    small.drain_folds()
    before_rows = table_rows(dsn)
    assert hits(before_rows, victim), "the marker is stored before the purge"
    assert {t for t, _ in hits(before_rows, victim)} >= {
        "shardstore.sessions",
        "shardstore.turn_buffer",
        "shardstore.turn_keys",
    }
    assert any(t.startswith("shardstore.agent_history_p") for t, _ in hits(before_rows, victim))
    histories = {sid: snapshot(small, sid) for sid in other_sessions}

    report = small.purge_subject("acme", f"user:{victim}")

    after_rows = table_rows(dsn)
    assert hits(after_rows, victim) == []
    # every other row of every table, byte for byte
    victim_ids = [str(s) for s in victim_sessions]
    assert without(after_rows, victim_ids) == without(before_rows, victim_ids)
    # the victim's sessions are left as tombstones only
    for sid in victim_ids:
        assert [t for t, _ in hits(after_rows, sid)] == ["shardstore.sessions"]
    for sid, history in histories.items():
        assert snapshot(small, sid) == history
    assert set(report.session_ids) == set(victim_sessions)
    assert report.tombstoned == 3 and report.sessions_affected == 3
    for sid in victim_sessions:
        with pytest.raises(shardstore.SessionPurged):
            list(small.history(sid))


def test_purge_subject_is_scoped_to_its_tenant(small: shardstore.Store) -> None:
    mine = small.create_session("acme", "user:x")
    same_name = small.create_session("other-org", "user:x")
    for sid in (mine, same_name):
        converse(small, sid, "SCOPE", 6)
    history = snapshot(small, same_name)
    report = small.purge_subject("acme", "user:x")
    assert report.session_ids == (mine,)
    assert snapshot(small, same_name) == history
    assert small.session(same_name).subject_id == "user:x"


@pytest.mark.slow
def test_purge_session_report_and_tombstone(small: shardstore.Store, dsn: str) -> None:
    marker = uuid.uuid4().hex
    sid = rich_session(small, marker, subject="user:1")
    keep = small.create_session("acme", "user:2")
    small.append_turn(keep, {"role": "user", "content": "stay"})
    with psycopg.connect(dsn) as conn:
        counts = {
            table: conn.execute(
                f"SELECT count(*) FROM {table} WHERE session_id = %s", (sid,)
            ).fetchone()[0]  # type: ignore[index]
            for table in CORE
        }
    assert all(counts.values())

    report = small.purge_session(sid)

    assert isinstance(report, PurgeReport) and report.kind == "session" and not report.dry_run
    assert list(report.tables)[:1] == [SESSIONS] or SESSIONS in report.tables
    for table in CORE:
        assert report.tables[table].rows == counts[table], table
        assert report.tables[table].bytes > 0
    assert report.tables[SESSIONS] == TableRemoval(0, 1, report.tables[SESSIONS].bytes)
    assert report.tables[SESSIONS].bytes > 0  # subject, agent, metadata cleared
    assert len(report.partitions) >= 2  # the session spans two partitions
    assert sum(p.rows for p in report.partitions.values()) == report.tables[AGENT_HISTORY].rows
    assert report.session_ids == (sid,) and report.tombstoned == 1 and report.batches == 1
    assert report.rows == sum(t.rows for t in report.tables.values()) > 0
    assert report.bytes > 0 and report.seconds > 0 and report.vacuumed == ()
    doc = report.to_dict()
    assert doc["tables"][AGENT_HISTORY]["rows"] == counts[AGENT_HISTORY]
    assert doc["session_ids"] == [str(sid)]

    info = small.session(sid)
    assert info.purged and info.subject_id is None and info.agent_id is None
    assert info.metadata == {} and info.tenant_id == "acme"
    for read in (lambda: small.tail(sid), lambda: list(small.history(sid))):
        with pytest.raises(shardstore.SessionPurged):
            read()
    with pytest.raises(shardstore.SessionPurged):
        small.chunks(sid)
    with pytest.raises(shardstore.SessionPurged):
        small.append_turn(sid, {"role": "user", "content": "late"})
    with pytest.raises(shardstore.SessionPurged):
        small.append_turns(sid, [{"role": "user", "content": "late"}] * 2)
    with pytest.raises(shardstore.SessionPurged):
        small.flush(sid)
    with pytest.raises(shardstore.SessionPurged):
        small.create_session("acme", "user:1", session_id=sid)
    with pytest.raises(shardstore.SessionPurged):
        small.purge_range(sid, before_turn_seq=3)
    assert [t.message["content"] for t in small.tail(keep)] == ["stay"]

    again = small.purge_session(sid)  # idempotent
    assert again.rows == 0 and again.tombstoned == 0 and again.session_ids == ()
    assert small.session(sid).purged
    with pytest.raises(shardstore.SessionNotFound):
        small.purge_session(uuid.uuid4())
    with pytest.raises(shardstore.InvalidInput):
        small.purge_session("not-a-uuid")


@pytest.mark.slow
def test_dry_run_reports_what_a_purge_removes_and_removes_nothing(
    small: shardstore.Store, dsn: str
) -> None:
    marker = uuid.uuid4().hex
    sids = [rich_session(small, marker, subject="user:dry") for _ in range(3)]
    small.drain_folds()
    before = table_rows(dsn)

    dry = small.purge_subject("acme", "user:dry", dry_run=True, batch_size=2)
    assert table_rows(dsn) == before
    assert dry.dry_run and dry.batches == 2 and set(dry.session_ids) == set(sids)
    dry_session = small.purge_session(sids[0], dry_run=True)
    dry_range = small.purge_range(sids[1], before_turn_seq=7, dry_run=True)
    dry_before = small.purge_before(datetime.now(UTC), dry_run=True)
    assert table_rows(dsn) == before
    assert dry_range.cut_turn_seq == 7 and dry_before.rows > 0

    real_session = small.purge_session(sids[0])
    assert real_session.tables == dry_session.tables
    real_range = small.purge_range(sids[1], before_turn_seq=7)
    assert real_range.tables == dry_range.tables
    rest = small.purge_subject("acme", "user:dry", dry_run=True)
    real = small.purge_subject("acme", "user:dry")
    assert real.tables == rest.tables and real.session_ids == rest.session_ids
    assert real.session_ids == (sids[1], sids[2]) or set(real.session_ids) == {sids[1], sids[2]}


@pytest.mark.slow
def test_purge_tenant_keeps_other_tenants(small: shardstore.Store, dsn: str) -> None:
    gone = [rich_session(small, f"T1-{i}", subject=f"user:{i}", tenant="t1") for i in range(2)]
    kept = rich_session(small, "T2", subject="user:0", tenant="t2")
    small.drain_folds()
    history = snapshot(small, kept)
    before = table_rows(dsn)

    report = small.purge_tenant("t1", batch_size=1)

    assert report.kind == "tenant" and report.batches == 2 and report.tombstoned == 2
    after = table_rows(dsn)
    ids = [str(s) for s in gone]
    assert without(after, ids) == without(before, ids)
    assert not hits(after, "T1-")
    assert snapshot(small, kept) == history
    for sid in gone:
        info = small.session(sid)
        assert info.purged and info.tenant_id == "t1"
    assert small.purge_tenant("t1").rows == 0


@pytest.mark.parametrize("where", ["chunk-start", "mid-chunk", "open-chunk", "everything"])
def test_purge_range_by_turn(small: shardstore.Store, dsn: str, where: str) -> None:
    marker = uuid.uuid4().hex
    sid = small.create_session("acme", "user:1")
    converse(small, sid, marker, 40)
    small.drain_folds()
    small.flush(sid)
    converse(small, sid, marker, 3, start=40)
    small.drain_folds()
    chunks = small.chunks(sid)
    assert len(chunks) >= 4
    full = snapshot(small, sid)
    cut = {
        "chunk-start": chunks[2].first_turn_seq,
        "mid-chunk": chunks[2].first_turn_seq + 1,
        "open-chunk": 41,
        "everything": 43,
    }[where]
    assert chunks[2].turn_count >= 2

    report = small.purge_range(sid, before_turn_seq=cut)

    assert report.cut_turn_seq == cut and report.session_ids == (sid,)
    assert report.tables["shardstore.turn_keys"].rows == len(
        [t for t in full if t[0] < cut and t[4] is not None]
    )
    assert snapshot(small, sid) == [t for t in full if t[0] >= cut]
    rows = table_rows(dsn)
    for t in full:
        if t[0] % 3 == 2:
            continue  # a tool call: no text of its own
        text = f"hello for the {t[0]}th time"
        assert bool(hits(rows, text)) == (t[0] >= cut), t[0]
    tail = small.tail(sid, n=100)
    assert [t.turn_seq for t in tail][-1:] == ([42] if cut < 43 else [])
    after = small.chunks(sid)
    assert sum(c.turn_count for c in after) == 43 - cut
    assert all(c.first_turn_seq >= cut for c in after)
    if where == "mid-chunk":
        assert report.tables[AGENT_HISTORY].rewritten == 1
        assert after[0].chunk_seq == chunks[2].chunk_seq
        assert after[0].token_count == chunks[2].token_count - full[cut - 1][2]
    # the session goes on; a retry of a purged turn's key is a new turn
    r = small.append_turn(sid, {"role": "user", "content": "more"}, f"{marker}-k0")
    assert r.turn_seq == 43 and not r.duplicate
    converse(small, sid, "again", 20, start=0)
    small.drain_folds()
    seqs = [t[0] for t in snapshot(small, sid)]
    assert seqs == list(range(cut, 64))
    again = small.purge_range(sid, before_turn_seq=cut)
    assert again.rows == 0 and again.session_ids == ()


@pytest.mark.slow
def test_purge_range_by_time(small: shardstore.Store) -> None:
    sid = small.create_session("acme", "user:1")
    converse(small, sid, "old", 12)
    small.drain_folds()
    next_second()
    converse(small, sid, "new", 12, start=12)
    small.drain_folds()
    full = snapshot(small, sid)
    cutoff = full[12][3]
    assert full[11][3] < cutoff

    report = small.purge_range(sid, before=cutoff)

    assert report.cut_turn_seq == 12
    assert snapshot(small, sid) == full[12:]
    with pytest.raises(shardstore.InvalidInput):
        small.purge_range(sid)
    with pytest.raises(shardstore.InvalidInput):
        small.purge_range(sid, before_turn_seq=3, before=cutoff)
    with pytest.raises(shardstore.InvalidInput):
        small.purge_range(sid, before=datetime(2026, 1, 1))  # naive
    with pytest.raises(shardstore.SessionNotFound):
        small.purge_range(uuid.uuid4(), before_turn_seq=1)
    assert small.purge_range(sid, before=cutoff - timedelta(days=1)).rows == 0


@pytest.mark.slow
def test_purge_before_truncates_old_partitions_and_cuts_the_rest(
    small: shardstore.Store, dsn: str
) -> None:
    old = small.create_session("acme", "user:old")
    both = small.create_session("acme", "user:both")
    next_second()  # a whole second ahead for the old turns
    converse(small, old, "OLDONLY", 10)
    converse(small, both, "BOTHOLD", 10)
    small.drain_folds()
    next_second()
    converse(small, both, "BOTHMID", 6, start=10)
    small.drain_folds()
    next_second()
    converse(small, both, "BOTHNEW", 6, start=16)
    small.drain_folds()
    full = snapshot(small, both)
    cutoff = full[16][3]  # first turn of the newest second
    old_history = snapshot(small, old)
    assert old_history[-1][3] < cutoff

    dry = small.purge_before(cutoff, dry_run=True)
    report = small.purge_before(cutoff, vacuum=True)

    assert len(report.partitions_truncated) >= 2
    assert report.partitions_truncated == dry.partitions_truncated
    assert report.tables == dry.tables
    assert set(report.session_ids) == {old, both}
    truncated_rows = sum(report.partitions[p].rows for p in report.partitions_truncated)
    assert truncated_rows > 0
    assert snapshot(small, both) == full[16:]
    assert snapshot(small, old) == []
    assert small.tail(old) == []
    rows = table_rows(dsn)
    for needle in ("OLDONLY", "BOTHOLD", "BOTHMID"):
        assert hits(rows, needle) == []
    assert len(hits(rows, "BOTHNEW")) > 0
    assert not small.session(old).purged  # retention is not a tombstone
    small.append_turn(old, {"role": "user", "content": "back"})
    assert [t.message["content"] for t in small.history(old)] == ["back"]
    assert small.purge_before(cutoff).rows == 0


@pytest.mark.slow
def test_purge_before_of_one_tenant_spares_shared_partitions(
    small: shardstore.Store, dsn: str
) -> None:
    mine = small.create_session("t1", "user:1")
    theirs = small.create_session("t2", "user:1")
    next_second()  # both tenants' old turns in one partition
    converse(small, mine, "MINE", 8)
    converse(small, theirs, "THEIRS", 8)
    small.drain_folds()
    next_second()
    converse(small, mine, "LATER", 4, start=8)
    small.drain_folds()
    cutoff = snapshot(small, mine)[8][3]
    their_history = snapshot(small, theirs)

    report = small.purge_before(cutoff, "t1")

    assert report.partitions_truncated == ()  # the old partition holds t2's chunks too
    assert report.tables[AGENT_HISTORY].rows > 0
    assert snapshot(small, theirs) == their_history
    assert [t[0] for t in snapshot(small, mine)] == [8, 9, 10, 11]
    assert hits(table_rows(dsn), "MINE") == []


@pytest.mark.slow
def test_vacuum_runs_on_what_was_touched(small: shardstore.Store, dsn: str) -> None:
    sid = rich_session(small, "VAC", subject="user:v")
    report = small.purge_session(sid, vacuum=True)
    assert set(report.vacuumed) >= {SESSIONS, *[t for t in CORE if t != AGENT_HISTORY]}
    assert set(report.partitions) <= set(report.vacuumed)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT relname, last_vacuum IS NOT NULL FROM pg_stat_user_tables"
            " WHERE schemaname = 'shardstore' AND relname IN ('turn_buffer', 'sessions')"
        ).fetchall()
    assert rows and all(done for _, done in rows)
    assert small.purge_session(sid, dry_run=True, vacuum=True).vacuumed == ()


def test_registered_tables_are_purged(small: shardstore.Store, dsn: str) -> None:
    """Later issues' tables only register in shardstore.purge_targets."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE shardstore.test_facts (session_id uuid NOT NULL, turn_seq bigint,"
            " fact text, PRIMARY KEY (session_id, turn_seq))"
        )
        conn.execute(
            "CREATE TABLE shardstore.test_vectors (session_id uuid NOT NULL, chunk_seq bigint,"
            " chunk_start timestamptz, v text)"
        )
        conn.execute("CREATE TABLE shardstore.test_runs (session_id uuid NOT NULL, state text)")
        conn.execute(
            "INSERT INTO shardstore.purge_targets (table_name, turn_column) VALUES"
            " ('shardstore.test_facts', 'turn_seq')"
        )
        conn.execute(
            "INSERT INTO shardstore.purge_targets (table_name, chunk_column, chunk_start_column)"
            " VALUES ('shardstore.test_vectors', 'chunk_seq', 'chunk_start')"
        )
        conn.execute(
            "INSERT INTO shardstore.purge_targets (table_name) VALUES ('shardstore.test_runs')"
        )
    sid = small.create_session("acme", "user:1")
    other = small.create_session("acme", "user:2")
    converse(small, sid, "REG", 30)
    small.drain_folds()
    chunks = small.chunks(sid)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in (sid, other):
            conn.execute(
                "INSERT INTO shardstore.test_facts SELECT %s, g, 'fact ' || g"
                " FROM generate_series(0, 29) g",
                (s,),
            )
            conn.execute("INSERT INTO shardstore.test_runs VALUES (%s, 'running')", (s,))
            for c in chunks:
                conn.execute(
                    "INSERT INTO shardstore.test_vectors VALUES (%s, %s, %s, 'vec')",
                    (s, c.chunk_seq, c.chunk_start),
                )
    cut = chunks[1].first_turn_seq + 1  # inside chunk 1: chunk 0 deleted, chunk 1 rewritten

    report = small.purge_range(sid, before_turn_seq=cut)

    assert report.tables["shardstore.test_facts"].rows == cut
    assert report.tables["shardstore.test_vectors"].rows == 2
    assert report.tables["shardstore.test_runs"].rows == 0  # session-level: kept
    with psycopg.connect(dsn) as conn:
        facts = conn.execute(
            "SELECT min(turn_seq) FROM shardstore.test_facts WHERE session_id = %s", (sid,)
        ).fetchone()
        assert facts == (cut,)
        vectors = conn.execute(
            "SELECT array_agg(chunk_seq ORDER BY chunk_seq) FROM shardstore.test_vectors"
            " WHERE session_id = %s",
            (sid,),
        ).fetchone()
        assert vectors is not None and vectors[0] == [c.chunk_seq for c in chunks[2:]]

    whole = small.purge_session(sid)
    assert whole.tables["shardstore.test_facts"].rows == 30 - cut
    assert whole.tables["shardstore.test_runs"].rows == 1
    with psycopg.connect(dsn) as conn:
        for table in ("test_facts", "test_vectors", "test_runs"):
            left = conn.execute(
                f"SELECT count(*) FILTER (WHERE session_id = %s), count(*) FROM shardstore.{table}",
                (sid,),
            ).fetchone()
            assert left is not None and left[0] == 0 and left[1] > 0, table


@pytest.mark.slow
def test_rewrite_resets_registered_columns(small: shardstore.Store, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE shardstore.agent_history ADD COLUMN test_vec text")
        conn.execute(
            "UPDATE shardstore.purge_targets SET rewrite_reset = '{test_vec}'"
            " WHERE table_name = 'shardstore.agent_history'::regclass"
        )
    sid = small.create_session("acme", "user:1")
    converse(small, sid, "RW", 20)
    small.drain_folds()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE shardstore.agent_history SET test_vec = 'embedding of old text'")
    chunk = small.chunks(sid)[1]
    small.purge_range(sid, before_turn_seq=chunk.first_turn_seq + 1)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT chunk_seq, test_vec FROM shardstore.agent_history ORDER BY chunk_seq"
        ).fetchall()
    assert rows[0] == (chunk.chunk_seq, None)
    assert all(v == "embedding of old text" for _, v in rows[1:])


@pytest.mark.slow
def test_detached_partitions_are_purged_too(small: shardstore.Store, dsn: str) -> None:
    sid = small.create_session("acme", "user:1")
    converse(small, sid, "DETACHED", 10)
    small.drain_folds()
    with psycopg.connect(dsn, autocommit=True) as conn:
        (part,) = conn.execute(  # type: ignore[misc]
            "SELECT DISTINCT tableoid::regclass::text FROM shardstore.agent_history"
        ).fetchone()
        conn.execute(f"ALTER TABLE shardstore.agent_history DETACH PARTITION {part}")
    report = small.purge_session(sid)
    assert report.partitions[part].rows > 0
    assert hits(table_rows(dsn), "DETACHED") == []


@pytest.mark.slow
def test_async_purge_matches_sync(new_database: Callable[[], str]) -> None:
    async def scenario(dsn: str) -> tuple[PurgeReport, PurgeReport, list[int]]:
        store = await shardstore.connect_async(dsn, chunk_tokens=200)
        try:
            sid = await store.create_session("acme", "user:1")
            other = await store.create_session("acme", "user:1")
            for i in range(30):
                await store.append_turn(sid, message("ASYNC", i), f"k{i}")
                await store.append_turn(other, message("ASYNC", i), f"k{i}")
            await store.drain_folds()
            # background folds index buffered turns for text search as they go (0038): index
            # them all, so that both purges find the same turn_text rows
            await store.maintain(embed=False)
            ranged = await store.purge_range(sid, before_turn_seq=11)
            seqs = [t.turn_seq async for t in store.history(sid)]
            subject = await store.purge_subject("acme", "user:1", progress=False)
            with pytest.raises(shardstore.SessionPurged):
                await store.append_turn(sid, {"role": "user", "content": "late"})
            assert (await store.purge_tenant("acme")).rows == 0
            assert (await store.purge_session(sid)).rows == 0
            assert (await store.purge_before(datetime.now(UTC))).rows == 0
            return ranged, subject, seqs
        finally:
            await store.close()

    def sync_scenario(dsn: str) -> tuple[PurgeReport, PurgeReport, list[int]]:
        with shardstore.connect(dsn, chunk_tokens=200) as store:
            sid = store.create_session("acme", "user:1")
            other = store.create_session("acme", "user:1")
            for i in range(30):
                store.append_turn(sid, message("ASYNC", i), f"k{i}")
                store.append_turn(other, message("ASYNC", i), f"k{i}")
            store.drain_folds()
            store.maintain(embed=False)  # as above
            ranged = store.purge_range(sid, before_turn_seq=11)
            seqs = [t.turn_seq for t in store.history(sid)]
            return ranged, store.purge_subject("acme", "user:1"), seqs

    a_range, a_subject, a_seqs = asyncio.run(scenario(new_database()))
    s_range, s_subject, s_seqs = sync_scenario(new_database())
    assert a_seqs == s_seqs == list(range(11, 30))

    def shape(r: PurgeReport) -> Any:
        return {k: (v.rows, v.rewritten) for k, v in r.tables.items()}, r.tombstoned

    assert shape(a_range) == shape(s_range)
    assert shape(a_subject) == shape(s_subject)


def test_bad_arguments(small: shardstore.Store) -> None:
    with pytest.raises(shardstore.InvalidInput):
        small.purge_subject("", "x")
    with pytest.raises(shardstore.InvalidInput):
        small.purge_subject("acme", "x", batch_size=0)
    with pytest.raises(shardstore.InvalidInput):
        small.purge_tenant(None)  # type: ignore[arg-type]
    with pytest.raises(shardstore.InvalidInput):
        small.purge_before("yesterday")  # type: ignore[arg-type]
    with pytest.raises(shardstore.InvalidInput):
        small.purge_range(uuid.uuid4(), before_turn_seq=-1)
    with pytest.raises(shardstore.InvalidInput):
        small.purge_subject("acme", "x", progress="yes")  # type: ignore[arg-type]
