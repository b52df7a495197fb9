"""The Google ADK session service and the Agent Framework adapters behind PgBouncer
(transaction pooling, nothing prepared): their transactions and snapshots hold."""

from __future__ import annotations

import asyncio

import pytest

import shardstore
from tests.pgbouncer import Pooler


def test_adk_session_service_behind_the_pooler(pgbouncer: Pooler, pooled_dsn: str) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.genai import types

    from shardstore.integrations.google_adk import ShardstoreSessionService

    async def main() -> None:
        store = await shardstore.connect_async(pooled_dsn)
        try:
            service = ShardstoreSessionService(store, tenant_id="acme")
            s = await service.create_session(app_name="a", user_id="u", state={"user:k": 1})
            for i in range(5):
                content = types.Content(role="user", parts=[types.Part(text=f"m{i}")])
                await service.append_event(s, Event(author="user", content=content))
            delta = {"own": 2, "app:x": 3}
            await service.append_event(
                s, Event(author="m", actions=EventActions(state_delta=delta))
            )
            got = await service.get_session(
                app_name="a",
                user_id="u",
                session_id=s.id,
                config=GetSessionConfig(num_recent_events=3),
            )
            assert got is not None and len(got.events) == 3
            assert got.state == {"own": 2, "app:x": 3, "user:k": 1}
        finally:
            await store.close()

    asyncio.run(main())


def test_agent_framework_behind_the_pooler(pgbouncer: Pooler, pooled_dsn: str) -> None:
    pytest.importorskip("agent_framework")
    from agent_framework import Message
    from agent_framework._workflows._checkpoint import WorkflowCheckpoint

    from shardstore.integrations.agent_framework import (
        ShardstoreCheckpointStorage,
        ShardstoreHistoryProvider,
    )

    async def main() -> None:
        store = await shardstore.connect_async(pooled_dsn)
        try:
            history = ShardstoreHistoryProvider(store, tenant_id="acme", max_messages=2)
            await history.save_messages(
                "c", [Message(role="user", contents=[f"m{i}"]) for i in range(4)]
            )
            assert [m.text for m in await history.get_messages("c")] == ["m2", "m3"]
            storage = ShardstoreCheckpointStorage(store, tenant_id="acme")
            cp = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", state={"k": [1]})
            await storage.save(cp)
            assert (await storage.load(cp.checkpoint_id)).state == {"k": [1]}
            assert await storage.list_checkpoint_ids(workflow_name="w") == [cp.checkpoint_id]
        finally:
            await store.close()

    asyncio.run(main())
