"""Round trips per hot call, counted on the wire (tests/wire.py): one each in the common
case, so that a database one network hop away costs one hop per call. A change that adds a
round trip to one of these calls fails here.

The uncommon paths, named: ``restore()`` of the whole history streams it, chunk by chunk;
an append that seals a chunk folds it on the store's background folder (another
connection) or, with ``background_fold=False``, right after, one more round trip (the
stores here use chunks large enough that no measured call seals one); and psycopg prepares
a statement on its ``prepare_threshold``-th execution on a connection, one more round trip
once (each call is warmed past it)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.schema import rls
from tests.wire import WireProxy

MESSAGE = {"role": "user", "content": "where is my refund? " * 20}
# no measured call seals a chunk (see the module docstring)
SETTINGS: dict[str, Any] = {"background_fold": False, "pool_max_size": 1, "chunk_tokens": 60_000}
WARM = 6  # past psycopg's default prepare_threshold (5)


@pytest.fixture
def proxy(dsn: str) -> Iterator[WireProxy]:
    with WireProxy(dsn) as p:
        yield p


def _filled(store: Any) -> tuple[uuid.UUID, Any]:
    """A session with folded chunks, buffered turns, a checkpoint, a run and a fact."""
    sid = store.create_session("acme", "user:1")
    store.append_turns(sid, [MESSAGE] * 60)
    store.flush(sid)
    store.append_turns(sid, [MESSAGE] * 5, checkpoint={"step": 1})
    run = store.open_run(sid, framework="test", thread_key="t")
    store.remember("acme", "user:1", "plan", "gold", source=None)
    return sid, run


def _calls(store: Any, sid: uuid.UUID, run: Any) -> dict[str, Callable[[], Any]]:
    return {
        "append_turn": lambda: store.append_turn(sid, MESSAGE),
        "append_turn(checkpoint=...)": lambda: store.append_turn(sid, MESSAGE, checkpoint={"s": 2}),
        "append_turns": lambda: store.append_turns(sid, [MESSAGE] * 3),
        "tail(n=20)": lambda: store.tail(sid, n=20),
        "tail(max_tokens=4000)": lambda: store.tail(sid, max_tokens=4000),
        "restore(n=20)": lambda: store.restore(sid, n=20),
        "restore(max_tokens=4000)": lambda: store.restore(sid, max_tokens=4000),
        "context(8000)": lambda: store.context(sid, 8000),
        "checkpoints()": lambda: store.checkpoints(sid),
        "get_run": lambda: store.get_run(run.run_id),
        "recall": lambda: store.recall("acme", "user:1"),
        "sessions()": lambda: store.sessions(tenant_id="acme"),
    }


def _counts(proxy: WireProxy, calls: dict[str, Callable[[], Any]]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for name, call in calls.items():
        for _ in range(WARM):  # past the one-time prepare of its statements
            call()
        seen[name] = []
        for _ in range(3):
            with proxy.counting() as n:
                call()
            seen[name].append(n[0])
    return seen


def test_hot_calls_make_one_round_trip(proxy: WireProxy) -> None:
    with shardstore.connect(proxy.dsn(), **SETTINGS) as store:
        sid, run = _filled(store)
        seen = _counts(proxy, _calls(store, sid, run))
        assert seen == {name: [1, 1, 1] for name in seen}
        # the uncommon path: the whole history, streamed in a snapshot transaction
        with proxy.counting() as n:
            store.restore(sid)
        assert n[0] > 1


def test_async_hot_calls_make_one_round_trip(proxy: WireProxy) -> None:
    async def go() -> dict[str, list[int]]:
        store = await shardstore.connect_async(proxy.dsn(), background_fold=False, pool_max_size=1)
        try:
            sid = await store.create_session("acme", "user:1")
            await store.append_turns(sid, [MESSAGE] * 30, checkpoint={"step": 1})
            run = await store.open_run(sid, framework="test", thread_key="t")
            calls: dict[str, Callable[[], Any]] = {
                "append_turn": lambda: store.append_turn(sid, MESSAGE),
                "append_turns": lambda: store.append_turns(sid, [MESSAGE] * 2),
                "tail(n=20)": lambda: store.tail(sid, n=20),
                "restore(n=20)": lambda: store.restore(sid, n=20),
                "checkpoints()": lambda: store.checkpoints(sid),
                "context(8000)": lambda: store.context(sid, 8000),
                "get_run": lambda: store.get_run(run.run_id),
                "sessions()": lambda: store.sessions(tenant_id="acme"),
            }
            seen: dict[str, list[int]] = {}
            for name, call in calls.items():
                for _ in range(WARM):
                    await call()
                seen[name] = []
                for _ in range(3):
                    with proxy.counting() as n:
                        await call()
                    seen[name].append(n[0])
            return seen
        finally:
            await store.close()

    seen = asyncio.run(go())
    assert seen == {name: [1, 1, 1] for name in seen}


@pytest.mark.slow
def test_a_tenant_store_binds_in_the_same_round_trip(proxy: WireProxy, tenant_role: str) -> None:
    """Binding the tenant per transaction adds no round trip: the binding travels with
    each transaction's first statement."""
    with shardstore.connect(proxy.dsn(), **SETTINGS) as owner:
        sid, run = _filled(owner)
    conn = psycopg.connect(proxy.dsn(), autocommit=True)
    try:
        conn.execute(f'SET ROLE "{tenant_role}"')
        store = rls.connect_tenant(conn, tenant="acme", **SETTINGS)
        assert store.connector.prologue is not None
        seen = _counts(proxy, _calls(store, sid, run))
        assert seen == {name: [1, 1, 1] for name in seen}
    finally:
        conn.close()


def test_the_adapters_make_one_round_trip_per_call(proxy: WireProxy) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from shardstore.integrations.langchain import ShardstoreChatMessageHistory
    from shardstore.integrations.openai_agents import ShardstoreSession

    with shardstore.connect(proxy.dsn(), **SETTINGS) as store:
        history = ShardstoreChatMessageHistory("chat", store, tenant_id="acme")
        session = ShardstoreSession("agents", store, tenant_id="acme")
        history.add_messages([HumanMessage("first")])
        asyncio.run(session.add_items([{"role": "user", "content": "first"}]))
        calls: dict[str, Callable[[], Any]] = {
            "langchain add_messages": lambda: history.add_messages(
                [HumanMessage("hi"), AIMessage("hello")]
            ),
            "langchain messages": lambda: history.messages,
            "agents add_items": lambda: asyncio.run(
                session.add_items([{"role": "user", "content": "x"}])
            ),
            "agents get_items": lambda: asyncio.run(session.get_items()),
        }
        seen = _counts(proxy, calls)
        assert seen == {name: [1, 1, 1] for name in seen}
