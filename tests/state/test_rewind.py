"""store.rewind(session, N): turns >= N removed atomically, with everything derived from
them (keys, checkpoints, facts, vectors, rewritten chunks); the session then looks exactly
like one that only ever got turns 0..N-1 (same chunks, same next append)."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.cli.app import main as cli_main
from shardstore.core.jsoncodec import encode_message
from shardstore.schema import rls
from tests.embedders import HashEmbedder
from tests.faults import (
    CrashableServer,
    Expected,
    check_api,
    check_database,
    check_vectors,
    holding,
    read_snapshot,
    wait_for_backend,
)
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

StoreFactory = Callable[..., shardstore.Store]
SMALL: dict[str, Any] = {
    "chunk_tokens": 60,
    "partition_interval": timedelta(days=3650),
    "premake": 0,
}
WORDS = ["refund", "kernel", "ticket", "ocean", "pixel", "quartz", "lemon", "zebra"]


def msg(i: int, extra: int = 0) -> dict[str, Any]:
    words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 5 + extra))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn{i} {words}"}


def shape(store: shardstore.Store, sid: Any) -> list[tuple[Any, ...]]:
    return [
        (c.chunk_seq, c.first_turn_seq, c.turn_count, c.token_count, c.byte_count, c.is_open)
        for c in store.chunks(sid)
    ]


def head(dsn: str, sid: Any) -> tuple[Any, ...]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT next_turn_seq, open_chunk_seq, open_turns, open_tokens, open_bytes"
            " FROM shardstore.sessions WHERE session_id = %s",
            (sid,),
        ).fetchone()
    assert row is not None
    return tuple(row)


def count(dsn: str, sql: str, *params: Any) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def raw_append(
    store: shardstore.Store,
    dsn: str,
    sid: Any,
    messages: list[Any],
    conn: psycopg.Connection[Any] | None = None,
) -> None:
    """append_v2 straight, no inline fold (on ``conn``, in its transaction, if given)."""
    if conn is None:
        with psycopg.connect(dsn, autocommit=True) as own:
            raw_append(store, dsn, sid, messages, own)
        return
    texts = [encode_message(m) for m in messages]
    cfg = conn.execute(
        "SELECT partition_interval, partition_origin FROM shardstore.config"
    ).fetchone()
    assert cfg is not None
    conn.execute(
        "SELECT * FROM shardstore.append_v2(%s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, 0)",
        (
            sid,
            "[" + ",".join(texts) + "]",
            [store.ctx.counter.count(t) for t in texts],
            [len(t.encode()) for t in texts],
            [None] * len(texts),
            store.settings.budget_tokens,
            store.settings.chunk_max_bytes,
            cfg[0],
            cfg[1],
        ),
    )


def invariants(store: shardstore.Store, dsn: str, *sids: Any) -> None:
    check_database(dsn, Expected({}, store.settings.budget_tokens))
    check_api(store, dsn, [str(s) for s in sids])


def same_as_fresh(store: shardstore.Store, dsn: str, sid: Any, messages: list[Any]) -> None:
    """sid (after a rewind) and a new session given only ``messages`` agree on chunks,
    head, history and tails, and take the next append the same way."""
    ref = store.create_session("acme")
    for m in messages:
        store.append_turn(ref, m)
    assert shape(store, sid) == shape(store, ref)
    assert head(dsn, sid) == head(dsn, ref)
    assert [t.message for t in store.history(sid)] == messages
    for n in (1, 3, 50):
        got = [(t.turn_seq, t.message) for t in store.tail(sid, n=n)]
        assert got == [(t.turn_seq, t.message) for t in store.tail(ref, n=n)]
    nxt = {"role": "user", "content": "next " + "ocean " * 30}
    a, b = store.append_turn(sid, nxt), store.append_turn(ref, nxt)
    assert (a.turn_seq, a.chunk_seq) == (b.turn_seq, b.chunk_seq) == (len(messages), a.chunk_seq)
    store.drain_folds()
    assert shape(store, sid) == shape(store, ref)


# ---------------------------------------------------------------- where the cut falls


def test_rewind_within_the_open_chunk(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(chunk_tokens=10_000)
    sid = store.create_session("acme")
    sent = [msg(i) for i in range(6)]
    store.append_turns(sid, sent)
    assert store.rewind(sid, 4) == 2
    assert store.session(sid).turn_count == 4
    invariants(store, dsn, sid)
    same_as_fresh(store, dsn, sid, sent[:4])


def test_rewind_into_a_flushed_open_chunk(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(chunk_tokens=10_000)
    sid = store.create_session("acme")
    sent = [msg(i) for i in range(8)]
    store.append_turns(sid, sent[:5])
    store.flush(sid)  # turns 0..4 folded, the chunk still open
    store.append_turns(sid, sent[5:])
    assert store.rewind(sid, 3) == 5
    # the folded part was rewritten: only turns 0..2 are stored
    assert count(dsn, "SELECT turn_count FROM shardstore.agent_history") == 3
    assert count(dsn, "SELECT count(*) FROM shardstore.turn_buffer") == 0
    invariants(store, dsn, sid)
    same_as_fresh(store, dsn, sid, sent[:3])


@pytest.mark.slow
@pytest.mark.parametrize("cut", [0, 1, 9, 10, 23, 38, 39])
def test_rewind_into_sealed_and_folded_chunks(make_store: StoreFactory, dsn: str, cut: int) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    sent = [msg(i, extra=4) for i in range(40)]
    for m in sent:
        store.append_turn(sid, m)
    store.drain_folds()
    assert len(store.chunks(sid)) > 8
    assert store.rewind(sid, cut) == 40 - cut
    invariants(store, dsn, sid)
    same_as_fresh(store, dsn, sid, sent[:cut])
    invariants(store, dsn, sid)


@pytest.mark.slow
def test_rewind_of_buffered_sealed_chunks(make_store: StoreFactory, dsn: str) -> None:
    """No background fold: sealed chunks still in the buffer are cut there."""
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    sent = [msg(i, extra=4) for i in range(30)]
    # append_v2 alone, one turn per call: every chunk is sealed by a later call than the
    # one that started it, so it stays buffered (a chunk one batch starts and seals goes
    # straight to agent_history)
    for m in sent:
        raw_append(store, dsn, sid, [m])
    assert count(dsn, "SELECT count(*) FROM shardstore.agent_history") == 0
    assert store.rewind(sid, 17) == 13
    invariants(store, dsn, sid)
    store.flush(sid)
    invariants(store, dsn, sid)
    same_as_fresh(store, dsn, sid, sent[:17])


@pytest.mark.slow
def test_appends_continue_the_reopened_chunk_through_folds(
    make_store: StoreFactory, dsn: str
) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    sent = [msg(i, extra=4) for i in range(30)]
    for m in sent:
        store.append_turn(sid, m)
    store.flush(sid)
    for round_ in range(5):
        n = store.session(sid).turn_count
        store.rewind(sid, n - 3 - round_)
        for i in range(6):
            store.append_turn(sid, msg(100 + 10 * round_ + i, extra=3))
        if round_ % 2:
            store.flush(sid)
        store.drain_folds()
        invariants(store, dsn, sid)
    chunks = store.chunks(sid)
    assert [c.chunk_seq for c in chunks] == list(range(len(chunks)))
    assert [t.turn_seq for t in store.history(sid)] == list(range(store.session(sid).turn_count))


# ---------------------------------------------------------------- edges and errors


def test_no_op_zero_and_errors_write_nothing(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    store.append_turns(sid, [msg(i, extra=4) for i in range(12)])
    store.drain_folds()
    before = read_snapshot(dsn)
    assert store.rewind(sid, 12) == 0
    hostile: list[tuple[Any, Any, type[Exception]]] = [
        (sid, 13, shardstore.InvalidInput),
        (sid, 10**12, shardstore.InvalidInput),
        (sid, -1, shardstore.InvalidInput),
        (sid, True, shardstore.InvalidInput),
        (sid, "3", shardstore.InvalidInput),
        (sid, 3.0, shardstore.InvalidInput),
        (sid, None, shardstore.InvalidInput),
        (sid, 2**63, shardstore.InvalidInput),
        ("not-a-uuid", 3, shardstore.InvalidInput),
        ("'; DROP TABLE shardstore.sessions; --", 3, shardstore.InvalidInput),
        (uuid.uuid4(), 0, shardstore.SessionNotFound),
    ]
    for session, to, error in hostile:
        with pytest.raises(error):
            store.rewind(session, to)
    with pytest.raises(shardstore.InvalidInput, match="past the end"):
        store.rewind(sid, 13)
    with pytest.raises(shardstore.InvalidInput, match="below 0"):
        store.rewind(sid, -5)
    assert read_snapshot(dsn) == before
    assert store.rewind(sid, 0) == 12
    assert store.chunks(sid) == [] and list(store.history(sid)) == []
    assert count(dsn, "SELECT count(*) FROM shardstore.chunk_map") == 0
    assert head(dsn, sid) == (0, 0, 0, 0, 0)
    assert store.rewind(sid, 0) == 0
    r = store.append_turn(sid, msg(0))
    assert (r.turn_seq, r.chunk_seq) == (0, 0)
    invariants(store, dsn, sid)
    store.purge_session(sid)
    with pytest.raises(shardstore.SessionPurged):
        store.rewind(sid, 0)


@pytest.mark.slow
def test_below_a_range_purge(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    sent = [msg(i, extra=4) for i in range(20)]
    store.append_turns(sid, sent)
    store.drain_folds()
    store.purge_range(sid, before_turn_seq=8)
    before = read_snapshot(dsn)
    with pytest.raises(shardstore.InvalidInput, match="range purge"):
        store.rewind(sid, 7)
    assert read_snapshot(dsn) == before
    assert store.rewind(sid, 12) == 8
    assert [t.turn_seq for t in store.history(sid)] == list(range(8, 12))
    assert store.rewind(sid, 8) == 4
    assert list(store.history(sid)) == []
    r = store.append_turn(sid, msg(1))
    assert r.turn_seq == 8
    assert [t.turn_seq for t in store.history(sid)] == [8]


# ---------------------------------------------------------------- derived state


@pytest.mark.slow
def test_keys_of_removed_turns_are_released(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    for i in range(10):
        store.append_turn(sid, msg(i, extra=4), idempotency_key=f"k{i}")
    store.drain_folds()
    assert store.rewind(sid, 5) == 5
    assert count(dsn, "SELECT count(*) FROM shardstore.turn_keys") == 5
    kept = store.append_turn(sid, {"role": "user", "content": "other"}, idempotency_key="k2")
    assert kept.duplicate and kept.turn_seq == 2
    new = store.append_turn(sid, {"role": "user", "content": "edited"}, idempotency_key="k7")
    assert not new.duplicate and new.turn_seq == 5
    again = store.append_turns(sid, [{"role": "user", "content": "x"}], ["k8"])
    assert not again[0].duplicate and again[0].turn_seq == 6
    invariants(store, dsn, sid)


def test_checkpoints_after_the_cut_are_dropped(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    first = store.checkpoint(sid, {"step": "start"})
    for i in range(10):
        store.append_turn(sid, msg(i, extra=4), checkpoint={"i": i})
        store.checkpoint(sid, {"after": i}, sub_step=1)
    store.drain_folds()
    assert store.rewind(sid, 4) == 6
    positions = [c.turn_seq for c in store.checkpoints(sid)]
    assert positions and max(positions) == 3 and -1 in positions
    got = store.restore(sid)
    assert got.checkpoint is not None and got.checkpoint.state == {"after": 3}
    assert [t.turn_seq for t in got.turns] == [0, 1, 2, 3]
    assert store.rewind(sid, 0) == 4
    got = store.restore(sid)
    assert got.checkpoint == first and got.turns == []


def test_facts_sourced_at_removed_turns_go(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    store.append_turns(sid, [msg(i) for i in range(6)])
    store.remember("acme", "user:1", "plan", "basic", source=(sid, 1))
    store.remember("acme", "user:1", "plan", "pro", source=(sid, 4))
    store.remember("acme", "user:1", "city", "Oslo", source=None)
    assert store.rewind(sid, 3) == 3
    history = store.fact_history("acme", "user:1", "plan")
    assert [f.source_turn_seq for f in history] == [1]
    assert {f.key for f in store.recall("acme", "user:1")} == {"city"}
    with pytest.raises(shardstore.InvalidInput):
        store.remember("acme", "user:1", "plan", "x", source=(sid, 4))


@pytest.mark.slow
def test_vectors_of_removed_turns_go(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(embedding_model=HashEmbedder(window_tokens=8), **SMALL)
    sid = store.create_session("acme")
    sent = [msg(i, extra=4) for i in range(24)]
    sent[20] = {"role": "user", "content": "the secret word is xylophone " + "lemon " * 6}
    sent[14] = {"role": "user", "content": "marmalade " * 5}
    for m in sent:
        store.append_turn(sid, m)
    store.flush(sid)
    assert store.embed() > 0
    assert store.search("xylophone", session_id=sid, k=3)[0].turns[0].turn_seq == 20
    # turn 14 shares its chunk with turn 13: that chunk is rewritten
    chunk14 = next(
        c for c in store.chunks(sid) if c.first_turn_seq <= 14 < c.first_turn_seq + c.turn_count
    )
    assert chunk14.first_turn_seq < 14
    assert store.rewind(sid, 14) == 10
    assert (
        count(dsn, "SELECT count(*) FROM shardstore.chunk_vectors WHERE last_turn_seq >= 14") == 0
    )
    assert (
        count(
            dsn,
            "SELECT count(*) FROM shardstore.embed_queue WHERE chunk_seq = %s",
            chunk14.chunk_seq,
        )
        == 1
    )
    check_vectors(dsn, set(), complete=False)
    for query in ("xylophone", "marmalade"):
        hits = store.search(query, session_id=sid, k=50)
        assert all(t.turn_seq < 14 for h in hits for t in h.turns)
    assert store.embed() == 1  # only the rewritten chunk
    check_vectors(dsn, set(), complete=True)
    hits = store.search("turn13", session_id=sid, k=50)
    assert any(t.turn_seq == 13 for h in hits for t in h.turns)
    with psycopg.connect(dsn, autocommit=True) as conn:
        texts = conn.execute("SELECT conversation_chunk::text FROM shardstore.agent_history")
        assert not any("xylophone" in t or "marmalade" in t for (t,) in texts)


# ---------------------------------------------------------------- concurrency


@pytest.mark.slow
def test_concurrent_appends_folds_and_rewinds(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            i = 0
            while not stop.is_set():
                key = f"{name}-{i}"
                r = store.append_turn(sid, msg(i, extra=i % 7), idempotency_key=key)
                assert not r.duplicate
                with lock:
                    acked[key] = r.turn_seq
                i += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def flusher() -> None:
        try:
            while not stop.is_set():
                store.flush(sid)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{j}",)) for j in range(3)]
    threads.append(threading.Thread(target=flusher))
    for t in threads:
        t.start()
    rng = random.Random(7)
    removed = 0
    try:
        for _ in range(200):
            n = store.session(sid).turn_count
            removed += store.rewind(sid, max(0, n - rng.randint(0, 6)))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert removed > 0
    store.drain_folds()
    invariants(store, dsn, sid)
    stored = {t.idempotency_key: t.turn_seq for t in store.history(sid)}
    assert len(stored) == store.session(sid).turn_count
    for key, seq in stored.items():
        assert key is not None and acked[key] == seq, key
    chunks = store.chunks(sid)
    assert [c.chunk_seq for c in chunks] == list(range(len(chunks)))


def test_a_fold_meeting_a_rewind_waits_and_folds_what_it_left(dsn: str) -> None:
    """A background fold (fold_sealed) that starts while a rewind to 0 is uncommitted,
    in a transaction that also refills chunk 0 and seals it, waits for that transaction and
    then folds the NEW chunk 0 under its own start. (It used to read the session without a
    lock: folding what it read earlier, it could move the new chunk's turns under the old
    chunk's start, the race test_concurrent_appends_folds_and_rewinds caught about 1 run in
    10.)"""
    owner = shardstore.connect(dsn, **SMALL, background_fold=False)
    sid = owner.create_session("acme")
    for i in range(12):  # one turn per batch: a sealed chunk stays in the buffer
        raw_append(owner, dsn, sid, [msg(i, extra=4)])
    sealed_buffered = (
        "SELECT count(*) FROM shardstore.turn_buffer b JOIN shardstore.sessions s USING"
        " (session_id) WHERE b.session_id = %s AND b.chunk_seq < s.open_chunk_seq"
    )
    assert head(dsn, sid)[1] >= 1 and count(dsn, sealed_buffered, sid) > 0  # chunk 0 sealed
    with psycopg.connect(dsn) as conn:
        rewinder = shardstore.connect(conn, **SMALL, background_fold=False)
        assert rewinder.rewind(sid, 0) == 12
        refill = [msg(100 + i, extra=4) for i in range(12)]
        for m in refill:
            raw_append(owner, dsn, sid, [m], conn)
        row = conn.execute(sealed_buffered, (sid,)).fetchone()
        assert row is not None and row[0] > 0  # the new chunk 0 sealed, in the buffer
        moved: list[int] = []
        folder = threading.Thread(
            target=lambda: moved.append(count(dsn, "SELECT shardstore.fold_sealed(%s, 0, 0)", sid))
        )
        folder.start()
        wait_for_backend(dsn, "fold_sealed(", waiting=True)
        conn.commit()
        folder.join(30)
        rewinder.close()
    assert moved == [row[0]]
    invariants(owner, dsn, sid)
    assert [t.message for t in owner.history(sid)] == refill
    owner.close()


# ---------------------------------------------------------------- asyncio, RLS, CLI


def test_async_rewind(dsn: str) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn, **SMALL)
        try:
            sid = await store.create_session("acme")
            await store.append_turns(sid, [msg(i, extra=4) for i in range(15)])
            await store.flush(sid)
            assert await store.rewind(sid, 6) == 9
            assert await store.rewind(sid, 6) == 0
            with pytest.raises(shardstore.InvalidInput):
                await store.rewind(sid, 7)
            r = await store.append_turn(sid, msg(99))
            assert r.turn_seq == 6
            assert [t.turn_seq for t in await store.tail(sid, n=100)] == list(range(7))
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.slow
def test_rls_tenant_cannot_rewind_another_tenant(dsn: str) -> None:
    owner = shardstore.connect(dsn, **SMALL)
    acme = owner.create_session("acme")
    globex = owner.create_session("globex")
    for sid in (acme, globex):
        owner.append_turns(sid, [msg(i, extra=4) for i in range(10)])
        owner.checkpoint(sid, {"at": 9})
        owner.flush(sid)
    role = make_tenant_role(dsn)
    try:
        with as_tenant(dsn, role, "acme") as conn:
            tenant = rls.connect_tenant(conn, chunk_tokens=60)
            with pytest.raises(shardstore.SessionNotFound):
                tenant.rewind(globex, 2)
            assert tenant.rewind(acme, 4) == 6
            assert [t.turn_seq for t in tenant.history(acme)] == [0, 1, 2, 3]
            tenant.close()
        assert owner.session(globex).turn_count == 10
        assert [t.turn_seq for t in owner.history(globex)] == list(range(10))
        assert [c.turn_seq for c in owner.checkpoints(globex)] == [9]
        assert owner.checkpoints(acme) == []
    finally:
        owner.close()
        drop_tenant_role(dsn, role)


def test_cli_rewind(make_store: StoreFactory, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = make_store()
    sid = store.create_session("acme")
    store.append_turns(sid, [msg(i) for i in range(5)])
    assert cli_main(["--dsn", dsn, "rewind", str(sid), "--to", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"session_id": str(sid), "to_turn_seq": 3, "removed": 2}
    assert cli_main(["--dsn", dsn, "rewind", str(sid), "--to", "3"]) == 0
    assert "nothing to remove" in capsys.readouterr().out
    assert cli_main(["--dsn", dsn, "rewind", str(sid), "--to", "9"]) == 2
    assert "past the end" in capsys.readouterr().err
    assert cli_main(["--dsn", dsn, "rewind", str(uuid.uuid4()), "--to", "0"]) == 4
    assert cli_main(["--dsn", dsn, "rewind", str(sid), "--to", "-1"]) == 2
    assert store.session(sid).turn_count == 3


# ---------------------------------------------------------------- crashes


@pytest.fixture(scope="module")
def server() -> Iterator[CrashableServer]:
    srv = CrashableServer()
    yield srv
    srv.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "lock_sql",
    [
        # early: the buffer rows are deleted, the chunks not yet
        "SELECT 1 FROM shardstore.embed_queue WHERE session_id = '{sid}' FOR UPDATE",
        # late: chunks deleted and rewritten, keys and chunk_map done, checkpoints next
        "SELECT 1 FROM shardstore.checkpoints WHERE session_id = '{sid}' FOR UPDATE",
    ],
    ids=["early", "late"],
)
def test_server_killed_mid_rewind(server: CrashableServer, tmp_path: Path, lock_sql: str) -> None:
    dsn = server.create_database()
    settings: dict[str, Any] = {**SMALL, "background_fold": False}
    with shardstore.connect(dsn, **settings) as store:
        sid = store.create_session("acme")
        for i in range(30):
            store.append_turn(sid, msg(i, extra=4), idempotency_key=f"k{i}", checkpoint={"i": i})
        store.flush(sid)
        store.append_turns(sid, [msg(30 + i) for i in range(3)])  # some turns buffered
        before = read_snapshot(dsn)
        outcome: list[BaseException | int] = []

        def rewind() -> None:
            try:
                outcome.append(store.rewind(sid, 13))
            except BaseException as exc:
                outcome.append(exc)

        with holding(dsn, lock_sql.format(sid=sid)):
            t = threading.Thread(target=rewind)
            t.start()
            wait_for_backend(dsn, "shardstore.rewind_v", waiting=True)
            server.kill()
            t.join(60)
            server.start()
    assert outcome and isinstance(outcome[0], shardstore.ShardstoreError), outcome
    assert read_snapshot(dsn) == before, "a killed rewind left part of its work"
    with shardstore.connect(dsn, **settings) as store:
        assert [t.turn_seq for t in store.history(sid)] == list(range(33))
        assert store.rewind(sid, 13) == 20
        invariants(store, dsn, sid)
        assert max(c.turn_seq for c in store.checkpoints(sid)) == 12
        assert store.append_turn(sid, msg(0), idempotency_key="k20").turn_seq == 13


@pytest.mark.slow
def test_a_reopened_chunk_never_spans_partitions(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(chunk_tokens=10_000, partition_interval=timedelta(seconds=1), premake=0)
    sid = store.create_session("acme")
    store.append_turns(sid, [msg(i) for i in range(4)])
    store.flush(sid)
    time.sleep(1.1)  # the open chunk's partition range is over
    assert store.rewind(sid, 2) == 2
    r = store.append_turn(sid, msg(9))
    assert (r.turn_seq, r.chunk_seq) == (2, 1)
    store.flush(sid)
    with psycopg.connect(dsn, autocommit=True) as conn:
        spans = conn.execute(
            "SELECT h.chunk_seq, date_bin(c.partition_interval, h.chunk_start, c.partition_origin)"
            "     = date_bin(c.partition_interval, h.chunk_end, c.partition_origin)"
            "  FROM shardstore.agent_history h, shardstore.config c ORDER BY 1"
        ).fetchall()
    assert spans == [(0, True), (1, True)]
    invariants(store, dsn, sid)
