"""Round trips of one LangGraph step: ShardstoreSaver beside LangGraph's PostgresSaver.

One step is ``graph.invoke`` (or ``ainvoke``) of a one-node ``MessagesState`` graph
(START -> a node returning one AIMessage -> END) on a thread that already has a
checkpoint, counted by tests/wire.py's proxy (delay 0) for each durability mode. Each
checkpointer call is counted on its own as well: the test's wrapper runs the calls one at
a time (LangGraph may overlap a background put with the next call), which changes no
call's round trips, so that a later change that adds one to a method fails here.

Why the step cannot cost half of PostgresSaver's: LangGraph makes one checkpointer call per
persistence point (``sync`` and ``async``: get_tuple, put, put_writes, put, put_writes,
put; ``exit``: get_tuple, put), each call must be durable when it returns (a put_writes
held back for the next put is lost when that put never comes: a node that raises or
interrupts ends the run after its put_writes), and get_tuple must read the database
(another process may have written the thread). So a step costs at least one round trip per
call, and PostgresSaver already makes exactly one per call. ShardstoreSaver makes one per
call too; the tests assert that floor for each method and for the step.

Both savers are prepared as a service runs them: server-side prepared statements (psycopg
``prepare_threshold=0``, PostgresSaver's documented setting) after two warm-up steps, so
that no count includes a statement's one-time Parse; ShardstoreSaver also without them
(``prepare_threshold=None``, as behind a transaction pooler), where nothing is prepared.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.checkpoint.postgres")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

import shardstore
from shardstore.integrations.langgraph import ShardstoreSaver
from tests.wire import WireProxy

TENANT = "acme"
METHODS = ("get_tuple", "put", "put_writes")
DURABILITIES = ("sync", "async", "exit")
# LangGraph's calls for one step on a thread with a checkpoint (langgraph 1.x)
CALLS = {
    "sync": ["get_tuple", "put", "put_writes", "put", "put_writes", "put"],
    "async": ["get_tuple", "put", "put_writes", "put_writes", "put", "put"],
    "exit": ["get_tuple", "put"],
}

Counts = list[tuple[str, int]]


def _graph(checkpointer: Any) -> Any:
    def node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"reply {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile(checkpointer=checkpointer)


class _Tally:
    """Round trips of each checkpointer call, in call order; calls run one at a time."""

    def __init__(self, proxy: WireProxy) -> None:
        self.proxy = proxy
        self.calls: Counts = []
        self.on = False
        self.serial = threading.Lock()
        self.aserial: asyncio.Lock | None = None

    def wrap(self, saver: Any) -> Any:
        for name in METHODS:
            self._wrap_sync(saver, name)
            self._wrap_async(saver, name)
        return saver

    def _record(self, name: str, start: int) -> None:
        if self.on:
            self.calls.append((name, self.proxy.round_trips - start))

    def _wrap_sync(self, saver: Any, name: str) -> None:
        inner = getattr(saver, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self.serial:
                start = self.proxy.round_trips
                try:
                    return inner(*args, **kwargs)
                finally:
                    self._record(name, start)

        setattr(saver, name, counted)

    def _wrap_async(self, saver: Any, name: str) -> None:
        inner = getattr(saver, "a" + name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            if self.aserial is None:
                self.aserial = asyncio.Lock()
            async with self.aserial:
                start = self.proxy.round_trips
                try:
                    return await inner(*args, **kwargs)
                finally:
                    self._record(name, start)

        setattr(saver, "a" + name, counted)


def _payload() -> dict[str, Any]:
    return {"messages": [HumanMessage(content="hello")]}


def _steps(
    proxy: WireProxy, saver: Any, durability: str, thread: str | None = None
) -> tuple[int, Counts]:
    """Round trips of one sync step on a thread with a checkpoint (after two warm-up steps,
    unless ``thread`` names one that has them), and of each call."""
    tally = _Tally(proxy)
    graph = _graph(tally.wrap(saver))
    config = {"configurable": {"thread_id": thread or f"t-{uuid.uuid4()}"}}
    if thread is None:
        for _ in range(2):
            graph.invoke(_payload(), config, durability=durability)
    tally.on = True
    with proxy.counting() as n:
        graph.invoke(_payload(), config, durability=durability)
    return n[0], tally.calls


async def _asteps(proxy: WireProxy, saver: Any, durability: str) -> tuple[int, Counts]:
    """As :func:`_steps`, with ``ainvoke``."""
    tally = _Tally(proxy)
    graph = _graph(tally.wrap(saver))
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    for _ in range(2):
        await graph.ainvoke(_payload(), config, durability=durability)
    tally.on = True
    with proxy.counting() as n:
        await graph.ainvoke(_payload(), config, durability=durability)
    return n[0], tally.calls


@pytest.fixture(scope="module")
def proxy(server_dsn: str, template_db: str) -> Iterator[WireProxy]:
    """One database and one proxy for the module (each test uses threads of its own):
    closing a proxy that served connections takes seconds."""
    name = f"shardstore_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    try:
        with WireProxy(make_conninfo(server_dsn, dbname=name)) as p:
            yield p
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _postgres_step(proxy: WireProxy, durability: str) -> tuple[int, Counts]:
    with psycopg.connect(
        proxy.dsn(), autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        return _steps(proxy, saver, durability)


async def _apostgres_step(proxy: WireProxy, durability: str) -> tuple[int, Counts]:
    async with await psycopg.AsyncConnection.connect(
        proxy.dsn(), autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        saver = AsyncPostgresSaver(conn)
        await saver.setup()
        return await _asteps(proxy, saver, durability)


def _check(durability: str, ours: tuple[int, Counts], theirs: tuple[int, Counts]) -> None:
    step, calls = ours
    # with durability "async" a put runs beside the next call: the order varies
    assert sorted(name for name, _ in calls) == sorted(CALLS[durability]), calls
    assert [n for _, n in calls] == [1] * len(calls), calls  # one round trip per call
    assert step == len(calls), (step, calls)  # nothing between the calls
    # the floor (one round trip per durable call), which PostgresSaver makes as well
    assert step <= theirs[0], (ours, theirs)
    assert sorted(name for name, _ in theirs[1]) == sorted(CALLS[durability]), theirs


@pytest.mark.parametrize("prepare", [0, None], ids=["prepared", "unprepared"])
@pytest.mark.parametrize("durability", DURABILITIES)
def test_step_sync(proxy: WireProxy, durability: str, prepare: int | None) -> None:
    theirs = _postgres_step(proxy, durability)
    store = shardstore.connect(proxy.dsn(), background_fold=False, prepare_threshold=prepare)
    try:
        ours = _steps(proxy, ShardstoreSaver(store, tenant_id=TENANT), durability)
    finally:
        store.close()
    _check(durability, ours, theirs)


@pytest.mark.parametrize("durability", DURABILITIES)
def test_step_async_store(proxy: WireProxy, durability: str) -> None:
    """ainvoke on an AsyncStore (the saver's async methods await it)."""

    async def main() -> tuple[tuple[int, Counts], tuple[int, Counts]]:
        theirs = await _apostgres_step(proxy, durability)
        store = await shardstore.connect_async(
            proxy.dsn(), background_fold=False, prepare_threshold=0
        )
        try:
            ours = await _asteps(proxy, ShardstoreSaver(store, tenant_id=TENANT), durability)
        finally:
            await store.close()
        return ours, theirs

    ours, theirs = asyncio.run(main())
    _check(durability, ours, theirs)


def test_step_async_on_sync_store(proxy: WireProxy) -> None:
    """ainvoke on a Store (the async methods run the sync operations in a thread)."""
    theirs = _postgres_step(proxy, "sync")
    store = shardstore.connect(proxy.dsn(), background_fold=False, prepare_threshold=0)
    try:
        ours = asyncio.run(_asteps(proxy, ShardstoreSaver(store, tenant_id=TENANT), "sync"))
    finally:
        store.close()
    _check("sync", ours, theirs)


@pytest.mark.parametrize("durability", DURABILITIES)
def test_step_on_a_saver_new_to_the_thread(proxy: WireProxy, durability: str) -> None:
    """A saver that has not seen the thread (a new process, a thread another process
    wrote): its first get_tuple also resolves the thread's session and reads the turns the
    checkpoint holds, then checks that the session's head did not move meanwhile (four
    round trips); every other call makes one."""
    store = shardstore.connect(proxy.dsn(), background_fold=False, prepare_threshold=None)
    try:
        thread = f"t-{uuid.uuid4()}"
        graph = _graph(ShardstoreSaver(store, tenant_id=TENANT))
        for _ in range(2):
            graph.invoke(_payload(), {"configurable": {"thread_id": thread}}, durability=durability)
        step, calls = _steps(proxy, ShardstoreSaver(store, tenant_id=TENANT), durability, thread)
    finally:
        store.close()
    assert sorted(name for name, _ in calls) == sorted(CALLS[durability]), calls
    assert [n for name, n in calls if name == "get_tuple"] == [4], calls
    assert all(n == 1 for name, n in calls if name != "get_tuple"), calls
    assert step == len(calls) + 3, (step, calls)
