"""ShardstoreSaver stores serialized values deflated when that is shorter: pending writes
(their value type then carries the ``shardstore.deflate:`` prefix) and channel values that
are not plain JSON (``{"z": ...}`` instead of ``{"s": ...}`` in the checkpoint state).

Checked with the real langgraph package on the real database: a graph run with ~1,600
character messages reads back exactly (sync and async), the rows hold the deflated form,
values that do not shrink stay as they were, rows written in the previous format (nothing
deflated) still read, and a damaged deflated value raises ``InvalidInput``, never a zlib
error or a half-decoded value."""

from __future__ import annotations

import asyncio
import os
import zlib
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, HumanMessage, message_to_dict
from langgraph.graph import START, MessagesState, StateGraph

import shardstore
from shardstore.errors import InvalidInput
from shardstore.integrations import langgraph as lg
from shardstore.integrations.langgraph import ShardstoreSaver

TENANT = "acme"
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "tests",
    "read",
    "every",
    "row",
    "back",
]


def text(n: int, seed: int) -> str:
    """About ``n`` characters of compressible text, distinct per seed."""
    out: list[str] = []
    i = seed
    while sum(len(w) + 1 for w in out) < n:
        out.append(WORDS[i % len(WORDS)] + str(i % 7))
        i = i * 31 + 7
    return " ".join(out)[:n]


