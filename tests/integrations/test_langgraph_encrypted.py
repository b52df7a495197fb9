"""LangGraph's ShardstoreSaver on a store connected with encryption=, with the real langgraph
package: a small graph (a tool call interrupted for approval, then resumed) round trips, the
database holds none of its text, a checkpoint blob or pending write copied to another thread
is refused with a typed error, plaintext injected where sealed values belong is refused,
copy_thread still reads, and the async methods do the same."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import HumanMessage, message_to_dict
from langgraph.types import Command

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import DecryptionFailed, EncryptionRequired, PlaintextRefused
from shardstore.integrations.langgraph import ShardstoreSaver
from tests.integrations.test_langgraph_checkpointer import build_graph

TENANT = "acme"
MARKER = "platypus-marker-6262"


@pytest.fixture(scope="module")
def module_dsn(server_dsn: str, _databases: Any) -> Iterator[str]:
    name = _databases.take()
    yield make_conninfo(server_dsn, dbname=name)
    _databases.drop_later([name])


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> LocalKeyProvider:
    root: Path = tmp_path_factory.mktemp("lg-keys")
    return LocalKeyProvider(root / "store", key_file=root / "kek")


@pytest.fixture(scope="module")
def enc_store(module_dsn: str, keys: LocalKeyProvider) -> Iterator[shardstore.Store]:
    store = shardstore.connect(module_dsn, encryption=keys)
    yield store
    store.close()


def cfg(thread: str) -> Any:
    """The config of a thread (a RunnableConfig)."""
    return {"configurable": {"thread_id": thread}}


def sql(dsn: str, statement: str, *params: Any) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def run_interrupted_graph(saver: ShardstoreSaver, thread: str) -> list[Any]:
    """A tool call interrupted for approval, then resumed: the final messages."""
    graph = build_graph(saver)
    first = graph.invoke({"messages": [HumanMessage(MARKER, id="h1")]}, cfg(thread))
    assert "__interrupt__" in first
    out = graph.invoke(Command(resume="yes"), cfg(thread))
    return list(out["messages"])


def test_round_trip_sealed_and_replays_refused(
    module_dsn: str, enc_store: shardstore.Store
) -> None:
    saver = ShardstoreSaver(enc_store, tenant_id=TENANT)
    messages = run_interrupted_graph(saver, "t-a")
    assert messages[-1].content == f"the answer is {MARKER}=yes"
    again = build_graph(ShardstoreSaver(enc_store, tenant_id=TENANT)).get_state(cfg("t-a"))
    assert [message_to_dict(m) for m in again.values["messages"]] == [
        message_to_dict(m) for m in messages
    ]
    assert len(list(saver.list(cfg("t-a")))) >= 5
    sid_a = saver.session_id("t-a")
    assert sid_a is not None
    assert [t.message for t in enc_store.history(sid_a)] == [message_to_dict(m) for m in messages]

    # nothing of the conversation is stored in the clear
    for table, column in (
        ("turn_buffer", "message::text"),
        ("checkpoints", "state::text"),
        ("langgraph_writes", "encode(value, 'escape')"),
    ):
        texts = [r[0] for r in sql(module_dsn, f"SELECT {column} FROM shardstore.{table}")]
        assert texts and not any(MARKER in t for t in texts), table

    # a second thread whose latest checkpoint has pending writes (interrupted, not resumed)
    graph = build_graph(saver)
    graph.invoke({"messages": [HumanMessage("other question", id="h1")]}, cfg("t-b"))
    sid_b = saver.session_id("t-b")
    latest_b = saver.get_tuple(cfg("t-b"))
    assert latest_b is not None and latest_b.pending_writes
    cid_b = latest_b.config["configurable"]["checkpoint_id"]
    shard_b = sql(
        module_dsn,
        "SELECT shard_id FROM shardstore.langgraph_checkpoints"
        " WHERE session_id = %s AND checkpoint_id = %s",
        sid_b,
        cid_b,
    )[0][0]

    # a checkpoint blob of thread a replayed onto thread b's latest checkpoint
    original = sql(
        module_dsn,
        "SELECT state::text FROM shardstore.checkpoints WHERE checkpoint_id = %s",
        shard_b,
    )[0][0]
    sql(
        module_dsn,
        "UPDATE shardstore.checkpoints SET state = (SELECT state FROM shardstore.checkpoints"
        " WHERE session_id = %s ORDER BY seq DESC LIMIT 1) WHERE checkpoint_id = %s",
        sid_a,
        shard_b,
    )
    fresh = ShardstoreSaver(enc_store, tenant_id=TENANT)
    with pytest.raises(DecryptionFailed):
        fresh.get_tuple(cfg("t-b"))
    with pytest.raises(DecryptionFailed):
        list(fresh.list(cfg("t-b")))
    # thread b's own older checkpoint state replayed onto its latest: bound to its checkpoint
    sql(
        module_dsn,
        "UPDATE shardstore.checkpoints SET state = (SELECT state FROM shardstore.checkpoints"
        " WHERE session_id = %s AND checkpoint_id <> %s ORDER BY seq LIMIT 1)"
        " WHERE checkpoint_id = %s",
        sid_b,
        shard_b,
        shard_b,
    )
    with pytest.raises(DecryptionFailed):
        fresh.get_tuple(cfg("t-b"))
    # plaintext where a sealed state belongs
    sql(
        module_dsn,
        "UPDATE shardstore.checkpoints SET state = %s::jsonb WHERE checkpoint_id = %s",
        '{"lg": 1, "cp": {"j": {}}, "ch": {}}',
        shard_b,
    )
    with pytest.raises(PlaintextRefused):
        fresh.get_tuple(cfg("t-b"))
    sql(
        module_dsn,
        "UPDATE shardstore.checkpoints SET state = %s::jsonb WHERE checkpoint_id = %s",
        original,
        shard_b,
    )
    assert fresh.get_tuple(cfg("t-b")) is not None

    # a pending write of thread b replayed onto another task's write of b, then plaintext
    writes = sql(
        module_dsn,
        "SELECT task_id, idx, value FROM shardstore.langgraph_writes WHERE session_id = %s"
        " AND checkpoint_id = %s ORDER BY task_id, idx",
        sid_b,
        cid_b,
    )
    task, idx, value = writes[0]
    sql(
        module_dsn,
        "UPDATE shardstore.langgraph_writes SET value = (SELECT value FROM"
        " shardstore.langgraph_writes WHERE session_id = %s LIMIT 1)"
        " WHERE session_id = %s AND task_id = %s AND idx = %s",
        sid_a,
        sid_b,
        task,
        idx,
    )
    with pytest.raises(DecryptionFailed):
        fresh.get_tuple(cfg("t-b"))
    sql(
        module_dsn,
        "UPDATE shardstore.langgraph_writes SET value = %s WHERE session_id = %s AND task_id = %s"
        " AND idx = %s",
        b'"plain"',
        sid_b,
        task,
        idx,
    )
    with pytest.raises(PlaintextRefused):
        fresh.get_tuple(cfg("t-b"))
    sql(
        module_dsn,
        "UPDATE shardstore.langgraph_writes SET value = %s WHERE session_id = %s AND task_id = %s"
        " AND idx = %s",
        value,
        sid_b,
        task,
        idx,
    )
    assert fresh.get_tuple(cfg("t-b")) is not None

    # a store without the key store refuses the sealed values, never returns them sealed
    with shardstore.connect(module_dsn) as plain, pytest.raises(EncryptionRequired):
        ShardstoreSaver(plain, tenant_id=TENANT).get_tuple(cfg("t-a"))

    # copy_thread: the copy reads the source's sealed values through its fork lineage
    saver.copy_thread("t-a", "t-copy")
    copied = saver.get_tuple(cfg("t-copy"))
    assert copied is not None
    assert [message_to_dict(m) for m in copied.checkpoint["channel_values"]["messages"]] == [
        message_to_dict(m) for m in messages
    ]


def test_async_parity(module_dsn: str, keys: LocalKeyProvider) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(module_dsn, encryption=keys)
        try:
            saver = ShardstoreSaver(store, tenant_id=TENANT)
            graph = build_graph(saver)
            first = await graph.ainvoke(
                {"messages": [HumanMessage(MARKER, id="h1")]}, cfg("async-t")
            )
            assert "__interrupt__" in first
            out = await graph.ainvoke(Command(resume="ok"), cfg("async-t"))
            assert out["messages"][-1].content == f"the answer is {MARKER}=ok"
            state = await graph.aget_state(cfg("async-t"))
            assert len(state.values["messages"]) == 4
            history = [s async for s in saver.alist(cfg("async-t"))]
            assert len(history) >= 5
        finally:
            await store.close()

    asyncio.run(main())
    texts = [r[0] for r in sql(module_dsn, "SELECT state::text FROM shardstore.checkpoints")]
    assert not any(MARKER in t for t in texts)
