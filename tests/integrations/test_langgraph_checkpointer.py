"""The LangGraph checkpointer (shardstore.integrations.langgraph) with real LangGraph graphs.

A StateGraph(MessagesState) agent with a tool node and an offline fake chat model:
interrupted with ``interrupt()`` and resumed from a fresh process on the same database;
time travel (get_state_history, invoking from an older checkpoint) gives the right
messages; messages are stored once each as turns, never copied into checkpoints; the cases
where the list is not an append (branches, edits, RemoveMessage, non-list values, messages
JSON cannot hold) come back exactly, checked against LangGraph's InMemorySaver as the model
(hypothesis); purges, retention and rewinds remove the saver's rows; async parity.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.checkpoint.base")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
    message_to_dict,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

import shardstore
from shardstore.integrations.ids import external_session_id
from shardstore.integrations.langgraph import ShardstoreSaver

ROOT = Path(__file__).resolve().parents[2]
TENANT = "acme"
LG_TABLES = ("shardstore.langgraph_checkpoints", "shardstore.langgraph_writes")


# ---------------------------------------------------------------- the agent


class ScriptedModel(BaseChatModel):
    """An offline chat model: a user message gets a tool call, a tool result an answer."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        last = messages[-1]
        n = len(messages)
        if isinstance(last, ToolMessage):
            reply = AIMessage(
                content=f"the answer is {last.content}",
                id=f"ai-{n}",
                response_metadata={"model": "scripted"},
                additional_kwargs={"seen": n},
            )
        else:
            reply = AIMessage(
                content="",
                id=f"ai-{n}",
                tool_calls=[
                    {"name": "lookup", "args": {"q": str(last.content)}, "id": f"call-{n}"}
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup(q: str) -> str:
    """Look a question up (asks a human to approve first)."""
    approval = interrupt({"approve": q})
    return f"{q}={approval}"


def build_graph(checkpointer: Any) -> Any:
    """agent -> tools (interrupts for approval) -> agent -> end."""
    model = ScriptedModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def resume_main(dsn: str, thread: str, answer: str) -> None:
    """Run in a fresh process: resume the interrupted thread and print its messages."""
    with shardstore.connect(dsn) as store:
        graph = build_graph(ShardstoreSaver(store, tenant_id=TENANT))
        out = graph.invoke(Command(resume=answer), {"configurable": {"thread_id": thread}})
        print(json.dumps([message_to_dict(m) for m in out["messages"]]))


def cfg(thread: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, **extra}}


def turn_dicts(store: shardstore.Store, saver: ShardstoreSaver, thread: str) -> list[Any]:
    sid = saver.session_id(thread)
    assert sid is not None
    return [t.message for t in store.history(sid)]


def rows(dsn: str, sql: str, *params: Any) -> list[Any]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def lg_counts(dsn: str, sid: uuid.UUID) -> tuple[int, ...]:
    counts = []
    for table in (*LG_TABLES, "shardstore.checkpoints", "shardstore.turn_buffer"):
        counts.append(rows(dsn, f"SELECT count(*) FROM {table} WHERE session_id = %s", sid)[0][0])
    return tuple(counts)


@pytest.fixture
def saver(store: shardstore.Store) -> ShardstoreSaver:
    return ShardstoreSaver(store, tenant_id=TENANT)


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_interrupt_then_resume_in_a_fresh_process(
    dsn: str, store: shardstore.Store, saver: ShardstoreSaver
) -> None:
    graph = build_graph(saver)
    thread = "support-chat-1"
    first = graph.invoke({"messages": [HumanMessage("capital of France?", id="h1")]}, cfg(thread))
    assert "__interrupt__" in first
    state = graph.get_state(cfg(thread))
    assert state.next == ("tools",)
    assert [m.id for m in state.values["messages"]] == ["h1", "ai-1"]

    code = (
        "from tests.integrations.test_langgraph_checkpointer import resume_main;"
        f" resume_main({dsn!r}, {thread!r}, 'yes')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    resumed = json.loads(done.stdout.strip().splitlines()[-1])
    assert [m["data"]["id"] for m in resumed][:2] == ["h1", "ai-1"]
    assert resumed[-1]["data"]["content"] == "the answer is capital of France?=yes"

    # this process sees what the other one wrote, exactly
    after = ShardstoreSaver(store, tenant_id=TENANT)
    final = build_graph(after).get_state(cfg(thread))
    assert final.next == ()
    assert [message_to_dict(m) for m in final.values["messages"]] == resumed
    tool_msg = final.values["messages"][2]
    assert isinstance(tool_msg, ToolMessage) and tool_msg.tool_call_id == "call-1"
    assert final.values["messages"][1].tool_calls[0]["args"] == {"q": "capital of France?"}
    assert final.values["messages"][3].additional_kwargs == {"seen": 3}

    # each message once, in order, as turns; no checkpoint holds a copy of one
    assert turn_dicts(store, after, thread) == resumed
    sid = external_session_id("langgraph", TENANT, thread)
    assert after.session_id(thread) == sid
    info = store.session(sid)
    assert info.metadata == {"framework": "langgraph", "external_id": thread}
    assert info.tenant_id == TENANT
    states = rows(dsn, "SELECT state::text FROM shardstore.checkpoints WHERE session_id = %s", sid)
    assert len(states) >= 5
    for (text,) in states:
        assert "capital of France" not in text and "the answer is" not in text


def test_time_travel_gives_each_branch_its_messages(
    store: shardstore.Store, saver: ShardstoreSaver
) -> None:
    graph = build_graph(saver)
    thread = "travel"
    graph.invoke({"messages": [HumanMessage("q1", id="h1")]}, cfg(thread))
    graph.invoke(Command(resume="a1"), cfg(thread))
    graph.invoke({"messages": [HumanMessage("q2", id="h2")]}, cfg(thread))
    graph.invoke(Command(resume="a2"), cfg(thread))
    end_ids = [m.id for m in graph.get_state(cfg(thread)).values["messages"]]
    assert len(end_ids) == 8 and end_ids[0] == "h1" and end_ids[4] == "h2"
    history = list(graph.get_state_history(cfg(thread)))
    # newest first; every snapshot's messages are a prefix of the final list (one branch)
    for snap in history:
        ids = [m.id for m in snap.values.get("messages", [])]
        assert ids == end_ids[: len(ids)]
    # back to the point where the agent had answered q1, then a new question
    fork_at = next(s for s in history if [m.id for m in s.values["messages"]] == end_ids[:4])
    out = graph.invoke({"messages": [HumanMessage("q3", id="h3")]}, fork_at.config)
    assert "__interrupt__" in out
    graph.invoke(Command(resume="a3"), cfg(thread))
    branch = [m.id for m in graph.get_state(cfg(thread)).values["messages"]]
    assert branch[:4] == end_ids[:4] and branch[4] == "h3" and len(branch) == 8
    assert "h2" not in branch
    # the old branch is still there, exactly
    old = graph.get_state(history[0].config)
    assert [m.id for m in old.values["messages"]] == end_ids
    # and a fresh saver (no cache) reads both the same way
    fresh = build_graph(ShardstoreSaver(store, tenant_id=TENANT))
    assert [m.id for m in fresh.get_state(history[0].config).values["messages"]] == end_ids
    assert [m.id for m in fresh.get_state(cfg(thread)).values["messages"]] == branch
    # the shared turns are stored once; only the first branch was appended as turns
    assert [t["data"]["id"] for t in turn_dicts(store, saver, thread)] == end_ids


def _replay_scenario(checkpointer: Any) -> list[Any]:
    """Answer, go back to the interrupted tool call, resume it again, then continue the
    older branch with a new question; the messages each step ends with."""
    graph = build_graph(checkpointer)
    graph.invoke({"messages": [HumanMessage("q1", id="h1")]}, cfg("replay"))
    graph.invoke(Command(resume="a1"), cfg("replay"))
    history = list(graph.get_state_history(cfg("replay")))
    before_tools = next(s for s in history if s.next == ("tools",))
    seen = [graph.invoke(Command(resume="other"), before_tools.config)["messages"]]
    first = history[-1]  # the input checkpoint
    seen.append(graph.invoke(None, first.config)["messages"])
    seen.append(graph.get_state(cfg("replay")).values["messages"])
    seen.append(
        [[m for m in s.values.get("messages", [])] for s in graph.get_state_history(cfg("replay"))]
    )
    return seen


def _no_random_ids(value: Any) -> Any:
    """Messages as dicts, without the ids add_messages draws at random (tool results)."""
    if isinstance(value, list):
        return [_no_random_ids(v) for v in value]
    d = message_to_dict(value)
    if isinstance(value, ToolMessage):
        d["data"]["id"] = None
    return d


@pytest.mark.slow
def test_replays_match_inmemorysaver(saver: ShardstoreSaver) -> None:
    ours = _replay_scenario(saver)
    assert _no_random_ids(ours) == _no_random_ids(_replay_scenario(InMemorySaver()))
    assert ours[0][-1].content == "the answer is q1=a1"  # the tool's recorded result reused


def test_async_graph_on_async_store(dsn: str) -> None:
    asyncio.run(_async_graph(dsn))


async def _async_graph(dsn: str) -> None:
    store = await shardstore.connect_async(dsn)
    try:
        saver = ShardstoreSaver(store, tenant_id=TENANT)
        graph = build_graph(saver)
        thread = "async-1"
        await graph.ainvoke({"messages": [HumanMessage("q", id="h")]}, cfg(thread))
        out = await graph.ainvoke(Command(resume="ok"), cfg(thread))
        assert out["messages"][-1].content == "the answer is q=ok"
        snaps = [s async for s in graph.aget_state_history(cfg(thread))]
        assert len(snaps) >= 5
        sid = external_session_id("langgraph", TENANT, thread)
        turns = [t async for t in store.history(sid)]
        assert [t.message["data"]["id"] for t in turns] == [m.id for m in out["messages"]]
        with pytest.raises(shardstore.InvalidInput, match="AsyncStore"):
            saver.get_tuple(cfg(thread))
    finally:
        await store.close()


def test_sync_store_serves_async_methods(saver: ShardstoreSaver) -> None:
    graph = build_graph(saver)

    async def run() -> Any:
        await graph.ainvoke({"messages": [HumanMessage("q", id="h")]}, cfg("mixed"))
        return await graph.ainvoke(Command(resume="ok"), cfg("mixed"))

    out = asyncio.run(run())
    assert out["messages"][-1].content == "the answer is q=ok"
    assert [m.id for m in graph.get_state(cfg("mixed")).values["messages"]] == [
        m.id for m in out["messages"]
    ]


# ---------------------------------------------------------------- non-append lists


class Custom(HumanMessage):
    """A message subclass messages_from_dict does not know: kept inline."""


def _put(
    saver: Any,
    thread: str,
    values: dict[str, Any],
    parent: str | None = None,
    ns: str = "",
    version: int = 1,
) -> dict[str, Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: version for k in values}
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if parent is not None:
        conf["checkpoint_id"] = parent
    meta = {"source": "loop", "step": 1}
    return saver.put({"configurable": conf}, cp, meta, dict(cp["channel_versions"]))  # type: ignore[no-any-return]


def test_edits_removals_and_odd_values_come_back_exactly(
    store: shardstore.Store, saver: ShardstoreSaver
) -> None:
    h1, a1, h2 = HumanMessage("one", id="1"), AIMessage("two", id="2"), HumanMessage("3", id="3")
    c1 = _put(saver, "odd", {"messages": [h1, a1]})
    c2 = _put(saver, "odd", {"messages": [h1, a1, h2]}, c1["configurable"]["checkpoint_id"])
    edited = [h1, AIMessage("two, edited", id="2"), h2]
    c3 = _put(saver, "odd", {"messages": edited}, c2["configurable"]["checkpoint_id"])
    removed = [h1, h2]  # add_messages with RemoveMessage("2")
    c4 = _put(saver, "odd", {"messages": removed}, c3["configurable"]["checkpoint_id"])
    weird = [h1, Custom("custom", id="c"), ToolMessage("x", tool_call_id="t", artifact={1, 2})]
    c5 = _put(saver, "odd", {"messages": weird, "extra": (1, 2)})
    c6 = _put(saver, "odd", {"messages": "not a list"})
    c7 = _put(saver, "odd", {"messages": [h1, a1, h2, AIMessage("four", id="4")]})
    expect = [
        (c1, [h1, a1]),
        (c2, [h1, a1, h2]),
        (c3, edited),
        (c4, removed),
        (c5, weird),
        (c6, "not a list"),
        (c7, [h1, a1, h2, AIMessage("four", id="4")]),
    ]
    fresh = ShardstoreSaver(store, tenant_id=TENANT)
    for reader in (saver, fresh):
        for conf, messages in expect:
            got = reader.get_tuple(conf)
            assert got is not None
            assert got.checkpoint["channel_values"]["messages"] == messages
            if isinstance(messages, list):
                assert [type(m) for m in got.checkpoint["channel_values"]["messages"]] == [
                    type(m) for m in messages
                ]
    # what LangGraph's serializer gives back for a tuple, as every LangGraph saver does
    extra = saver.serde.loads_typed(saver.serde.dumps_typed((1, 2)))
    assert fresh.get_tuple(c5).checkpoint["channel_values"]["extra"] == extra
    # appended turns: h1, a1, h2 once; then "four", the only extension of the turns
    assert [t["data"]["id"] for t in turn_dicts(store, saver, "odd")] == ["1", "2", "3", "4"]


def test_remove_message_through_the_graph(saver: ShardstoreSaver) -> None:
    graph = build_graph(saver)
    graph.invoke({"messages": [HumanMessage("q", id="h")]}, cfg("rm"))
    graph.invoke(Command(resume="ok"), cfg("rm"))
    ids = [m.id for m in graph.get_state(cfg("rm")).values["messages"]]
    graph.update_state(cfg("rm"), {"messages": [RemoveMessage(id=ids[1])]})
    after = [m.id for m in graph.get_state(cfg("rm")).values["messages"]]
    assert after == [ids[0], *ids[2:]]
    fresh = ShardstoreSaver(saver.store, tenant_id=TENANT)
    assert [m.id for m in build_graph(fresh).get_state(cfg("rm")).values["messages"]] == after


# one step of the property test: which checkpoint to start from, and what to do
OPS = st.lists(
    st.tuples(
        st.integers(0, 50),  # parent: index into the checkpoints so far (mod), or newest
        st.sampled_from(["append", "append2", "edit", "remove", "same", "clear", "scalar"]),
        st.integers(0, 50),  # which message an edit or removal hits
    ),
    min_size=1,
    max_size=12,
)


def _apply(messages: list[Any], op: str, at: int, n: int) -> Any:
    if op == "append":
        return [*messages, HumanMessage(f"m{n}", id=f"id{n}")]
    if op == "append2":
        return [
            *messages,
            AIMessage(f"a{n}", id=f"ida{n}"),
            ToolMessage(f"t{n}", tool_call_id=f"c{n}", id=f"idt{n}"),
        ]
    if op == "edit" and messages:
        i = at % len(messages)
        out = list(messages)
        out[i] = AIMessage(f"edit{n}", id=messages[i].id)
        return out
    if op == "remove" and messages:
        i = at % len(messages)
        return messages[:i] + messages[i + 1 :]
    if op == "clear":
        return []
    if op == "scalar":
        return {"not": "messages"}
    return list(messages)


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_any_history_reads_back_as_inmemorysaver_does(
    store: shardstore.Store, saver: ShardstoreSaver, ops: list[tuple[int, str, int]]
) -> None:
    thread = f"prop-{uuid.uuid4()}"
    model = InMemorySaver()
    stored: list[tuple[dict[str, Any], Any]] = []  # (config, messages) per checkpoint
    appended = 0
    for n, (parent_ix, op, at) in enumerate(ops):
        parent = (
            stored[parent_ix % len(stored)]
            if stored and parent_ix < 40
            else (stored[-1] if stored else None)
        )
        base = parent[1] if parent is not None and isinstance(parent[1], list) else []
        messages = _apply(base, op, at, n)
        appended += op in ("append", "append2")
        pid = None if parent is None else parent[0]["configurable"]["checkpoint_id"]
        conf = _put(saver, thread, {"messages": messages, "n": n}, pid, version=n + 1)
        _put(model, thread, {"messages": messages, "n": n}, pid, version=n + 1)
        stored.append((conf, messages))
    fresh = ShardstoreSaver(store, tenant_id=TENANT)
    for conf, messages in stored:
        for reader in (saver, fresh):
            got = reader.get_tuple(conf)
            assert got is not None
            assert got.checkpoint["channel_values"]["messages"] == messages
    ours = [t.checkpoint["channel_values"] for t in saver.list(cfg(thread))]
    theirs = [t.checkpoint["channel_values"] for t in model.list(cfg(thread, checkpoint_ns=""))]
    assert ours == theirs
    # never more turns than messages ever appended (each at most once)
    assert len(turn_dicts(store, saver, thread)) <= 2 * appended


# ---------------------------------------------------------------- lifecycle


def _thread_with_writes(saver: ShardstoreSaver, thread: str) -> dict[str, Any]:
    graph = build_graph(saver)
    graph.invoke({"messages": [HumanMessage("q", id="h")]}, cfg(thread))  # interrupted: writes
    return graph.get_state(cfg(thread)).config


def test_purges_remove_the_savers_rows(
    dsn: str, store: shardstore.Store, saver: ShardstoreSaver
) -> None:
    _thread_with_writes(saver, "gone")
    _thread_with_writes(saver, "stays")
    gone, stays = saver.session_id("gone"), saver.session_id("stays")
    assert gone is not None and stays is not None
    before = lg_counts(dsn, gone)
    assert before[0] > 0 and before[1] > 0 and before[2] > 0
    store.purge_session(gone)
    assert lg_counts(dsn, gone) == (0, 0, 0, 0)
    assert lg_counts(dsn, stays) != (0, 0, 0, 0)
    assert saver.get_tuple(cfg("gone")) is None
    # the thread id works again, on a new session
    _thread_with_writes(saver, "gone")
    again = saver.session_id("gone")
    assert again is not None and again != gone
    assert saver.get_tuple(cfg("gone")) is not None
    store.purge_tenant(TENANT)
    for sid in (again, stays):
        assert lg_counts(dsn, sid) == (0, 0, 0, 0)


def test_delete_thread_and_rewind(
    dsn: str, store: shardstore.Store, saver: ShardstoreSaver
) -> None:
    graph = build_graph(saver)
    graph.invoke({"messages": [HumanMessage("q", id="h")]}, cfg("rw"))
    graph.invoke(Command(resume="ok"), cfg("rw"))
    sid = saver.session_id("rw")
    assert sid is not None
    positions = rows(
        dsn, "SELECT turn_seq FROM shardstore.langgraph_checkpoints WHERE session_id = %s", sid
    )
    assert max(p for (p,) in positions) == 3
    store.rewind(sid, 2)
    left = rows(
        dsn, "SELECT turn_seq FROM shardstore.langgraph_checkpoints WHERE session_id = %s", sid
    )
    assert left and all(p < 2 for (p,) in left)
    assert rows(
        dsn,
        "SELECT count(*) FROM shardstore.langgraph_writes WHERE session_id = %s AND turn_seq >= 2",
        sid,
    ) == [(0,)]
    # the saver's copy of the turns notices the rewind
    newest = saver.get_tuple(cfg("rw"))
    assert newest is not None
    assert len(newest.checkpoint["channel_values"]["messages"]) <= 2
    saver.delete_thread("rw")
    assert lg_counts(dsn, sid) == (0, 0, 0, 0)
    assert saver.get_tuple(cfg("rw")) is None
    saver.delete_thread("never-existed")


def test_range_purge_is_not_served_from_the_cache(
    store: shardstore.Store, saver: ShardstoreSaver
) -> None:
    msgs = [HumanMessage(f"m{i}", id=str(i)) for i in range(6)]
    conf = _put(saver, "cut", {"messages": msgs})
    sid = saver.session_id("cut")
    assert sid is not None
    assert saver.get_tuple(conf).checkpoint["channel_values"]["messages"] == msgs
    store.purge_range(sid, before_turn_seq=3)
    got = saver.get_tuple(conf)
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"] == msgs[3:]


@pytest.mark.slow
def test_copy_thread_copies_turns_checkpoints_and_writes(
    dsn: str, store: shardstore.Store, saver: ShardstoreSaver
) -> None:
    graph = build_graph(saver)
    graph.invoke({"messages": [HumanMessage("q", id="h")]}, cfg("src"))
    saver.copy_thread("src", "dst")
    src_hist = [
        (s.config["configurable"]["checkpoint_id"], s.values, s.next)
        for s in graph.get_state_history(cfg("src"))
    ]
    dst_hist = [
        (s.config["configurable"]["checkpoint_id"], s.values, s.next)
        for s in graph.get_state_history(cfg("dst"))
    ]
    assert dst_hist == src_hist
    # the copy resumes on its own; the source is unchanged
    out = graph.invoke(Command(resume="copy"), cfg("dst"))
    assert out["messages"][-1].content == "the answer is q=copy"
    assert graph.get_state(cfg("src")).next == ("tools",)
    with pytest.raises(shardstore.InvalidInput, match="already exists"):
        saver.copy_thread("src", "dst")
    # the copy is a fork: it shares the source's turns, it does not hold copies of them
    src_sid, dst_sid = saver.session_id("src"), saver.session_id("dst")
    assert src_sid is not None and dst_sid is not None
    src_turns = [t.message for t in store.history(src_sid)]
    assert [t.message for t in store.history(dst_sid)][: len(src_turns)] == src_turns
    owned = rows(
        dsn,
        "SELECT (SELECT count(*) FROM shardstore.turn_buffer WHERE session_id = %s"
        " AND turn_seq < %s) + (SELECT count(*) FROM shardstore.chunk_map"
        " WHERE session_id = %s)",
        dst_sid,
        len(src_turns),
        dst_sid,
    )
    assert owned == [(0,)]


# ---------------------------------------------------------------- hostile input


def _everything(dsn: str) -> list[Any]:
    out = []
    for table in (
        *LG_TABLES,
        "shardstore.checkpoints",
        "shardstore.turn_buffer",
        "shardstore.sessions",
    ):
        out.append(rows(dsn, f"SELECT count(*) FROM {table}")[0][0])
    return out


HOSTILE_PUTS: list[tuple[str, Callable[[Any], Any]]] = [
    ("config not a dict", lambda s: s.put(None, _cp(), {}, {})),
    ("no configurable", lambda s: s.put({}, _cp(), {}, {})),
    ("no thread", lambda s: s.put({"configurable": {}}, _cp(), {}, {})),
    ("empty thread", lambda s: s.put(cfg(""), _cp(), {}, {})),
    ("NUL thread", lambda s: s.put(cfg("a\x00b"), _cp(), {}, {})),
    ("surrogate thread", lambda s: s.put(cfg("a\udc00"), _cp(), {}, {})),
    ("thread a list", lambda s: s.put(cfg(["x"]), _cp(), {}, {})),  # type: ignore[arg-type]
    ("NUL namespace", lambda s: s.put(cfg("t", checkpoint_ns="a\x00"), _cp(), {}, {})),
    ("namespace an int", lambda s: s.put(cfg("t", checkpoint_ns=3), _cp(), {}, {})),
    ("NUL parent", lambda s: s.put(cfg("t", checkpoint_id="p\x00"), _cp(), {}, {})),
    ("checkpoint not a dict", lambda s: s.put(cfg("t"), "x", {}, {})),
    ("no id", lambda s: s.put(cfg("t"), {**_cp(), "id": None}, {}, {})),
    ("empty id", lambda s: s.put(cfg("t"), {**_cp(), "id": ""}, {}, {})),
    ("values not a dict", lambda s: s.put(cfg("t"), {**_cp(), "channel_values": []}, {}, {})),
    ("metadata not a dict", lambda s: s.put(cfg("t"), _cp(), [], {})),
    ("metadata a set", lambda s: s.put(cfg("t"), _cp(), {"x": {1}}, {})),
    ("metadata NaN", lambda s: s.put(cfg("t"), _cp(), {"x": float("nan")}, {})),
    ("writes without id", lambda s: s.put_writes(cfg("t"), [("c", 1)], "task")),
    ("writes a string", lambda s: s.put_writes(cfg("t", checkpoint_id="x"), "ab", "task")),
    ("write not a pair", lambda s: s.put_writes(cfg("t", checkpoint_id="x"), [("c",)], "task")),
    ("write channel int", lambda s: s.put_writes(cfg("t", checkpoint_id="x"), [(1, 2)], "task")),
    ("task empty", lambda s: s.put_writes(cfg("t", checkpoint_id="x"), [("c", 1)], "")),
    ("task NUL", lambda s: s.put_writes(cfg("t", checkpoint_id="x"), [("c", 1)], "a\x00")),
    ("task path int", lambda s: s.put_writes(cfg("t", checkpoint_id="x"), [("c", 1)], "a", 3)),
    ("list limit -1", lambda s: list(s.list(cfg("t"), limit=-1))),
    ("list limit str", lambda s: list(s.list(cfg("t"), limit="2"))),
    ("list filter list", lambda s: list(s.list(cfg("t"), filter=[1]))),
    ("list filter set", lambda s: list(s.list(cfg("t"), filter={"a": {1}}))),
    ("get NUL thread", lambda s: s.get_tuple(cfg("\x00"))),
    ("prune a string", lambda s: s.prune("abc")),
    ("prune strategy", lambda s: s.prune(["t"], strategy="all")),
    ("runs a string", lambda s: s.delete_for_runs("run")),
    ("runs NUL", lambda s: s.delete_for_runs(["a\x00"])),
    ("copy to itself", lambda s: s.copy_thread("t", "t")),
    ("delete NUL", lambda s: s.delete_thread("a\x00")),
]


def _cp() -> dict[str, Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    return dict(empty_checkpoint())


@pytest.mark.slow
@pytest.mark.parametrize("case", HOSTILE_PUTS, ids=[c[0] for c in HOSTILE_PUTS])
def test_hostile_input_raises_and_writes_nothing(
    dsn: str, saver: ShardstoreSaver, case: tuple[str, Callable[[Any], Any]]
) -> None:
    before = _everything(dsn)
    with pytest.raises(shardstore.InvalidInput):
        case[1](saver)
    assert _everything(dsn) == before


@pytest.mark.slow
def test_hostile_input_async(dsn: str) -> None:
    asyncio.run(_hostile_async(dsn))


async def _hostile_async(dsn: str) -> None:
    store = await shardstore.connect_async(dsn)
    try:
        saver = ShardstoreSaver(store, tenant_id=TENANT)
        before = _everything(dsn)
        with pytest.raises(shardstore.InvalidInput):
            await saver.aput(cfg("a\x00"), _cp(), {}, {})  # type: ignore[arg-type]
        with pytest.raises(shardstore.InvalidInput):
            await saver.aput_writes(cfg("t"), [("c", 1)], "task")
        with pytest.raises(shardstore.InvalidInput):
            [x async for x in saver.alist(cfg("t"), limit=-1)]
        with pytest.raises(shardstore.InvalidInput):
            await saver.aprune(["t"], strategy="nope")
        with pytest.raises(shardstore.InvalidInput):
            await saver.adelete_for_runs("x")
        with pytest.raises(shardstore.InvalidInput):
            await saver.acopy_thread("t", "t")
        assert _everything(dsn) == before
    finally:
        await store.close()


def test_constructor_refuses_bad_arguments(store: shardstore.Store) -> None:
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreSaver("postgres://x", tenant_id="t")
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreSaver(store, tenant_id="")
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreSaver(store, tenant_id="t", messages_channel="")


def test_tenants_do_not_share_threads(store: shardstore.Store) -> None:
    a = ShardstoreSaver(store, tenant_id="a")
    b = ShardstoreSaver(store, tenant_id="b")
    _put(a, "same", {"messages": [HumanMessage("for a", id="1")], "x": 1})
    assert b.get_tuple(cfg("same")) is None
    assert list(b.list(None)) == []
    assert [t.config["configurable"]["thread_id"] for t in a.list(None)] == ["same"]
    b.delete_for_runs(["any"])
    b.delete_thread("same")
    assert a.get_tuple(cfg("same")) is not None


# ---------------------------------------------------------------- async parity


def _scenario_sync(saver: ShardstoreSaver, thread: str) -> list[Any]:
    c1 = _put(saver, thread, {"messages": [HumanMessage("a", id="1")], "k": "v"})
    saver.put_writes(c1, [("messages", [AIMessage("b", id="2")]), ("k", {"x": 1})], "task-1")
    c2 = _put(
        saver,
        thread,
        {"messages": [HumanMessage("a", id="1"), AIMessage("b", id="2")]},
        c1["configurable"]["checkpoint_id"],
    )
    _put(saver, thread, {"z": 1}, ns="child:1")
    listed = list(saver.list(cfg(thread)))
    newest = saver.get_tuple(cfg(thread, checkpoint_ns=""))
    one = saver.get_tuple(c1)
    filtered = list(saver.list(cfg(thread), filter={"step": 1}, before=c2, limit=5))
    saver.prune([thread])
    pruned = list(saver.list({"configurable": {"thread_id": thread}}))
    return [_plain(x) for x in (listed, newest, one, filtered, pruned)]


async def _scenario_async(saver: ShardstoreSaver, thread: str) -> list[Any]:
    c1 = await saver.aput(
        cfg(thread, checkpoint_ns=""),
        _cp_with({"messages": [HumanMessage("a", id="1")], "k": "v"}),
        {"source": "loop", "step": 1},
        {},
    )
    await saver.aput_writes(c1, [("messages", [AIMessage("b", id="2")]), ("k", {"x": 1})], "task-1")
    c2 = await saver.aput(
        cfg(thread, checkpoint_ns="", checkpoint_id=c1["configurable"]["checkpoint_id"]),
        _cp_with({"messages": [HumanMessage("a", id="1"), AIMessage("b", id="2")]}),
        {"source": "loop", "step": 1},
        {},
    )
    await saver.aput(
        cfg(thread, checkpoint_ns="child:1"), _cp_with({"z": 1}), {"source": "loop", "step": 1}, {}
    )
    listed = [t async for t in saver.alist(cfg(thread))]
    newest = await saver.aget_tuple(cfg(thread, checkpoint_ns=""))
    one = await saver.aget_tuple(c1)
    filtered = [t async for t in saver.alist(cfg(thread), filter={"step": 1}, before=c2, limit=5)]
    await saver.aprune([thread])
    pruned = [t async for t in saver.alist({"configurable": {"thread_id": thread}})]
    return [_plain(x) for x in (listed, newest, one, filtered, pruned)]


def _cp_with(values: dict[str, Any]) -> Any:
    cp = _cp()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    return cp


def _plain(value: Any) -> Any:
    """Checkpoint tuples without what differs between two runs (ids, timestamps)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_plain(v) for v in value]
    cp = dict(value.checkpoint)
    cp.pop("id"), cp.pop("ts")
    return (
        value.config["configurable"]["checkpoint_ns"],
        cp,
        value.metadata,
        value.parent_config is not None,
        value.pending_writes,
    )


def test_async_parity(dsn: str, saver: ShardstoreSaver) -> None:
    sync_result = _scenario_sync(saver, "parity-sync")

    async def run() -> list[Any]:
        store = await shardstore.connect_async(dsn)
        try:
            return await _scenario_async(ShardstoreSaver(store, tenant_id=TENANT), "parity-async")
        finally:
            await store.close()

    assert asyncio.run(run()) == sync_result
    assert len(sync_result[0]) == 3 and len(sync_result[4]) == 2  # two namespaces kept


def test_writes_order_and_special_channels(saver: ShardstoreSaver) -> None:
    from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

    c = _put(saver, "w", {"k": 1})
    saver.put_writes(c, [("b", 1), ("a", 2)], "task-b", "p2")
    saver.put_writes(c, [("c", 3)], "task-a", "p1")
    saver.put_writes(c, [(ERROR, "boom")], "task-a", "p1")
    saver.put_writes(c, [(ERROR, "boom again")], "task-a", "p1")  # special: replaced
    saver.put_writes(c, [("b", "ignored"), ("a", "ignored")], "task-b", "p2")  # kept as first
    got = saver.get_tuple(c)
    assert got is not None
    assert got.pending_writes == [
        ("task-a", ERROR, "boom again"),
        ("task-a", "c", 3),
        ("task-b", "b", 1),
        ("task-b", "a", 2),
    ]
    saver.put_writes(c, [(INTERRUPT, {"v": (1, 2)})], "task-c", "p3")
    got = saver.get_tuple(c)
    value = saver.serde.loads_typed(saver.serde.dumps_typed({"v": (1, 2)}))
    assert got is not None and got.pending_writes[-1] == ("task-c", INTERRUPT, value)


def test_repeated_put_overwrites(saver: ShardstoreSaver) -> None:
    cp = _cp_with({"messages": [HumanMessage("a", id="1")], "k": 1})
    saver.put(cfg("again", checkpoint_ns=""), cp, {"source": "loop", "step": 1}, {})
    cp2 = {**cp, "channel_values": {"messages": [HumanMessage("a", id="1")], "k": 2}}
    saver.put(cfg("again", checkpoint_ns=""), cp2, {"source": "loop", "step": 2}, {})
    listed = list(saver.list(cfg("again")))
    assert len(listed) == 1
    assert listed[0].checkpoint["channel_values"]["k"] == 2 and listed[0].metadata["step"] == 2
    assert len(turn_dicts(saver.store, saver, "again")) == 1


def test_two_writers_and_foreign_turns(store: shardstore.Store) -> None:
    a = ShardstoreSaver(store, tenant_id=TENANT)
    b = ShardstoreSaver(store, tenant_id=TENANT)
    h1, a1, h2 = HumanMessage("1", id="1"), AIMessage("2", id="2"), HumanMessage("3", id="3")
    c1 = _put(a, "two", {"messages": [h1]})
    c2 = _put(b, "two", {"messages": [h1, a1]}, c1["configurable"]["checkpoint_id"], version=2)
    # a's copy of the turns is stale: the put is refused, a rereads and appends only h2
    c3 = _put(a, "two", {"messages": [h1, a1, h2]}, c2["configurable"]["checkpoint_id"], version=3)
    assert [t["data"]["id"] for t in turn_dicts(store, a, "two")] == ["1", "2", "3"]
    # a turn appended by other means (chat format) is read as a LangChain message
    sid = a.session_id("two")
    assert sid is not None
    store.append_turn(sid, {"role": "user", "content": "from elsewhere"})
    c4 = _put(
        b,
        "two",
        {"messages": [h1, a1, h2, AIMessage("4", id="4")]},
        c3["configurable"]["checkpoint_id"],
        version=4,
    )
    fresh = ShardstoreSaver(store, tenant_id=TENANT)
    for conf, expect in (
        (c1, [h1]),
        (c2, [h1, a1]),
        (c3, [h1, a1, h2]),
        (c4, [h1, a1, h2, AIMessage("4", id="4")]),
    ):
        for reader in (a, b, fresh):
            got = reader.get_tuple(conf)
            assert got is not None and got.checkpoint["channel_values"]["messages"] == expect
    newest = fresh.get_tuple(cfg("two", checkpoint_ns=""))
    assert newest is not None and newest.config == c4
    ids = [t.get("data", {}).get("id") for t in turn_dicts(store, a, "two")]
    assert ids == ["1", "2", "3", None]  # "4" diverged from the turns: kept inline