def build(checkpointer: Any) -> Any:
    """START -> a node answering each user message with one long AI message -> END."""

    def node(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(text(1600, n), id=f"a{n}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("node", node)
    graph.add_edge(START, "node")
    return graph.compile(checkpointer=checkpointer)


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def run(saver: ShardstoreSaver, thread: str, turns: int = 3) -> list[Any]:
    graph = build(saver)
    for i in range(turns):
        graph.invoke({"messages": [HumanMessage(text(1600, 1000 + i), id=f"u{i}")]}, cfg(thread))
    return [message_to_dict(m) for m in graph.get_state(cfg(thread)).values["messages"]]


def snapshot(saver: ShardstoreSaver, thread: str) -> list[Any]:
    """Every checkpoint of the thread with its pending writes, comparable."""
    return [
        (t.checkpoint["id"], repr(t.checkpoint["channel_values"]), repr(t.pending_writes))
        for t in saver.list(cfg(thread))
    ]


def rows(dsn: str, sql: str, *params: Any) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def test_writes_and_inputs_are_stored_deflated_and_read_back(
    store: shardstore.Store, dsn: str
) -> None:
    saver = ShardstoreSaver(store, tenant_id=TENANT)
    messages = run(saver, "t")
    assert len(messages) == 6
    # a fresh saver (nothing cached) reads the same
    fresh = ShardstoreSaver(store, tenant_id=TENANT)
    assert snapshot(fresh, "t") == snapshot(saver, "t")
    assert [message_to_dict(m) for m in build(fresh).get_state(cfg("t")).values["messages"]] == (
        messages
    )
    sid = saver.session_id("t")
    kinds = rows(
        dsn,
        "SELECT value_type, length(value) FROM shardstore.langgraph_writes"
        " WHERE session_id = %s AND channel = 'messages'",
        sid,
    )
    # each message write is deflated, or names its checkpoint's input (stored there once;
    # which of the two holds it depends on which LangGraph stored first)
    assert kinds and {k for k, _ in kinds} <= {"shardstore.deflate:msgpack", "shardstore.input"}
    assert all(size < 1200 for _, size in kinds)  # a 1.6 kB message, deflated
    states = [
        s
        for (s,) in rows(
            dsn, "SELECT state::text FROM shardstore.checkpoints WHERE session_id = %s", sid
        )
    ]
    assert len(states) == 9  # per turn: the input, then a step each side of the node
    inputs = rows(
        dsn,
        "SELECT state #> '{ch,__start__}' FROM shardstore.checkpoints"
        " WHERE session_id = %s AND state #> '{ch,__start__}' IS NOT NULL",
        sid,
    )
    # a run's input (a message of 1.6 kB) is stored deflated, or names its write
    assert len(inputs) == 3 and all(set(doc) & {"z", "w"} for (doc,) in inputs)


CP_ID = "1f000000-0000-6000-8000-0000000000{:02d}"


def input_checkpoint(n: int, start: Any) -> Any:
    """A LangGraph checkpoint holding a run's input, as LangGraph puts one."""
    return {
        "v": 4,
        "id": CP_ID.format(n),
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"__start__": start},
        "channel_versions": {"__start__": 1},
        "versions_seen": {},
        "updated_channels": None,
    }


@pytest.mark.parametrize("order", ["write first", "put first"])
def test_a_runs_input_and_its_write_are_stored_once(
    store: shardstore.Store, dsn: str, order: str
) -> None:
    saver = ShardstoreSaver(store, tenant_id=TENANT)
    msgs = [HumanMessage(text(1600, 3), id="u-in")]
    start = {"messages": msgs, "other": {"k": 1}}
    meta: Any = {"source": "input", "step": -1, "parents": {}}
    at: Any = {
        "configurable": {"thread_id": "in", "checkpoint_ns": "", "checkpoint_id": CP_ID.format(1)}
    }
    writes = [("messages", msgs), ("branch:to:node", None)]
    if order == "write first":
        saver.put_writes(at, writes, "task-in", "~__pregel_pull, __start__")
        saver.put(cfg("in"), input_checkpoint(1, start), meta, {"__start__": 1})
    else:
        saver.put(cfg("in"), input_checkpoint(1, start), meta, {"__start__": 1})
        saver.put_writes(at, writes, "task-in", "~__pregel_pull, __start__")
    for reader in (saver, ShardstoreSaver(store, tenant_id=TENANT)):
        got = reader.get_tuple(at)
        assert got is not None
        assert got.checkpoint["channel_values"] == {"__start__": start}
        assert got.pending_writes == [
            ("task-in", "messages", msgs),
            ("task-in", "branch:to:node", None),
        ]
    # the message's 1.6 kB are in the database once
    sizes = rows(
        dsn,
        "SELECT (SELECT sum(length(value)) FROM shardstore.langgraph_writes)"
        " + (SELECT sum(length(state::text)) FROM shardstore.checkpoints)",
    )
    assert sizes[0][0] < 1600


def test_an_input_naming_a_write_that_is_gone_raises_invalid_input(
    store: shardstore.Store, dsn: str
) -> None:
    saver = ShardstoreSaver(store, tenant_id=TENANT)
    msgs = [HumanMessage(text(1600, 4), id="u-gone")]
    at: Any = {
        "configurable": {"thread_id": "gone", "checkpoint_ns": "", "checkpoint_id": CP_ID.format(2)}
    }
    saver.put_writes(at, [("messages", msgs)], "task-in")
    saver.put(cfg("gone"), input_checkpoint(2, {"messages": msgs}), {"step": -1}, {})
    assert rows(dsn, "DELETE FROM shardstore.langgraph_writes RETURNING 1")
    with pytest.raises(InvalidInput, match="gone"):
        ShardstoreSaver(store, tenant_id=TENANT).get_tuple(at)


def test_values_that_do_not_shrink_stay_as_they_were(store: shardstore.Store, dsn: str) -> None:
    saver = ShardstoreSaver(store, tenant_id=TENANT)
    noise = os.urandom(3000)
    config = saver.put(
        {"configurable": {"thread_id": "raw", "checkpoint_ns": ""}},
        {
            "v": 4,
            "id": "1f000000-0000-6000-8000-000000000001",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"blob": noise, "small": b"x"},
            "channel_versions": {"blob": 1},
            "versions_seen": {},
            "updated_channels": None,
        },
        {"source": "input", "step": -1, "parents": {}},
        {"blob": 1},
    )
    saver.put_writes(config, [("blob", noise), ("note", "short")], "task-1")
    got = ShardstoreSaver(store, tenant_id=TENANT).get_tuple(config)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"blob": noise, "small": b"x"}
    assert got.pending_writes == [("task-1", "blob", noise), ("task-1", "note", "short")]
    kinds = [
        k for (k,) in rows(dsn, "SELECT value_type FROM shardstore.langgraph_writes ORDER BY idx")
    ]
    assert not any(k.startswith("shardstore.deflate:") for k in kinds)


