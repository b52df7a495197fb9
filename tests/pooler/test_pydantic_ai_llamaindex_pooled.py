"""The Pydantic AI and LlamaIndex adapters behind a real PgBouncer in transaction mode
(tests/pgbouncer.py), sync and async, and the round trips of their hot paths counted on the
wire (tests/wire.py), as tests/pooler/test_round_trips.py counts the store's.

The counts (each call warmed past psycopg's prepare threshold, then counted three times):

| call | round trips |
|---|---|
| pydantic-ai ``messages()``, whole history or a ``max_tokens`` window | 1 |
| pydantic-ai ``add_messages(result.new_messages())`` | 1 |
| pydantic-ai ``run_sync(agent, prompt)`` (read, the run, append) | 2 |
| pydantic-ai first call of a new history object (the owner check) | +1, once |
| llamaindex ``get_messages`` (whole or ``max_messages``), ``add_message`` | 1 each |
| llamaindex ``ChatMemoryBuffer.put`` / ``.get`` | 1 each |
| llamaindex ``SimpleChatEngine.chat`` (put, get, put) | 3 |
| llamaindex ``set_messages`` of the list already stored | 1 |
| llamaindex ``delete_last_message`` (a transaction: BEGIN, lock, read, rewind, COMMIT) | 5 |
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage, MockLLM
from llama_index.core.memory import ChatMemoryBuffer
from psycopg.conninfo import make_conninfo
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models.test import TestModel

import shardstore
from shardstore.integrations.llamaindex import ShardstoreChatStore
from shardstore.integrations.pydantic_ai import ShardstoreMessageHistory
from tests.pgbouncer import Pooler
from tests.wire import WireProxy

# no measured call seals a chunk (tests/pooler/test_round_trips.py's settings)
SETTINGS: dict[str, Any] = {"background_fold": False, "pool_max_size": 1, "chunk_tokens": 60_000}
WARM = 6  # past psycopg's default prepare_threshold (5)


@pytest.fixture(scope="module")
def module_dsn(server_dsn: str, _databases: Any) -> Iterator[str]:
    name = _databases.take()
    yield make_conninfo(server_dsn, dbname=name)
    _databases.drop_later([name])


def _agent() -> Agent[None, str]:
    agent = Agent(TestModel(), instructions="be brief")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


def _words(text: str) -> list[str]:
    return text.split()


def _engine(chat_store: ShardstoreChatStore, key: str) -> Any:
    memory = ChatMemoryBuffer.from_defaults(
        chat_store=chat_store, chat_store_key=key, token_limit=100_000, tokenizer_fn=_words
    )
    return SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=4), memory=memory)


# ---------------------------------------------------------------- behind PgBouncer


def test_both_adapters_behind_the_pooler(pgbouncer: Pooler, module_dsn: str) -> None:
    pooled = pgbouncer.dsn(module_dsn)
    agent = _agent()
    with shardstore.connect(pooled, pool_max_size=2) as store:
        assert store.connector.pooler is True
        history = ShardstoreMessageHistory("p-sync", store, tenant_id="acme", max_tokens=4000)
        first = history.run_sync(agent, "weather?")
        second = history.run_sync(agent, "again?")
        assert history.messages() == second.all_messages()
        assert second.all_messages()[: len(first.all_messages())] == first.all_messages()
        chats = ShardstoreChatStore(store, tenant_id="acme")
        engine = _engine(chats, "l-sync")
        engine.chat("hello")
        engine.chat("more")
        chats.set_messages("l-sync", chats.get_messages("l-sync")[:3])
        assert [m.content for m in chats.get_messages("l-sync")][:1] == ["hello"]
        assert chats.delete_message("l-sync", 0) is not None
        assert len(chats.get_messages("l-sync")) == 2
        assert chats.get_keys() == ["l-sync"]

    async def on_async_store() -> tuple[int, int]:
        astore = await shardstore.connect_async(pooled, pool_max_size=2)
        try:
            ahistory = ShardstoreMessageHistory("p-async", astore, tenant_id="acme")
            await ahistory.run(agent, "weather?")
            await ahistory.run(agent, "again?")
            achats = ShardstoreChatStore(astore, tenant_id="acme")
            aengine = _engine(achats, "l-async")
            await aengine.achat("hello")  # ChatMemoryBuffer.aget: a sync call, on the loop
            await aengine.achat("more")
            await achats.adelete_last_message("l-async")
            return len(await ahistory.amessages()), len(await achats.aget_messages("l-async"))
        finally:
            await astore.close()

    assert asyncio.run(on_async_store()) == (len(second.all_messages()), 3)


# ---------------------------------------------------------------- round trips


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


EXPECTED = {
    "pydantic-ai messages()": 1,
    "pydantic-ai messages() within max_tokens": 1,
    "pydantic-ai add_messages": 1,
    "pydantic-ai run_sync": 2,
    "pydantic-ai amessages() on a Store": 1,
    "llamaindex get_messages": 1,
    "llamaindex get_messages within max_messages": 1,
    "llamaindex add_message": 1,
    "llamaindex ChatMemoryBuffer.put": 1,
    "llamaindex ChatMemoryBuffer.get": 1,
    "llamaindex SimpleChatEngine.chat": 3,
    "llamaindex set_messages (unchanged)": 1,
    "llamaindex delete_last_message": 5,
}


def _add_then_pop(chats: ShardstoreChatStore, message: ChatMessage) -> None:
    chats.add_message("rt-pop", message)
    assert chats.delete_last_message("rt-pop") == message


def test_round_trips_of_the_hot_paths(module_dsn: str) -> None:
    agent = _agent()
    prompt = [ModelRequest(parts=[UserPromptPart("x")])]
    with WireProxy(module_dsn) as proxy, shardstore.connect(proxy.dsn(), **SETTINGS) as store:
        history = ShardstoreMessageHistory("rt", store, tenant_id="acme")
        window = ShardstoreMessageHistory("rt", store, tenant_id="acme", max_tokens=2000)
        history.run_sync(agent, "weather?")
        chats = ShardstoreChatStore(store, tenant_id="acme")
        windowed = ShardstoreChatStore(store, tenant_id="acme", max_messages=4)
        memory = ChatMemoryBuffer.from_defaults(
            chat_store=chats, chat_store_key="rt", token_limit=100_000, tokenizer_fn=_words
        )
        engine = _engine(chats, "rt-engine")
        message = ChatMessage(role="user", content="x")
        chats.add_message("rt", message)
        calls: dict[str, Callable[[], Any]] = {
            "pydantic-ai messages()": history.messages,
            "pydantic-ai messages() within max_tokens": window.messages,
            "pydantic-ai add_messages": lambda: history.add_messages(prompt),
            "pydantic-ai run_sync": lambda: window.run_sync(agent, "hi"),
            "pydantic-ai amessages() on a Store": lambda: asyncio.run(window.amessages()),
            "llamaindex get_messages": lambda: chats.get_messages("rt"),
            "llamaindex get_messages within max_messages": lambda: windowed.get_messages("rt"),
            "llamaindex add_message": lambda: chats.add_message("rt", message),
            "llamaindex ChatMemoryBuffer.put": lambda: memory.put(message),
            "llamaindex ChatMemoryBuffer.get": memory.get,
            "llamaindex SimpleChatEngine.chat": lambda: engine.chat("hello"),
            "llamaindex set_messages (unchanged)": lambda: chats.set_messages(
                "rt-set", [message, message]
            ),
            "llamaindex delete_last_message": lambda: _add_then_pop(chats, message),
        }
        seen = _counts(proxy, calls)
        # delete_last_message is counted with the add_message (1) that gives it an item
        seen["llamaindex delete_last_message"] = [
            n - 1 for n in seen["llamaindex delete_last_message"]
        ]
        assert seen == {name: [n] * 3 for name, n in EXPECTED.items()}
        # a new history object checks the session's owner once: one more round trip
        fresh = ShardstoreMessageHistory("rt", store, tenant_id="acme")
        with proxy.counting() as n:
            fresh.messages()
        with proxy.counting() as again:
            fresh.messages()
        assert (n[0], again[0]) == (2, 1)
        fresh_chats = ShardstoreChatStore(store, tenant_id="acme")
        with proxy.counting() as n:
            fresh_chats.get_messages(f"new-{uuid.uuid4().hex[:6]}")  # no session: no read
        assert n[0] == 1
