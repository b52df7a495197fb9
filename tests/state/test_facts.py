"""Facts (shardstore/state/facts.py): versions that never overlap per key,
provenance checked against the history, purges and retention, Row-Level Security,
concurrent and killed writers, and an in-memory model under hypothesis."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import shardstore
from shardstore.cli.app import main as cli_main
from shardstore.schema import rls
from tests.purge_support import hits, table_rows

T, S = "acme", "user:42"


def _facts(dsn: str) -> list[tuple[Any, ...]]:
    """Every row of shardstore.facts, as the superuser sees them."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT f::text FROM shardstore.facts f ORDER BY 1").fetchall()


def _overlaps(dsn: str) -> list[tuple[Any, ...]]:
    """Pairs of versions of one key whose validity overlaps (must always be empty), and
    keys with more than one open version."""
    with psycopg.connect(dsn) as conn:
        pairs = conn.execute(
            "SELECT a.fact_id, b.fact_id FROM shardstore.facts a JOIN shardstore.facts b"
            "  ON a.tenant_id = b.tenant_id AND a.subject = b.subject AND a.key = b.key"
            " AND a.fact_id < b.fact_id"
            " WHERE tstzrange(a.valid_from, a.valid_to) && tstzrange(b.valid_from, b.valid_to)"
        ).fetchall()
        opens = conn.execute(
            "SELECT tenant_id, subject, key FROM shardstore.facts WHERE valid_to IS NULL"
            " GROUP BY 1, 2, 3 HAVING count(*) > 1"
        ).fetchall()
    return pairs + opens


def _session(store: shardstore.Store, tenant: str = T, subject: str = S, turns: int = 3) -> Any:
    sid = store.create_session(tenant, subject, "bot")
    store.append_turns(sid, [{"role": "user", "content": f"turn {i}"} for i in range(turns)])
    return sid


# ---------------------------------------------------------------- behaviour


def test_remember_recall_forget_history(store: shardstore.Store, dsn: str) -> None:
    sid = _session(store)
    f1 = store.remember(T, S, "city", "Paris", source=(sid, 1), confidence=0.8)
    assert (f1.value, f1.confidence, f1.source_session_id, f1.source_turn_seq) == (
        "Paris",
        0.8,
        sid,
        1,
    )
    assert f1.valid_to is None and f1.valid_from.tzinfo is not None
    assert store.recall(T, S) == [f1]
    value = {"name": "Lyon", "zip": ["69001", 1.5, None, True], "odd": "\x00\ud800"}
    f2 = store.remember(T, S, "city", value, source=None)
    assert f2.valid_from > f1.valid_from and f2.value == value
    store.remember(T, S, "diet", "vegan", source=(str(sid), 0))
    now = store.recall(T, S)
    assert [(f.key, f.value) for f in now] == [("city", value), ("diet", "vegan")]
    assert store.recall(T, S, ["city"]) == [f2]
    assert store.recall(T, S, ["nope"]) == []
    assert store.recall(T, S, []) == []
    # the first version, closed at the second's start, is what was believed before
    (old,) = store.recall(T, S, ["city"], as_of=f1.valid_from)
    assert old.fact_id == f1.fact_id and old.valid_to == f2.valid_from
    assert store.recall(T, S, as_of=f1.valid_from - timedelta(microseconds=1)) == []
    gone = store.forget(T, S, "city")
    assert gone is not None and gone.fact_id == f2.fact_id and gone.value == value
    assert gone.valid_to is not None and gone.valid_to > gone.valid_from
    assert store.forget(T, S, "city") is None
    assert store.forget(T, S, "never") is None
    assert [f.key for f in store.recall(T, S)] == ["diet"]
    history = store.fact_history(T, S, "city")
    assert [f.fact_id for f in history] == [f1.fact_id, f2.fact_id]
    assert history[0].valid_to == history[1].valid_from
    assert history[1].valid_to == gone.valid_to
    # after a forget, a new version starts later
    f3 = store.remember(T, S, "city", "Nice", source=None)
    assert f3.valid_from >= gone.valid_to
    # other subjects and tenants are separate
    assert store.recall(T, "user:other") == [] and store.recall("globex", S) == []
    assert _overlaps(dsn) == []