def test_rows_of_the_previous_format_still_read(
    store: shardstore.Store, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the previous saver never deflated: the same code with deflating switched off writes
    # exactly its rows
    with monkeypatch.context() as m:
        m.setattr(lg, "_DEFLATE_FROM", 1 << 62)
        old = ShardstoreSaver(store, tenant_id=TENANT)
        messages = run(old, "old")
        before = snapshot(old, "old")
    kinds = [k for (k,) in rows(dsn, "SELECT value_type FROM shardstore.langgraph_writes")]
    assert kinds and not any(k.startswith("shardstore.deflate:") for k in kinds)
    states = [s for (s,) in rows(dsn, "SELECT state::text FROM shardstore.checkpoints")]
    assert not any('"z"' in s for s in states)
    new = ShardstoreSaver(store, tenant_id=TENANT)
    assert snapshot(new, "old") == before
    graph = build(new)
    assert [message_to_dict(m) for m in graph.get_state(cfg("old")).values["messages"]] == messages
    # and the thread goes on in the new format
    graph.invoke({"messages": [HumanMessage(text(1600, 7), id="u-next")]}, cfg("old"))
    assert len(graph.get_state(cfg("old")).values["messages"]) == len(messages) + 2


@pytest.mark.parametrize("where", ["write", "state"])
def test_a_damaged_deflated_value_raises_invalid_input(
    store: shardstore.Store, dsn: str, where: str
) -> None:
    saver = ShardstoreSaver(store, tenant_id=TENANT)
    if where == "write":
        run(saver, "bad", turns=1)  # the node's write of its answer is stored deflated
    else:
        # the input checkpoint stored before its task's write holds the messages deflated
        # (a graph run may store the two in either order: the second names the first)
        msgs = [HumanMessage(text(1600, 5), id="u-bad")]
        at: Any = {
            "configurable": {
                "thread_id": "bad",
                "checkpoint_ns": "",
                "checkpoint_id": CP_ID.format(3),
            }
        }
        meta: Any = {"source": "input", "step": -1, "parents": {}}
        saver.put(cfg("bad"), input_checkpoint(3, {"messages": msgs}), meta, {"__start__": 1})
        saver.put_writes(at, [("messages", msgs)], "task-in", "~__pregel_pull, __start__")
    sid = saver.session_id("bad")
    if where == "write":
        damaged = rows(
            dsn,
            "UPDATE shardstore.langgraph_writes SET value = '\\x00010203'::bytea"
            " WHERE session_id = %s AND value_type LIKE 'shardstore.deflate:%%' RETURNING 1",
            sid,
        )
    else:
        damaged = rows(
            dsn,
            "UPDATE shardstore.checkpoints SET state = jsonb_set(state, '{ch,__start__,z,1}',"
            " '\"AAEC\"') WHERE session_id = %s AND state #> '{ch,__start__,z}' IS NOT NULL"
            " RETURNING 1",
            sid,
        )
    assert damaged
    fresh = ShardstoreSaver(store, tenant_id=TENANT)
    with pytest.raises(InvalidInput, match="not deflated"):
        list(fresh.list(cfg("bad")))


def test_async_parity(dsn: str, store: shardstore.Store) -> None:
    messages = run(ShardstoreSaver(store, tenant_id=TENANT), "both")

    async def main() -> tuple[list[Any], list[Any]]:
        async with await shardstore.connect_async(dsn) as astore:
            saver = ShardstoreSaver(astore, tenant_id=TENANT)
            graph = build(saver)
            state = await graph.aget_state(cfg("both"))
            await graph.ainvoke({"messages": [HumanMessage(text(1600, 9), id="u-a")]}, cfg("both"))
            after = await graph.aget_state(cfg("both"))
            return (
                [message_to_dict(m) for m in state.values["messages"]],
                [message_to_dict(m) for m in after.values["messages"]],
            )

    read, after = asyncio.run(main())
    assert read == messages
    assert after[: len(messages)] == messages and len(after) == len(messages) + 2
    # the async writes read back through the sync saver, deflated rows included
    sync_read = build(ShardstoreSaver(store, tenant_id=TENANT)).get_state(cfg("both"))
    assert [message_to_dict(m) for m in sync_read.values["messages"]] == after


def test_inflating_is_bounded_and_refuses_what_the_saver_did_not_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardstore.integrations import langgraph as lg

    packed = zlib.compress(b"\x00" * 5000)
    assert lg._inflate(packed) == b"\x00" * 5000
    monkeypatch.setattr(lg, "_INFLATED_MAX", 4096)  # a bomb: more than the bound
    with pytest.raises(InvalidInput, match="inflating past 4096"):
        lg._inflate(packed)
    monkeypatch.undo()
    for damaged in (packed[:-3], packed + b"tail", b"not zlib at all"):
        with pytest.raises(InvalidInput):
            lg._inflate(damaged)
