"""ShardstoreSaver's deflated pending writes, and writes stored as their checkpoint's input,
behind a real PgBouncer in transaction mode (tests/pgbouncer.py): a run of long messages
stored through the pooler reads back exactly through it, from a fresh saver, sync and
async."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import HumanMessage, message_to_dict

import shardstore
from shardstore.integrations.langgraph import ShardstoreSaver
from tests.integrations.test_langgraph_deflate import TENANT, build, cfg, run, snapshot, text


def test_deflated_values_round_trip_behind_the_pooler(pooled_dsn: str, dsn: str) -> None:
    with shardstore.connect(pooled_dsn) as store:
        saver = ShardstoreSaver(store, tenant_id=TENANT)
        messages = run(saver, "pooled")
        fresh = ShardstoreSaver(store, tenant_id=TENANT)
        assert snapshot(fresh, "pooled") == snapshot(saver, "pooled")
        sid = saver.session_id("pooled")
    with psycopg.connect(dsn) as conn:
        kinds = [
            k
            for (k,) in conn.execute(
                "SELECT value_type FROM shardstore.langgraph_writes WHERE session_id = %s"
                " AND channel = 'messages'",
                (sid,),
            )
        ]
    # which of a run's input and its write holds the message depends on which LangGraph
    # stored first (they run side by side); neither is the serializer's plain bytes
    assert kinds and set(kinds) <= {"shardstore.deflate:msgpack", "shardstore.input"}

    async def main() -> list[Any]:
        async with await shardstore.connect_async(pooled_dsn) as astore:
            graph = build(ShardstoreSaver(astore, tenant_id=TENANT))
            await graph.ainvoke(
                {"messages": [HumanMessage(text(1600, 5), id="u-pooled")]}, cfg("pooled")
            )
            state = await graph.aget_state(cfg("pooled"))
            return [message_to_dict(m) for m in state.values["messages"]]

    after = asyncio.run(main())
    assert after[: len(messages)] == messages and len(after) == len(messages) + 2