def test_valid_from_in_the_past_and_the_future(store: shardstore.Store) -> None:
    t0 = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
    a = store.remember(T, S, "plan", "free", source=None, valid_from=t0)
    b = store.remember(T, S, "plan", "pro", source=None, valid_from=t0 + timedelta(days=10))
    assert a.valid_from == t0
    assert store.recall(T, S, as_of=t0 + timedelta(days=1))[0].value == "free"
    assert store.recall(T, S, as_of=t0 + timedelta(days=10))[0].value == "pro"
    # not after the newest version's start: refused, nothing written
    for bad in (t0, t0 + timedelta(days=10), t0 - timedelta(days=1)):
        with pytest.raises(shardstore.InvalidInput, match="valid_from"):
            store.remember(T, S, "plan", "x", source=None, valid_from=bad)
    assert [f.fact_id for f in store.fact_history(T, S, "plan")] == [a.fact_id, b.fact_id]
    # a version starting in the future is not valid now, and forget leaves it
    future = datetime.now(UTC) + timedelta(days=30)
    store.remember(T, S, "plan", "enterprise", source=None, valid_from=future)
    (current,) = store.recall(T, S)
    assert current.value == "pro" and current.valid_to == future
    closed = store.forget(T, S, "plan")
    assert closed is not None and closed.value == "pro"
    assert store.recall(T, S) == []
    assert store.recall(T, S, as_of=future)[0].value == "enterprise"


def test_source_must_be_a_stored_turn_of_a_live_session_of_the_tenant(
    store: shardstore.Store, dsn: str
) -> None:
    sid = _session(store, turns=3)
    other = _session(store, tenant="globex")
    empty = store.create_session(T, S)
    cases: list[tuple[Any, type[Exception]]] = [
        ((other, 0), shardstore.SessionNotFound),  # another tenant's session
        ((uuid.uuid4(), 0), shardstore.SessionNotFound),
        ((sid, 3), shardstore.InvalidInput),  # past the end
        ((empty, 0), shardstore.InvalidInput),
    ]
    store.purge_range(sid, before_turn_seq=1)
    cases.append(((sid, 0), shardstore.InvalidInput))  # range-purged
    purged = _session(store)
    store.purge_session(purged)
    cases.append(((purged, 0), shardstore.SessionPurged))
    before = _facts(dsn)
    for source, error in cases:
        with pytest.raises(error):
            store.remember(T, S, "k", 1, source=source)
    assert _facts(dsn) == before == []
    assert store.remember(T, S, "k", 1, source=(sid, 1)).source_turn_seq == 1
    assert store.remember(T, S, "k", 2, source=(sid, 2)).source_turn_seq == 2


def test_hostile_input_gets_typed_errors_and_writes_nothing(
    store: shardstore.Store, dsn: str
) -> None:
    sid = _session(store)
    ok: dict[str, Any] = {"source": None}
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    calls: list[Callable[[], Any]] = [
        lambda: store.remember("", S, "k", 1, **ok),
        lambda: store.remember(T, None, "k", 1, **ok),  # type: ignore[arg-type]
        lambda: store.remember(T, S, "", 1, **ok),
        lambda: store.remember(T, S, "k\x00", 1, **ok),
        lambda: store.remember(T, S, "x" * 600, 1, **ok),
        lambda: store.remember(T, S, "k", math.nan, **ok),
        lambda: store.remember(T, S, "k", {1: "int key"}, **ok),
        lambda: store.remember(T, S, "k", cyclic, **ok),
        lambda: store.remember(T, S, "k", object(), **ok),
        lambda: store.remember(T, S, "k", "x" * (1 << 20), **ok),
        lambda: store.remember(T, S, "k", 1, source=(sid,)),  # type: ignore[arg-type]
        lambda: store.remember(T, S, "k", 1, source=(sid, -1)),
        lambda: store.remember(T, S, "k", 1, source=(sid, True)),
        lambda: store.remember(T, S, "k", 1, source=("not-a-uuid", 0)),
        lambda: store.remember(T, S, "k", 1, source=sid),
        lambda: store.remember(T, S, "k", 1, source=None, confidence=1.5),
        lambda: store.remember(T, S, "k", 1, source=None, confidence=-0.1),
        lambda: store.remember(T, S, "k", 1, source=None, confidence=math.nan),
        lambda: store.remember(T, S, "k", 1, source=None, confidence=True),
        lambda: store.remember(T, S, "k", 1, source=None, confidence="0.5"),  # type: ignore[arg-type]
        lambda: store.remember(T, S, "k", 1, source=None, valid_from=datetime(2026, 1, 1)),
        lambda: store.remember(T, S, "k", 1, source=None, valid_from="2026-01-01"),  # type: ignore[arg-type]
        lambda: store.recall(T, S, "city"),
        lambda: store.recall(T, S, [1]),  # type: ignore[list-item]
        lambda: store.recall(T, S, as_of=datetime(2026, 1, 1)),
        lambda: store.forget(T, S, ""),
        lambda: store.fact_history(T, "", "k"),
    ]
    for call in calls:
        with pytest.raises(shardstore.InvalidInput):
            call()
    with pytest.raises(TypeError):
        store.remember(T, S, "k", 1)  # type: ignore[call-arg]  # source must be said
    assert _facts(dsn) == []


