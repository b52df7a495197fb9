"""store.import_langgraph / ``shardstore import langgraph``: threads written by a real
LangGraph ``StateGraph(MessagesState)`` with a tool call (an offline fake model) through
``PostgresSaver`` into a database on the test server, imported as sessions with their
order and tool pairs; resume; hostile threads; asyncio; CLI."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

import shardstore
from shardstore.errors import ImportRejected, InvalidInput
from shardstore.integrations.ids import external_metadata, external_session_id

pytest.importorskip("langgraph.checkpoint.postgres")

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    messages_from_dict,
)
from langchain_core.tools import tool
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def fake_model(state: MessagesState) -> dict[str, Any]:
    """Offline: asks for the tool after a human message, answers after a tool result."""
    last = state["messages"][-1]
    turn = len(state["messages"])
    if isinstance(last, HumanMessage):
        call = {"name": "lookup", "args": {"city": f"c{turn}"}, "id": f"call-{turn}"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}
    return {"messages": [AIMessage(content=f"answer {turn}: {last.content} ☃")]}


def write_threads(dsn: str, threads: dict[str, int]) -> dict[str, list[BaseMessage]]:
    """Run the graph for each thread (n user questions each); returns the final messages."""
    builder = StateGraph(MessagesState)
    builder.add_node("model", fake_model)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    out = {}
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
        for thread, questions in threads.items():
            config: Any = {"configurable": {"thread_id": thread}}
            for q in range(questions):
                graph.invoke({"messages": [HumanMessage(content=f"q{q} {thread}")]}, config)
            out[thread] = graph.get_state(config).values["messages"]
    return out


@pytest.fixture
def source(new_database: Callable[[], str]) -> str:
    return new_database()


def sid(thread: str, tenant: str = "acme") -> Any:
    return external_session_id("langgraph", tenant, thread)


def restored(store: shardstore.Store, thread: str) -> list[BaseMessage]:
    return messages_from_dict([t.message for t in store.history(sid(thread))])


@pytest.mark.slow
def test_threads_become_sessions_with_order_and_tool_pairs(
    store: shardstore.Store, source: str
) -> None:
    written = write_threads(source, {"t-1": 3, "t-2": 1, "8b1d4c1e-6c1f-4f39-9c47-0d6f1f2a9a11": 2})
    report = store.import_langgraph(source, tenant_id="acme", batch_size=2)
    assert report.sessions == 3 and report.skipped == ()
    assert report.turns == sum(len(m) for m in written.values()) == 24
    for thread, messages in written.items():
        assert restored(store, thread) == messages
        assert store.session(sid(thread)).metadata == external_metadata("langgraph", thread)
    # the tool pairs: every tool message follows the AI message that called it
    turns = list(store.history(sid("t-1")))
    kinds = [t.message["type"] for t in turns]
    assert kinds == ["human", "ai", "tool", "ai"] * 3
    for i, t in enumerate(turns):
        if t.message["type"] == "tool":
            call = turns[i - 1].message["data"]["tool_calls"][0]["id"]
            assert t.message["data"]["tool_call_id"] == call
    # a tail never opens on the tool result whose call it cut off
    # the newest 2 turns would open on the last tool result: it is held back
    assert [t.message["type"] for t in store.tail(sid("t-1"), n=2)] == ["ai"]
    assert [t.message["type"] for t in store.tail(sid("t-1"), n=3)] == ["ai", "tool", "ai"]


@pytest.mark.slow
def test_rerun_appends_only_what_the_thread_gained(store: shardstore.Store, source: str) -> None:
    write_threads(source, {"a": 1, "b": 1})
    assert store.import_langgraph(source, tenant_id="acme").turns == 8
    again = store.import_langgraph(source, tenant_id="acme")
    assert (again.sessions, again.turns, again.unchanged) == (0, 0, 2)
    written = write_threads(source, {"a": 1})  # thread a goes on
    grown = store.import_langgraph(source, tenant_id="acme", thread_id="a")
    assert (grown.sessions, grown.turns) == (1, 4)
    assert restored(store, "a") == written["a"]
    # another tenant is another session
    other = store.import_langgraph(source, tenant_id="beta", thread_id=["a", "b"])
    assert other.sessions == 2 and sid("a", "beta") != sid("a")


@pytest.mark.slow
def test_hostile_threads_and_arguments(
    make_store: Callable[..., shardstore.Store], source: str, new_database: Callable[[], str]
) -> None:
    store = make_store(chunk_max_bytes=1024)
    write_threads(source, {"ok": 1})
    # a thread with a huge message: refused whole, naming it
    with PostgresSaver.from_conn_string(source) as saver:
        builder = StateGraph(MessagesState)
        builder.add_node("model", lambda s: {"messages": [AIMessage(content="x" * 5000)]})
        builder.add_edge(START, "model")
        graph = builder.compile(checkpointer=saver)
        graph.invoke(
            {"messages": [HumanMessage(content="hi")]}, {"configurable": {"thread_id": "huge"}}
        )
    with pytest.raises(ImportRejected) as caught:
        store.import_langgraph(source, tenant_id="acme", thread_id="huge")
    assert "thread 'huge' message 1" in str(caught.value)
    with pytest.raises(shardstore.SessionNotFound):
        store.session(sid("huge"))
    with pytest.raises(ImportRejected, match="thread 'missing': no checkpoint"):
        store.import_langgraph(source, tenant_id="acme", thread_id="missing")
    report = store.import_langgraph(source, tenant_id="acme", on_error="skip")
    assert report.sessions == 1 and [s.source for s in report.skipped] == ["thread 'huge'"]
    # not a LangGraph database
    with pytest.raises(ImportRejected, match="PostgresSaver"):
        store.import_langgraph(new_database(), tenant_id="acme")
    for bad in (
        {"tenant_id": ""},
        {"tenant_id": "a", "thread_id": 5},
        {"tenant_id": "a", "thread_id": ["x", None]},
        {"tenant_id": "a", "channel": ""},
        {"tenant_id": "a", "on_error": "x"},
        {"tenant_id": "a", "batch_size": -1},
    ):
        with pytest.raises(InvalidInput):
            store.import_langgraph(source, **bad)
    assert store.stats().sessions == 1


@pytest.mark.slow
def test_async_and_cli(dsn: str, source: str, capsys: pytest.CaptureFixture[str]) -> None:
    from shardstore.cli import main

    written = write_threads(source, {"x": 2, "y": 1})

    async def go() -> shardstore.ImportReport:
        astore = await shardstore.connect_async(dsn)
        try:
            return await astore.import_langgraph(source, tenant_id="acme", thread_id="x")
        finally:
            await astore.close()

    assert asyncio.run(go()).turns == 8
    assert (
        main(
            [
                "--dsn",
                dsn,
                "import",
                "langgraph",
                "--source-dsn",
                source,
                "--tenant",
                "acme",
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert (doc["sessions"], doc["turns"], doc["unchanged"]) == (1, 4, 1)
    with shardstore.connect(dsn) as store:
        assert restored(store, "x") == written["x"] and restored(store, "y") == written["y"]
