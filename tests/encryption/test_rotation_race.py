"""The data-key rotation against writers that read the key before it made a new version
current and commit after its final check: for every kind of sealed writer (the one-statement
append, checkpoints, facts, summaries, the LangGraph saver's checkpoints and pending writes,
and one asyncio writer), the writer is stopped right after its key read, in its own thread,
until the rotation has either been made to wait for it (a backend of the rotation waits on a
lock the writer holds) or, for the one-statement append, has finished and shredded the old
version; then the writer goes on. Afterwards every value opens and none names a shredded
version."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from tests.encryption.conftest import raw

MARKER = "narwhal-race-4471"
RELEASE_WAIT_S = 60.0  # a safety net for a broken run, never a timing assertion


def _kids(dsn: str, tenant: str) -> set[str]:
    """The key ids that the tenant's stored values name (turns, chunks, checkpoints, facts,
    summaries, LangGraph pending writes)."""
    rows = raw(
        dsn,
        "SELECT DISTINCT m[1] FROM ("
        " SELECT message::text AS t FROM shardstore.turn_buffer WHERE tenant_id = %(t)s"
        " UNION ALL SELECT conversation_chunk::text FROM shardstore.agent_history"
        "  WHERE tenant_id = %(t)s"
        " UNION ALL SELECT concat_ws('|', state::text, tool_calls::text, tool_results::text)"
        "  FROM shardstore.checkpoints WHERE tenant_id = %(t)s"
        " UNION ALL SELECT value::text FROM shardstore.facts WHERE tenant_id = %(t)s"
        " UNION ALL SELECT summary FROM shardstore.chunk_summaries WHERE tenant_id = %(t)s"
        " UNION ALL SELECT convert_from(value, 'UTF8') FROM shardstore.langgraph_writes"
        "  WHERE tenant_id = %(t)s"
        ') v CROSS JOIN LATERAL regexp_matches(v.t, \'"k": ?"([^"]+)"\', \'g\') AS m',
        {"t": tenant},
    )
    return {str(r[0]) for r in rows}


def _lock_waiters(dsn: str) -> int:
    (n,) = raw(
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock'",
    )[0]
    return int(n)


class _Run(threading.Thread):
    """``fn()`` in a thread, keeping its result or error."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:
            self.error = exc


class _PausedKeyReads:
    """Wraps the key store's ``key_for`` so that the first key read made in the writer's
    thread stops there (the writer has its key, and has not committed) until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, keys: LocalKeyProvider) -> None:
        self.read, self.go = threading.Event(), threading.Event()
        self.thread: int | None = None
        original = keys.key_for

        def key_for(*args: Any, **kwargs: Any) -> Any:
            key = original(*args, **kwargs)
            if threading.get_ident() == self.thread and not self.read.is_set():
                self.read.set()
                self.go.wait(RELEASE_WAIT_S)
            return key

        monkeypatch.setattr(keys, "key_for", key_for)

    def start(self, write: Callable[[], Any]) -> _Run:
        def in_writer() -> Any:
            self.thread = threading.get_ident()
            return write()

        writer = _Run(in_writer)
        writer.start()
        assert self.read.wait(RELEASE_WAIT_S), "the writer never read a data key"
        return writer


def _until(condition: Callable[[], bool]) -> None:
    """Poll a state of the database or of a thread (not a timing): a broken run fails after
    the safety net instead of hanging."""
    deadline = time.monotonic() + RELEASE_WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the rotation neither waited nor finished"
        time.sleep(0.01)


def _race(
    monkeypatch: pytest.MonkeyPatch,
    keys: LocalKeyProvider,
    dsn: str,
    write: Callable[[], Any],
    rotate: Callable[[], Any],
) -> tuple[Any, Any, bool]:
    """``write`` stopped after its key read while ``rotate`` runs; returns the writer's
    result, the rotation's report and whether the rotation had to wait for the writer."""
    paused = _PausedKeyReads(monkeypatch, keys)
    writer = paused.start(write)
    rotation = _Run(rotate)
    rotation.start()
    _until(lambda: not rotation.is_alive() or _lock_waiters(dsn) > 0)
    waited = rotation.is_alive()
    paused.go.set()
    writer.join(RELEASE_WAIT_S)
    rotation.join(RELEASE_WAIT_S)
    assert not writer.is_alive() and not rotation.is_alive()
    if writer.error is not None:
        raise writer.error
    if rotation.error is not None:
        raise rotation.error
    return writer.result, rotation.result, waited