def test_the_database_refuses_a_second_open_version(store: shardstore.Store, dsn: str) -> None:
    f = store.remember(T, S, "k", 1, source=None)
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "INSERT INTO shardstore.facts (tenant_id, fact_id, subject, key, value,"
            " valid_from, recorded_at) VALUES (%s, %s, %s, 'k', '2', now(), now())",
            (T, uuid.uuid4(), S),
        )
    assert [x.fact_id for x in store.fact_history(T, S, "k")] == [f.fact_id]


@pytest.mark.slow
def test_async_store(dsn: str) -> None:
    async def go() -> None:
        store = await shardstore.connect_async(dsn)
        try:
            sid = await store.create_session(T, S)
            await store.append_turn(sid, {"role": "user", "content": "I am vegan"})
            f = await store.remember(T, S, "diet", "vegan", source=(sid, 0), confidence=1)
            assert f.confidence == 1.0
            assert await store.recall(T, S) == [f]
            with pytest.raises(shardstore.InvalidInput):
                await store.remember(T, S, "diet", "x", source=(sid, 9))
            closed = await store.forget(T, S, "diet")
            assert closed is not None and closed.fact_id == f.fact_id
            assert [x.fact_id for x in await store.fact_history(T, S, "diet")] == [f.fact_id]
            assert await store.recall(T, S) == []
            await asyncio.gather(*(store.remember(T, S, "k", i, source=None) for i in range(8)))
            history = await store.fact_history(T, S, "k")
            assert sorted(x.value for x in history) == list(range(8))
        finally:
            await store.close()

    asyncio.run(go())
    assert _overlaps(dsn) == []


# ---------------------------------------------------------------- purges and retention


