"""The LangChain adapter (issue 12 §2): ShardstoreChatMessageHistory with the real
langchain_core, under RunnableWithMessageHistory with a fake chat model (offline), on a
real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

import shardstore
from shardstore.integrations.ids import external_session_id
from shardstore.integrations.langchain import ShardstoreChatMessageHistory

T = TypeVar("T")

# LangChain deprecated its chat-history API in 1.6.4 (removal in 2.0); this adapter serves
# the applications still on it
pytestmark = pytest.mark.filterwarnings(
    "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"
)


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def _count_sessions(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone()
        assert row is not None
        return int(row[0])


MESSAGES: list[BaseMessage] = [
    SystemMessage("be exact"),
    HumanMessage("what is 2+3? héllo \x00 \ud800", id="h1", additional_kwargs={"x": [1, -0.0]}),
    AIMessage(
        "",
        id="a1",
        tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call_1"}],
        usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
        response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
    ),
    ToolMessage("5", tool_call_id="call_1", artifact={"raw": [5]}, status="success", name="add"),
    AIMessage([{"type": "text", "text": "2 + 3 = 5"}], id="a2"),
    ChatMessage("looks right", role="critic"),
    FunctionMessage("legacy", name="f"),
    AIMessageChunk("a chunk", id="c1"),
    HumanMessage([{"type": "text", "text": "thanks"}, {"type": "image_url", "image_url": "x"}]),
]


def test_messages_round_trip_exactly(store: shardstore.Store) -> None:
    history = ShardstoreChatMessageHistory("chat-1", store, tenant_id="acme", subject_id="u1")
    assert isinstance(history, BaseChatMessageHistory)
    assert history.messages == []
    history.add_messages(MESSAGES[:4])
    history.add_message(MESSAGES[4])
    history.add_messages(MESSAGES[5:])
    got = history.messages
    assert got == MESSAGES
    assert [type(m) for m in got] == [type(m) for m in MESSAGES]
    assert got[2].tool_calls == MESSAGES[2].tool_calls  # type: ignore[attr-defined]
    assert got[3].tool_call_id == "call_1" and got[3].artifact == {"raw": [5]}  # type: ignore[attr-defined]
    sid = external_session_id("langchain", "acme", "chat-1")
    assert history.shardstore_session_id == sid
    info = store.session(sid)
    assert info.metadata == {"framework": "langchain", "external_id": "chat-1"}
    assert (info.tenant_id, info.subject_id, info.turn_count) == ("acme", "u1", len(MESSAGES))
    # one turn per message, in the message_to_dict form
    assert [t.message["type"] for t in store.tail(sid, n=3)] == [
        "function",
        "AIMessageChunk",
        "human",
    ]


def test_max_messages_keeps_tool_pairs_whole(store: shardstore.Store) -> None:
    full = ShardstoreChatMessageHistory("window", store, tenant_id="acme")
    full.add_messages(MESSAGES[:5])
    window = ShardstoreChatMessageHistory("window", store, tenant_id="acme", max_messages=2)
    # the newest 2 are the ToolMessage and the answer: the window drops the orphaned result
    assert window.messages == [MESSAGES[4]]
    wider = ShardstoreChatMessageHistory("window", store, tenant_id="acme", max_messages=3)
    assert wider.messages == MESSAGES[2:5]


def test_chat_format_turns_written_elsewhere_are_read(store: shardstore.Store) -> None:
    history = ShardstoreChatMessageHistory(str(uuid.uuid4()), store, tenant_id="acme")
    sid = history.shardstore_session_id
    store.create_session("acme", session_id=sid)
    store.append_turns(
        sid,
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "r"},
        ],
    )
    got = history.messages
    assert [type(m) for m in got] == [HumanMessage, AIMessage, ToolMessage]
    assert got[1].tool_calls[0]["name"] == "f"  # type: ignore[attr-defined]
    store.append_turn(sid, {"type": "function_call", "call_id": "x", "name": "f", "arguments": ""})
    with pytest.raises(shardstore.InvalidMessage, match="function_call"):
        _ = history.messages


def test_clear_empties_and_stays_usable(store: shardstore.Store) -> None:
    history = ShardstoreChatMessageHistory("clear", store, tenant_id="acme")
    history.add_messages(MESSAGES)
    history.clear()
    assert history.messages == []
    history.add_user_message("again")
    assert history.messages == [HumanMessage("again")]
    info = store.session(history.shardstore_session_id)
    assert info.turn_count == 1 and not info.purged


def test_reads_and_clear_of_an_unknown_session_create_nothing(
    store: shardstore.Store, dsn: str
) -> None:
    history = ShardstoreChatMessageHistory("never", store, tenant_id="acme")
    assert history.messages == []
    history.clear()
    history.add_messages([])
    assert run(history.aget_messages()) == []
    assert _count_sessions(dsn) == 0


# ---------------------------------------------------------------- RunnableWithMessageHistory


def _chain(
    make_history: Callable[[str], BaseChatMessageHistory], replies: list[BaseMessage]
) -> tuple[RunnableWithMessageHistory, list[list[BaseMessage]]]:
    seen: list[list[BaseMessage]] = []

    def record(prompt: Any) -> Any:
        seen.append(list(prompt.to_messages()))
        return prompt

    prompt = ChatPromptTemplate.from_messages(
        [("system", "be brief"), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = FakeMessagesListChatModel(responses=replies)
    chain = prompt | RunnableLambda(record) | model
    with_history = RunnableWithMessageHistory(
        chain,  # type: ignore[arg-type]
        make_history,
        input_messages_key="question",
        history_messages_key="history",
    )
    return with_history, seen


REPLIES: list[BaseMessage] = [
    AIMessage("5", id="r1"),
    AIMessage("You asked about 2+3.", id="r2"),
]


def test_runnable_with_message_history_sync(store: shardstore.Store) -> None:
    chain, seen = _chain(
        lambda sid: ShardstoreChatMessageHistory(sid, store, tenant_id="acme"), list(REPLIES)
    )
    config: Any = {"configurable": {"session_id": "conv-1"}}
    assert chain.invoke({"question": "what is 2+3?"}, config=config).content == "5"
    second = chain.invoke({"question": "what did I ask?"}, config=config)
    assert second.content == "You asked about 2+3."
    # the second model call saw the first exchange, in order
    assert [m.content for m in seen[1]] == ["be brief", "what is 2+3?", "5", "what did I ask?"]
    stored = ShardstoreChatMessageHistory("conv-1", store, tenant_id="acme").messages
    assert [type(m) for m in stored] == [HumanMessage, AIMessage, HumanMessage, AIMessage]
    assert [m.content for m in stored] == ["what is 2+3?", "5", "what did I ask?", second.content]
    # the oracle: LangChain's in-memory history under the same chain
    memory: dict[str, InMemoryChatMessageHistory] = {}
    oracle, oracle_seen = _chain(
        lambda sid: memory.setdefault(sid, InMemoryChatMessageHistory()), list(REPLIES)
    )
    oracle.invoke({"question": "what is 2+3?"}, config=config)
    oracle.invoke({"question": "what did I ask?"}, config=config)
    assert oracle_seen == seen
    assert memory["conv-1"].messages == stored


@pytest.mark.slow
def test_runnable_with_message_history_async(dsn: str) -> None:
    async def main() -> tuple[list[list[BaseMessage]], list[BaseMessage]]:
        store = await shardstore.connect_async(dsn)
        try:
            chain, seen = _chain(
                lambda sid: ShardstoreChatMessageHistory(sid, store, tenant_id="acme"),
                list(REPLIES),
            )
            config: Any = {"configurable": {"session_id": "conv-a"}}
            await chain.ainvoke({"question": "what is 2+3?"}, config=config)
            await chain.ainvoke({"question": "what did I ask?"}, config=config)
            history = ShardstoreChatMessageHistory("conv-a", store, tenant_id="acme")
            return seen, await history.aget_messages()
        finally:
            await store.close()

    seen, stored = run(main())
    assert [m.content for m in seen[1]] == ["be brief", "what is 2+3?", "5", "what did I ask?"]
    assert [m.content for m in stored] == [
        "what is 2+3?",
        "5",
        "what did I ask?",
        "You asked about 2+3.",
    ]


# ---------------------------------------------------------------- async parity


@pytest.mark.slow
def test_async_methods_match_sync_on_both_stores(store: shardstore.Store, dsn: str) -> None:
    def sync_side() -> list[Any]:
        h = ShardstoreChatMessageHistory("par-s", store, tenant_id="acme", max_messages=None)
        h.add_messages(MESSAGES)
        out: list[Any] = [h.messages]
        h.clear()
        out.append(h.messages)
        h.add_messages(MESSAGES[:2])
        out.append(h.messages)
        return out

    async def async_side(on: Any, name: str) -> list[Any]:
        h = ShardstoreChatMessageHistory(name, on, tenant_id="acme")
        await h.aadd_messages(MESSAGES)
        out: list[Any] = [await h.aget_messages()]
        await h.aclear()
        out.append(await h.aget_messages())
        await h.aadd_messages(MESSAGES[:2])
        out.append(await h.aget_messages())
        return out

    async def on_async_store() -> list[Any]:
        astore = await shardstore.connect_async(dsn)
        try:
            return await async_side(astore, "par-a")
        finally:
            await astore.close()

    expected = sync_side()
    assert expected == [MESSAGES, [], MESSAGES[:2]]
    assert run(async_side(store, "par-t")) == expected  # async methods on a sync Store
    assert run(on_async_store()) == expected


@pytest.mark.slow
def test_sync_methods_on_an_async_store_are_refused(dsn: str) -> None:
    async def main() -> None:
        astore = await shardstore.connect_async(dsn)
        try:
            h = ShardstoreChatMessageHistory("s", astore, tenant_id="acme")
            for call in (lambda: h.messages, lambda: h.add_messages(MESSAGES), h.clear):
                with pytest.raises(shardstore.ConfigurationError, match="AsyncStore"):
                    call()
        finally:
            await astore.close()

    run(main())
    assert _count_sessions(dsn) == 0


# ---------------------------------------------------------------- a model


TEXT = st.text(max_size=15)
MESSAGE = st.one_of(
    st.builds(HumanMessage, content=TEXT),
    st.builds(SystemMessage, content=TEXT),
    st.builds(
        lambda text, name, call_id: AIMessage(
            text, tool_calls=[{"name": name or "f", "args": {"t": text}, "id": call_id}]
        ),
        TEXT,
        st.text(alphabet="abc_", max_size=5),
        st.text(min_size=1, max_size=5),
    ),
    st.builds(lambda text, call_id: ToolMessage(text, tool_call_id=call_id), TEXT, TEXT),
)


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(st.one_of(st.lists(MESSAGE, max_size=4), st.none()), max_size=8))
def test_history_against_a_list_model(store: shardstore.Store, steps: list[Any]) -> None:
    history = ShardstoreChatMessageHistory(f"m-{uuid.uuid4()}", store, tenant_id="acme")
    model: list[BaseMessage] = []
    for step in steps:
        if step is None:
            history.clear()
            model.clear()
        else:
            history.add_messages(step)
            model.extend(step)
        assert history.messages == model


# ---------------------------------------------------------------- hostile input


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad",
    [
        HumanMessage("one message, not a list"),
        "a string",
        None,
        [{"role": "user", "content": "a dict"}],
        [HumanMessage("ok"), "not a message"],
        [HumanMessage("ok"), HumanMessage("nan", additional_kwargs={"x": float("nan")})],
        [HumanMessage("x" * (17 << 20))],
    ],
    ids=["message", "str", "none", "dict", "mixed", "nan", "too-large"],
)
def test_bad_messages_write_nothing(store: shardstore.Store, dsn: str, bad: Any) -> None:
    fresh = ShardstoreChatMessageHistory("fresh", store, tenant_id="acme")
    with pytest.raises(shardstore.InvalidInput):
        fresh.add_messages(bad)
    with pytest.raises(shardstore.InvalidInput):
        run(fresh.aadd_messages(bad))
    assert _count_sessions(dsn) == 0
    used = ShardstoreChatMessageHistory("used", store, tenant_id="acme")
    used.add_messages([HumanMessage("kept")])
    with pytest.raises(shardstore.InvalidInput):
        used.add_messages(bad)
    assert used.messages == [HumanMessage("kept")]


@pytest.mark.parametrize("bad", ["", None, 3, "a\x00", "\ud800", "x" * 600])
def test_bad_ids_and_tenants(store: shardstore.Store, bad: Any) -> None:
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreChatMessageHistory(bad, store, tenant_id="acme")
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreChatMessageHistory("s", store, tenant_id=bad)


@pytest.mark.parametrize("bad", [0, -1, True, "5", 1.5])
def test_bad_max_messages(store: shardstore.Store, bad: Any) -> None:
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreChatMessageHistory("s", store, tenant_id="acme", max_messages=bad)


@pytest.mark.parametrize(
    "bad",
    [None, "postgresql://x", FakeMessagesListChatModel(responses=[])],
    ids=["none", "dsn", "model"],
)
def test_wrong_store_type(bad: Any) -> None:
    with pytest.raises(shardstore.ConfigurationError, match="Store"):
        ShardstoreChatMessageHistory("s", bad, tenant_id="acme")


def test_a_uuid_session_of_another_tenant_is_refused(store: shardstore.Store) -> None:
    sid = store.create_session("them")
    mine = ShardstoreChatMessageHistory(str(sid), store, tenant_id="acme")
    with pytest.raises(shardstore.SessionConflict):
        mine.add_messages([HumanMessage("x")])
    assert store.session(sid).turn_count == 0


@pytest.mark.slow
def test_without_the_extra_the_import_names_the_pip_command() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['langchain_core'] = None\n"  # as if not installed
        "import shardstore\n"
        "try:\n"
        "    import shardstore.integrations.langchain\n"
        "except shardstore.MissingDependency as exc:\n"
        "    print(isinstance(exc, ImportError), exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("True ") and "shardstore[langchain]" in out.stdout