@pytest.fixture
def subject_session(enc_store: shardstore.Store) -> Iterator[tuple[str, str, uuid.UUID]]:
    """A fresh tenant and subject with one session holding sealed turns (its head kept by
    ``enc_store``)."""
    tenant, subject = f"race-{uuid.uuid4().hex[:8]}", "ola"
    sid = enc_store.create_session(tenant_id=tenant, subject_id=subject)
    enc_store.append_turns(sid, [{"role": "user", "content": f"{MARKER} {i}"} for i in range(2)])
    yield tenant, subject, sid


def _old_kid(dsn: str, tenant: str) -> str:
    (kid,) = _kids(dsn, tenant)
    return kid


def _check_after(
    store: shardstore.Store, dsn: str, tenant: str, sid: uuid.UUID, report: Any, old: str
) -> None:
    """Every value opens, none names the shredded version."""
    assert report.shredded_keys == (old,)
    assert _kids(dsn, tenant) == {report.new_key}
    assert all(MARKER in str(t.message) for t in store.history(sid))
    for cp in store.checkpoints(sid):
        restored = store.restore(sid, cp.checkpoint_id).checkpoint
        assert restored is not None and MARKER in str(restored.state)


def test_one_statement_append_rereads_the_key_after_a_rotation_shredded_it(
    enc_store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    subject_session: tuple[str, str, uuid.UUID],
) -> None:
    tenant, subject, sid = subject_session
    old = _old_kid(module_dsn, tenant)
    result, report, waited = _race(
        monkeypatch,
        keys,
        module_dsn,
        lambda: enc_store.append_turn(sid, {"role": "user", "content": f"{MARKER} late"}),
        lambda: enc_store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    # the append held no lock while stopped: the rotation finished and shredded the old
    # version; the append's statement then refused its stale key, and it sealed again under
    # the new version, at the seq it was given
    assert not waited
    assert result.turn_seq == 2
    _check_after(enc_store, module_dsn, tenant, sid, report, old)
    assert enc_store.tail(sid, 1)[0].message["content"] == f"{MARKER} late"


def test_an_append_reading_the_key_under_its_locked_head_makes_the_rotation_wait(
    enc_store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    subject_session: tuple[str, str, uuid.UUID],
) -> None:
    tenant, subject, sid = subject_session
    old = _old_kid(module_dsn, tenant)
    # a store that has kept no head appends through the locked head read
    fresh = shardstore.connect(module_dsn, encryption=keys, chunk_tokens=60)
    try:
        _result, report, waited = _race(
            monkeypatch,
            keys,
            module_dsn,
            lambda: fresh.append_turn(sid, {"role": "user", "content": f"{MARKER} late"}),
            lambda: enc_store.rotate_data_key(tenant_id=tenant, subject_id=subject),
        )
    finally:
        fresh.close()
    assert waited and report.resealed["turns"] >= 3  # the late turn was re-sealed too
    _check_after(enc_store, module_dsn, tenant, sid, report, old)


@pytest.mark.parametrize("kind", ["checkpoint", "fact", "summary"])
def test_a_sealed_writer_in_flight_makes_the_final_check_wait(
    kind: str,
    enc_store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    subject_session: tuple[str, str, uuid.UUID],
) -> None:
    tenant, subject, sid = subject_session
    if kind == "summary":  # a sealed chunk waiting for its summary
        enc_store.append_turns(
            sid, [{"role": "user", "content": f"{MARKER} {i} " + "w " * 15} for i in range(6)]
        )
        enc_store.flush(sid)
        enc_store.drain_folds()
    old = _old_kid(module_dsn, tenant)
    writes: dict[str, Callable[[], Any]] = {
        "checkpoint": lambda: enc_store.checkpoint(sid, {"plan": MARKER}, tool_calls=[MARKER]),
        "fact": lambda: enc_store.remember(tenant, subject, "likes", MARKER, source=None),
        "summary": lambda: enc_store.summarize(lambda ts: f"{MARKER} {len(ts)}", session_id=sid),
    }
    _result, report, waited = _race(
        monkeypatch,
        keys,
        module_dsn,
        writes[kind],
        lambda: enc_store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    assert waited
    _check_after(enc_store, module_dsn, tenant, sid, report, old)
    if kind == "fact":
        (fact,) = enc_store.recall(tenant, subject, ["likes"])
        assert fact.value == MARKER
    if kind == "summary":
        assert any(MARKER in s.text for s in enc_store.summaries(sid))
        assert report.resealed["summaries"] >= 1


@pytest.mark.parametrize("call", ["put", "put_writes"])
def test_the_langgraph_saver_in_flight_makes_the_final_check_wait(
    call: str,
    enc_store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("langgraph.checkpoint.base")
    from langgraph.checkpoint.base import empty_checkpoint

    from shardstore.integrations.langgraph import ShardstoreSaver

    tenant = f"race-lg-{uuid.uuid4().hex[:8]}"
    saver = ShardstoreSaver(enc_store, tenant_id=tenant)
    base: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    first = empty_checkpoint()
    first["channel_values"] = {"note": MARKER}
    config = saver.put(base, first, {"source": "input", "step": 0}, {})
    ((sid,),) = raw(
        module_dsn, "SELECT session_id FROM shardstore.sessions WHERE tenant_id = %s", (tenant,)
    )
    old = _old_kid(module_dsn, tenant)
    second = empty_checkpoint()
    second["channel_values"] = {"note": f"{MARKER} late"}
    writes: dict[str, Callable[[], Any]] = {
        "put": lambda: saver.put(base, second, {"source": "loop", "step": 1}, {}),
        "put_writes": lambda: saver.put_writes(config, [("note", f"{MARKER} w")], "task-1"),
    }
    _result, report, waited = _race(
        monkeypatch,
        keys,
        module_dsn,
        writes[call],
        lambda: enc_store.rotate_data_key(session_id=sid),
    )
    assert waited
    assert report.shredded_keys == (old,)
    assert _kids(module_dsn, tenant) == {report.new_key}
    fresh = ShardstoreSaver(enc_store, tenant_id=tenant)
    got = fresh.get_tuple(base if call == "put" else config)
    assert got is not None
    if call == "put":
        assert got.checkpoint["channel_values"]["note"] == f"{MARKER} late"
    else:
        assert got.pending_writes == [("task-1", "note", f"{MARKER} w")]


def test_an_async_checkpoint_in_flight_makes_the_final_check_wait(
    enc_store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    subject_session: tuple[str, str, uuid.UUID],
) -> None:
    tenant, subject, sid = subject_session
    old = _old_kid(module_dsn, tenant)

    async def write() -> Any:
        async with await shardstore.connect_async(
            module_dsn, encryption=keys, chunk_tokens=60
        ) as store:
            return await store.checkpoint(sid, {"plan": f"{MARKER} async"})

    _result, report, waited = _race(
        monkeypatch,
        keys,
        module_dsn,
        lambda: asyncio.run(write()),
        lambda: enc_store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    assert waited and report.resealed["checkpoints"] == 1
    _check_after(enc_store, module_dsn, tenant, sid, report, old)
