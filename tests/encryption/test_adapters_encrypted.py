"""The framework adapters on a store connected with ``encryption=``: what each writes is
sealed (no marker in any table), and what it reads back is the plaintext, for every
read and rewrite path they have (LlamaIndex's set / delete / pop rewind and re-append
inside one transaction; ADK keeps state as checkpoints and facts; the Agent Framework's
workflow checkpoints and history; Pydantic AI's message history)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import shardstore
from tests.encryption.conftest import raw

MARKER = "lynx-ledger-7741"


def _no_marker_stored(dsn: str) -> None:
    tables = ("turn_buffer", "agent_history", "checkpoints", "facts", "chunk_summaries")
    for table in tables:
        rows = raw(
            dsn,
            f"SELECT count(*) FROM shardstore.{table} t WHERE t::text LIKE %s",
            (f"%{MARKER}%",),
        )
        assert rows[0][0] == 0, table


def test_llamaindex_chat_store_reads_and_rewrites_sealed_turns(
    enc_store: shardstore.Store, module_dsn: str
) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.llms import ChatMessage

    from shardstore.integrations.llamaindex import ShardstoreChatStore

    chats = ShardstoreChatStore(enc_store, tenant_id="li-enc")
    messages = [ChatMessage(role="user", content=f"{MARKER} {i}") for i in range(4)]
    chats.set_messages("k", messages)
    assert [m.content for m in chats.get_messages("k")] == [f"{MARKER} {i}" for i in range(4)]
    chats.add_message("k", ChatMessage(role="assistant", content=f"{MARKER} reply"))
    # set() with a changed history: a rewind and a re-append in one transaction
    chats.set_messages("k", [*messages[:2], ChatMessage(role="user", content=f"{MARKER} new")])
    assert [m.content for m in chats.get_messages("k")] == [
        f"{MARKER} 0",
        f"{MARKER} 1",
        f"{MARKER} new",
    ]
    deleted = chats.delete_message("k", 1)
    assert deleted is not None and deleted.content == f"{MARKER} 1"
    popped = chats.delete_last_message("k")
    assert popped is not None and popped.content == f"{MARKER} new"
    assert [m.content for m in chats.get_messages("k")] == [f"{MARKER} 0"]
    _no_marker_stored(module_dsn)


def test_pydantic_ai_history_round_trip(enc_store: shardstore.Store, module_dsn: str) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from shardstore.integrations.pydantic_ai import ShardstoreMessageHistory

    history = ShardstoreMessageHistory("chat", enc_store, tenant_id="pai-enc")
    agent = Agent(TestModel(custom_output_text=f"{MARKER} answer"))
    history.run_sync(agent, f"{MARKER} question")
    texts = str(history.messages())
    assert f"{MARKER} question" in texts and f"{MARKER} answer" in texts
    _no_marker_stored(module_dsn)


def test_adk_session_service_keeps_sealed_events_and_state(module_dsn: str, keys: Any) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    from shardstore.integrations.google_adk import ShardstoreSessionService

    async def main() -> None:
        store = await shardstore.connect_async(module_dsn, encryption=keys)
        try:
            service = ShardstoreSessionService(store, tenant_id="adk-enc")
            s = await service.create_session(
                app_name="app", user_id="u", state={"user:code": MARKER, "plan": MARKER}
            )
            event = Event(
                author="user",
                invocation_id="i",
                content=types.Content(role="user", parts=[types.Part(text=f"{MARKER} hi")]),
                actions=EventActions(state_delta={"step": f"{MARKER} 2"}),
            )
            await service.append_event(s, event)
            got = await service.get_session(app_name="app", user_id="u", session_id=s.id)
            assert got is not None
            assert got.state["user:code"] == MARKER and got.state["step"] == f"{MARKER} 2"
            assert got.events[-1].content is not None
            assert got.events[-1].content.parts[0].text == f"{MARKER} hi"
        finally:
            await store.close()

    asyncio.run(main())
    _no_marker_stored(module_dsn)


def test_agent_framework_history_and_workflow_checkpoints(module_dsn: str, keys: Any) -> None:
    pytest.importorskip("agent_framework")
    from agent_framework import Message
    from agent_framework._workflows._checkpoint import WorkflowCheckpoint

    from shardstore.integrations.agent_framework import (
        ShardstoreCheckpointStorage,
        ShardstoreHistoryProvider,
    )

    async def main() -> None:
        store = await shardstore.connect_async(module_dsn, encryption=keys)
        try:
            history = ShardstoreHistoryProvider(store, tenant_id="af-enc")
            await history.save_messages("c", [Message(role="user", contents=[f"{MARKER} hi"])])
            assert [m.text for m in await history.get_messages("c")] == [f"{MARKER} hi"]
            storage = ShardstoreCheckpointStorage(store, tenant_id="af-enc")
            cp = WorkflowCheckpoint(
                workflow_name="w", graph_signature_hash="h", state={"secret": MARKER}
            )
            await storage.save(cp)
            loaded = await storage.load(cp.checkpoint_id)
            assert loaded.state == {"secret": MARKER}
        finally:
            await store.close()

    asyncio.run(main())
    _no_marker_stored(module_dsn)