@pytest.mark.slow
def test_purge_subject_removes_every_fact_of_the_subject(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store()
    marker = uuid.uuid4().hex
    subject = f"user:{marker}"
    mine = _session(store, subject=subject)
    theirs = _session(store, subject="user:other")
    store.remember(T, subject, "a", f"{marker} sourced", source=(mine, 0))
    store.remember(T, subject, "a", f"{marker} corrected", source=(mine, 1))
    store.remember(T, subject, "b", f"{marker} no source", source=None)
    store.remember(T, subject, "c", f"{marker} learnt elsewhere", source=(theirs, 0))
    store.remember(T, "user:other", "d", f"{marker} said in mine", source=(mine, 2))
    kept = store.remember(T, "user:other", "e", "unrelated", source=(theirs, 1))
    assert len(hits(table_rows(dsn), marker)) >= 5

    before = _facts(dsn)
    dry = store.purge_subject(T, subject, dry_run=True)
    assert dry.tables["shardstore.facts"].rows == 5
    assert _facts(dsn) == before

    report = store.purge_subject(T, subject)
    assert report.tables["shardstore.facts"].rows == 5
    assert report.tables["shardstore.facts"].bytes == dry.tables["shardstore.facts"].bytes > 0
    assert hits(table_rows(dsn), marker) == []
    assert store.recall(T, subject) == [] and store.fact_history(T, subject, "b") == []
    assert store.recall(T, "user:other") == [kept]
    # again: nothing left
    assert store.purge_subject(T, subject).tables["shardstore.facts"].rows == 0


@pytest.mark.slow
def test_purge_tenant_removes_every_fact_of_the_tenant(store: shardstore.Store, dsn: str) -> None:
    marker = uuid.uuid4().hex
    mine = _session(store, tenant="initech")
    other = _session(store, tenant="globex")
    store.remember("initech", "user:1", "a", f"{marker} sourced", source=(mine, 0))
    store.remember("initech", "user:1", "b", f"{marker} no source", source=None)
    # a subject that never had a session of its own
    store.remember("initech", "account:ACME", "tier", f"{marker} gold", source=None)
    kept = store.remember("globex", "user:1", "a", "globex's own", source=(other, 0))

    before = _facts(dsn)
    dry = store.purge_tenant("initech", dry_run=True)
    assert dry.tables["shardstore.facts"].rows == 3
    assert _facts(dsn) == before

    report = store.purge_tenant("initech")
    assert report.tables["shardstore.facts"].rows == 3
    assert report.tables["shardstore.facts"].bytes == dry.tables["shardstore.facts"].bytes > 0
    assert hits(table_rows(dsn), marker) == []
    assert store.recall("initech", "account:ACME") == []
    assert store.recall("globex", "user:1") == [kept]
    assert store.purge_tenant("initech").tables["shardstore.facts"].rows == 0


@pytest.mark.slow
def test_session_and_range_purges_remove_facts_of_removed_turns(
    store: shardstore.Store,
) -> None:
    a = _session(store, turns=4)
    b = _session(store, turns=2)
    fa = [store.remember(T, S, f"a{i}", i, source=(a, i)) for i in range(4)]
    fb = store.remember(T, S, "b", "b", source=(b, 0))
    free = store.remember(T, S, "free", "no source", source=None)

    dry = store.purge_range(a, before_turn_seq=2, dry_run=True)
    assert dry.tables["shardstore.facts"].rows == 2
    report = store.purge_range(a, before_turn_seq=2)
    assert report.tables["shardstore.facts"].rows == 2
    assert {f.key for f in store.recall(T, S)} == {"a2", "a3", "b", "free"}

    report = store.purge_session(b)
    assert report.tables["shardstore.facts"].rows == 1
    left = store.recall(T, S)
    assert [f.fact_id for f in left] == [fa[2].fact_id, fa[3].fact_id, free.fact_id]
    assert fb.fact_id not in {f.fact_id for f in left}


@pytest.mark.slow
def test_purge_before_and_retention_remove_sourced_facts(
    make_store: Callable[..., shardstore.Store],
) -> None:
    store = make_store(partition_interval=timedelta(seconds=1), premake=2)
    old = _session(store, turns=2)
    store.remember(T, S, "old", 1, source=(old, 0))
    store.remember(T, S, "old-free", 1, source=None)
    time.sleep(1.2)
    cut = datetime.now(UTC)
    live = _session(store, turns=2)
    store.remember(T, S, "live", 1, source=(live, 1))
    store.append_turn(old, {"role": "user", "content": "later"})
    store.remember(T, S, "old-later", 1, source=(old, 2))

    report = store.purge_before(cut)
    assert report.tables["shardstore.facts"].rows == 1
    assert {f.key for f in store.recall(T, S)} == {"old-free", "live", "old-later"}

    time.sleep(2.2)
    store.append_turn(live, {"role": "user", "content": "keeps the session alive"})
    store.remember(T, S, "live-new", 1, source=(live, 2))
    result = store.maintain(retention=timedelta(seconds=1))
    assert result.sessions_expired == 1  # old, with its facts
    # the live session's expired turn 1 takes its fact along; the fact without a source stays
    assert {f.key for f in store.recall(T, S)} == {"old-free", "live-new"}


# ---------------------------------------------------------------- Row-Level Security


@pytest.mark.slow
def test_rls_scopes_facts_to_the_tenant(
    store: shardstore.Store, dsn: str, tenant_role: str
) -> None:
    acme = _session(store, tenant="acme")
    globex = _session(store, tenant="globex")
    store.remember("acme", S, "k", "acme's", source=(acme, 0))
    theirs = store.remember("globex", S, "k", "globex's", source=None)
    store.remember("globex", S, "j", "globex's", source=(globex, 0))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'SET ROLE "{tenant_role}"')
        rls.set_session_tenant(conn, "acme")
        raw = conn.execute("SELECT DISTINCT tenant_id FROM shardstore.facts").fetchall()
        assert raw == [("acme",)]
        scoped = rls.connect_tenant(conn)
        before = _facts(dsn)
        assert [f.value for f in scoped.recall("acme", S)] == ["acme's"]
        assert scoped.recall("globex", S) == []
        assert scoped.fact_history("globex", S, "k") == []
        assert scoped.forget("globex", S, "k") is None
        with pytest.raises(shardstore.AccessDenied):
            scoped.remember("globex", S, "k", "forged", source=None)
        with pytest.raises(shardstore.SessionNotFound):
            scoped.remember("acme", S, "k", "forged", source=(globex, 0))
        assert scoped.purge_subject("globex", S).tables["shardstore.facts"].rows == 0
        assert _facts(dsn) == before
        # its own tenant works end to end
        new = scoped.remember("acme", S, "k", "acme's too", source=None)
        assert scoped.recall("acme", S) == [new]
        assert scoped.purge_subject("acme", S).tables["shardstore.facts"].rows == 2
    assert store.recall("globex", S, ["k"]) == [theirs]
    assert len(store.recall("globex", S)) == 2


# ---------------------------------------------------------------- concurrency and crashes


@pytest.mark.slow
def test_concurrent_writers_of_one_key_never_leave_two_valid_versions(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    stores = [make_store() for _ in range(4)]
    rounds = 25
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def write(i: int, s: shardstore.Store) -> None:
        try:
            for r in range(rounds):
                barrier.wait()
                if r % 5 == 4 and i == 0:
                    s.forget(T, S, "k")
                else:
                    s.remember(T, S, "k", [i, r], source=None)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=write, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    history = stores[0].fact_history(T, S, "k")
    assert len(history) == rounds * 4 - rounds // 5
    assert _overlaps(dsn) == []
    for earlier, later in itertools.pairwise(history):
        assert earlier.valid_to is not None and earlier.valid_to <= later.valid_from


_WRITER = """
import os, sys, shardstore
dsn, log = sys.argv[1], sys.argv[2]
store = shardstore.connect(dsn, background_fold=False)
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
i = 0
while True:
    key = f"k{i % 3}"
    f = store.remember("acme", "user:crash", key, {"i": i, "pad": "x" * 2000}, source=None)
    os.write(fd, f"{f.fact_id} {key}\\n".encode())
    os.fsync(fd)
    i += 1
"""


@pytest.mark.slow
def test_killed_writer_leaves_one_valid_version_and_every_acknowledged_fact(
    store: shardstore.Store, dsn: str, tmp_path: Path
) -> None:
    log = tmp_path / "acked.log"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for kill in range(6):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, dsn, str(log)], env=env)
        try:
            # let it start and write a while, then kill it mid-call; a loaded machine only
            # makes this wait longer (the limit is for a writer that is stuck)
            deadline = time.monotonic() + 300
            while not log.exists() or len(log.read_text().splitlines()) < 20 * (kill + 1):
                assert proc.poll() is None, f"the writer exited with {proc.returncode}"
                assert time.monotonic() < deadline, "the writer stopped acknowledging facts"
                time.sleep(0.01)
            time.sleep(0.003 * kill)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    acked = [line.split() for line in log.read_text().splitlines() if line.strip()]
    assert len(acked) >= 100
    with psycopg.connect(dsn) as conn:
        # the killed backends are gone once their locks are free: wait for them
        for _ in range(200):
            busy = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%fact_remember_v1%%'"
                " AND pid <> pg_backend_pid()"
            ).fetchone()
            if busy == (0,):
                break
            time.sleep(0.05)
        stored: dict[str, str] = dict(
            conn.execute(
                "SELECT fact_id::text, key FROM shardstore.facts WHERE subject = 'user:crash'"
            ).fetchall()
        )
    assert all(stored.get(fid) == key for fid, key in acked)
    assert len(stored) - len(acked) <= 6  # at most one committed but unacknowledged per kill
    assert _overlaps(dsn) == []
    assert {f.key for f in store.recall(T, "user:crash")} == {"k0", "k1", "k2"}
    for key in ("k0", "k1", "k2"):
        history = store.fact_history(T, "user:crash", key)
        assert [f.valid_to is None for f in history].count(True) == 1
        assert all(a.valid_to == b.valid_from for a, b in itertools.pairwise(history))


# ---------------------------------------------------------------- model


class FactsModel(RuleBasedStateMachine):
    """remember / forget / recall as_of against an in-memory model: per key, a list of
    [valid_from, valid_to) versions that never overlap."""

    store: shardstore.Store
    dsn: str

    def __init__(self) -> None:
        super().__init__()
        self.subject = f"user:{uuid.uuid4().hex}"
        self.versions: dict[str, list[list[Any]]] = {}  # key -> [[id, value, from, to]]
        self.times: list[datetime] = []

    def _valid_at(self, at: datetime) -> dict[str, tuple[uuid.UUID, Any]]:
        out = {}
        for key, versions in self.versions.items():
            for fid, value, start, end in versions:
                if start <= at and (end is None or at < end):
                    out[key] = (fid, value)
        return out

    @rule(key=st.sampled_from("abc"), value=st.integers() | st.text(max_size=5))
    def remember(self, key: str, value: Any) -> None:
        f = self.store.remember(T, self.subject, key, value, source=None)
        versions = self.versions.setdefault(key, [])
        if versions:
            last = versions[-1]
            assert f.valid_from > last[2]
            if last[3] is None:
                last[3] = f.valid_from
            assert f.valid_from >= last[3]
        versions.append([f.fact_id, value, f.valid_from, None])
        self.times.append(f.valid_from)

    @rule(key=st.sampled_from("abc"), back=st.integers(0, 10**6))
    def remember_in_the_past(self, key: str, back: int) -> None:
        versions = self.versions.get(key)
        if not versions:
            return
        last = versions[-1]
        # not after an open version's start, or before a closed one's end
        bound = last[2] if last[3] is None else last[3] - timedelta(microseconds=1)
        with pytest.raises(shardstore.InvalidInput):
            self.store.remember(
                T,
                self.subject,
                key,
                "x",
                source=None,
                valid_from=bound - timedelta(microseconds=back),
            )

    @rule(key=st.sampled_from("abcd"))
    def forget(self, key: str) -> None:
        got = self.store.forget(T, self.subject, key)
        versions = self.versions.get(key, [])
        if not versions or versions[-1][3] is not None:
            assert got is None
            return
        assert got is not None and got.fact_id == versions[-1][0]
        assert got.valid_to is not None
        versions[-1][3] = got.valid_to
        self.times.append(got.valid_to)

    @rule(data=st.data())
    def recall_as_of(self, data: st.DataObject) -> None:
        if not self.times:
            assert self.store.recall(T, self.subject) == []
            return
        at = data.draw(st.sampled_from(self.times)) + timedelta(
            microseconds=data.draw(st.sampled_from([-1, 0, 1]))
        )
        got = {f.key: (f.fact_id, f.value) for f in self.store.recall(T, self.subject, as_of=at)}
        assert got == self._valid_at(at)

    @invariant()
    def now_and_history_agree(self) -> None:
        got = {f.key: (f.fact_id, f.value) for f in self.store.recall(T, self.subject)}
        assert got == {
            k: (v[-1][0], v[-1][1]) for k, v in self.versions.items() if v and v[-1][3] is None
        }

    def teardown(self) -> None:
        for key, versions in self.versions.items():
            history = self.store.fact_history(T, self.subject, key)
            assert [(f.fact_id, f.valid_from, f.valid_to) for f in history] == [
                (v[0], v[2], v[3]) for v in versions
            ]


@pytest.mark.slow
def test_facts_model(store: shardstore.Store, dsn: str) -> None:
    FactsModel.store = store
    FactsModel.dsn = dsn
    test = FactsModel.TestCase
    test.settings = settings(
        max_examples=20,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    test().runTest()
    assert _overlaps(dsn) == []


# ---------------------------------------------------------------- CLI


def test_cli_facts(store: shardstore.Store, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    sid = _session(store)
    first = store.remember(T, S, "city", "Paris", source=(sid, 0), confidence=0.5)
    store.remember(T, S, "city", "Lyon", source=None)
    base = ["--dsn", dsn, "facts", "--tenant", T, "--subject", S]
    assert cli_main([*base, "--json"]) == 0
    (now,) = json.loads(capsys.readouterr().out)
    assert now["value"] == "Lyon" and now["source_session_id"] is None
    as_of = first.valid_from.isoformat()
    assert cli_main([*base, "--as-of", as_of, "--json"]) == 0
    (then,) = json.loads(capsys.readouterr().out)
    assert then["value"] == "Paris" and then["source_session_id"] == str(sid)
    assert cli_main([*base, "--history", "city", "--json"]) == 0
    assert [f["value"] for f in json.loads(capsys.readouterr().out)] == ["Paris", "Lyon"]
    assert cli_main([*base, "--history", "city"]) == 0
    text = capsys.readouterr().out
    assert "Paris" in text and f"{sid}#0" in text and "0.50" in text
    assert cli_main(["--dsn", dsn, "facts", "--tenant", T, "--subject", "nobody"]) == 0
    assert "no facts" in capsys.readouterr().out
    assert cli_main([*base, "--as-of", "not a time"]) == 2
