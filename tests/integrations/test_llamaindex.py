"""The LlamaIndex adapter (issue 38): ShardstoreChatStore, a BaseChatStore over shardstore
sessions, with the real llama-index-core: ChatMemoryBuffer and a SimpleChatEngine on its
MockLLM (offline), every method against SimpleChatStore as the oracle, on a real PostgreSQL.

One database and one store serve the module (each test has its own keys), so the module's
setup is paid once."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from llama_index.core.base.llms.types import (
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.storage.chat_store import BaseChatStore, SimpleChatStore
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.history import pairing
from shardstore.integrations.ids import external_session_id
from shardstore.integrations.llamaindex import ShardstoreChatStore
from shardstore.schema import rls
from tests.tenancy import drop_tenant_role, make_tenant_role

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def module_dsn(server_dsn: str, _databases: Any) -> Iterator[str]:
    name = _databases.take()
    yield make_conninfo(server_dsn, dbname=name)
    _databases.drop_later([name])


@pytest.fixture(scope="module")
def mstore(module_dsn: str) -> Iterator[shardstore.Store]:
    with shardstore.connect(module_dsn) as store:
        yield store


@pytest.fixture
def chat_store(mstore: shardstore.Store) -> ShardstoreChatStore:
    """A chat store of a tenant of its own, so get_keys sees this test's keys only."""
    return ShardstoreChatStore(mstore, tenant_id=f"t-{uuid.uuid4().hex[:8]}")


def _key() -> str:
    return f"user-{uuid.uuid4().hex[:10]}"


def _words(text: str) -> list[str]:
    return text.split()


def _call(call_id: str) -> ChatMessage:
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content="",
        additional_kwargs={
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ]
        },
    )


def _result(call_id: str) -> ChatMessage:
    return ChatMessage(
        role=MessageRole.TOOL, content="5", additional_kwargs={"tool_call_id": call_id}
    )


MESSAGES: list[ChatMessage] = [
    ChatMessage(role=MessageRole.SYSTEM, content="be exact"),
    ChatMessage(
        role="user", content="what is 2+3? héllo \x00 \ud800", additional_kwargs={"x": -0.0}
    ),
    _call("call_1"),
    _result("call_1"),
    ChatMessage(
        role=MessageRole.ASSISTANT,
        blocks=[
            ThinkingBlock(content="add them"),
            ToolCallBlock(
                tool_call_id="call_2", tool_name="add", tool_kwargs={"a": 2, "b": 10**30}
            ),
        ],
    ),
    ChatMessage(role=MessageRole.TOOL, content="5", additional_kwargs={"tool_call_id": "call_2"}),
    ChatMessage(
        role="user",
        blocks=[
            TextBlock(text="and this?"),
            ImageBlock(image=b"\x89PNG\x00", image_mimetype="image/png"),
        ],
    ),
    ChatMessage(role=MessageRole.ASSISTANT, content="2 + 3 = 5"),
]


# ---------------------------------------------------------------- the memory and an engine


def _engine(chat_store: BaseChatStore, key: str) -> tuple[Any, MockLLMWithChatMemoryOfLastCall]:
    llm = MockLLMWithChatMemoryOfLastCall(max_tokens=3)
    memory = ChatMemoryBuffer.from_defaults(
        chat_store=chat_store, chat_store_key=key, token_limit=40, tokenizer_fn=_words
    )
    return SimpleChatEngine.from_defaults(llm=llm, memory=memory), llm


PROMPTS = ("where is my refund?", "it was order 42", "any news?", "thanks, bye")


def test_a_chat_engine_keeps_its_memory_here_as_in_simple_chat_store(
    chat_store: ShardstoreChatStore, mstore: shardstore.Store
) -> None:
    key = _key()
    engine, llm = _engine(chat_store, key)
    oracle_store = SimpleChatStore()
    oracle, oracle_llm = _engine(oracle_store, key)
    for prompt in PROMPTS:
        assert engine.chat(prompt).response == oracle.chat(prompt).response
        # the model saw the same history (ChatMemoryBuffer's token window over our store)
        assert llm.last_chat_messages == oracle_llm.last_chat_messages
    assert chat_store.get_messages(key) == oracle_store.get_messages(key)
    assert len(chat_store.get_messages(key)) == 2 * len(PROMPTS)
    # one turn per message, ChatMessage's JSON as it is
    sid = external_session_id("llamaindex", chat_store.tenant_id, key)
    assert chat_store.session_id(key) == sid
    turns = mstore.tail(sid, n=100)
    assert turns[0].message == {
        "role": "user",
        "additional_kwargs": {},
        "blocks": [{"block_type": "text", "text": PROMPTS[0]}],
    }
    assert mstore.session(sid).metadata == {"framework": "llamaindex", "external_id": key}
    engine.reset()  # ChatMemoryBuffer.reset: the key emptied, the session kept
    assert chat_store.get_messages(key) == [] and not mstore.session(sid).purged


def test_async_engine_on_both_stores(chat_store: ShardstoreChatStore, module_dsn: str) -> None:
    key = _key()
    oracle_store = SimpleChatStore()
    oracle, _ = _engine(oracle_store, key)
    for prompt in PROMPTS[:2]:
        oracle.chat(prompt)
    expected = oracle_store.get_messages(key)

    async def chat(store: Any) -> list[ChatMessage]:
        chats = ShardstoreChatStore(store, tenant_id=chat_store.tenant_id)
        engine, _ = _engine(chats, key)
        for prompt in PROMPTS[:2]:
            await engine.achat(prompt)
        got = await chats.aget_messages(key)
        assert await chats.adelete_messages(key) == got
        return got

    async def on_async_store() -> list[ChatMessage]:
        astore = await shardstore.connect_async(module_dsn)
        try:
            refused = ShardstoreChatStore(astore, tenant_id="acme")
            with pytest.raises(shardstore.ConfigurationError, match="AsyncStore"):
                refused.get_messages("k")
            with pytest.raises(shardstore.ConfigurationError, match="AsyncStore"):
                refused.get_keys()
            return await chat(astore)
        finally:
            await astore.close()

    assert run(chat(chat_store.store)) == expected  # async methods on a sync Store
    assert run(on_async_store()) == expected


# ---------------------------------------------------------------- every method


def test_messages_round_trip_exactly(chat_store: ShardstoreChatStore) -> None:
    key = _key()
    chat_store.add_messages(key, MESSAGES[:3])
    for message in MESSAGES[3:]:
        chat_store.add_message(key, message)
    got = chat_store.get_messages(key)
    assert got == MESSAGES
    assert [m.role for m in got] == [m.role for m in MESSAGES]
    assert got[4].blocks == MESSAGES[4].blocks
    assert str(got[1].additional_kwargs["x"]) == "-0.0"


def _apply(store: BaseChatStore, step: tuple[Any, ...]) -> Any:
    name, *args = step
    return getattr(store, name)(*args)


async def _aapply(store: BaseChatStore, step: tuple[Any, ...]) -> Any:
    name, *args = step
    method: Any = {
        "set_messages": store.aset_messages,
        "get_messages": store.aget_messages,
        "add_message": store.async_add_message,
        "delete_messages": store.adelete_messages,
        "delete_message": store.adelete_message,
        "delete_last_message": store.adelete_last_message,
        "get_keys": store.aget_keys,
    }[name]
    return await method(*args)


def _steps(a: str, b: str) -> list[tuple[Any, ...]]:
    m = MESSAGES
    return [
        ("get_messages", a),
        ("delete_messages", a),
        ("delete_message", a, 0),
        ("delete_last_message", a),
        ("get_keys",),
        ("add_message", a, m[0]),
        ("set_messages", b, m[:4]),
        ("get_keys",),
        ("set_messages", b, m[:2] + m[5:]),  # a shared prefix, then another tail
        ("get_messages", b),
        ("delete_message", b, 1),
        ("delete_message", b, 9),
        ("get_messages", b),
        ("delete_last_message", b),
        ("add_message", b, m[7]),
        ("set_messages", b, m[:2]),
        ("get_messages", b),
        ("delete_messages", a),
        ("get_keys",),
        ("set_messages", a, []),
        ("get_messages", a),
        ("delete_message", b, 0),
        ("delete_message", b, 0),
        ("delete_last_message", b),
        ("get_messages", b),
        ("get_keys",),
    ]


def test_every_method_matches_simple_chat_store(chat_store: ShardstoreChatStore) -> None:
    a, b = _key(), _key()
    oracle = SimpleChatStore()
    for step in _steps(a, b):
        try:
            expected = _apply(oracle, step)
        except IndexError:  # SimpleChatStore pops an emptied key's empty list; we say None
            assert step[0] == "delete_last_message"
            expected = None
        got = _apply(chat_store, step)
        if step[0] == "delete_messages" and expected is None:
            assert got in (None, []), step  # a key never written / emptied: nothing removed
        elif step[0] == "get_keys":
            assert got == [k for k in expected if oracle.get_messages(k)], step
        else:
            assert got == expected, step


def test_every_async_method_matches_the_sync_ones(
    chat_store: ShardstoreChatStore, module_dsn: str
) -> None:
    a, b = _key(), _key()
    expected = [_apply(chat_store, step) for step in _steps(a, b)]

    async def on(store: Any) -> list[Any]:
        chats = ShardstoreChatStore(store, tenant_id=f"t-{uuid.uuid4().hex[:8]}")
        return [await _aapply(chats, step) for step in _steps(a, b)]

    async def on_async_store() -> list[Any]:
        astore = await shardstore.connect_async(module_dsn)
        try:
            return await on(astore)
        finally:
            await astore.close()

    assert run(on(chat_store.store)) == expected
    assert run(on_async_store()) == expected


def test_set_messages_keeps_the_matching_prefix(
    chat_store: ShardstoreChatStore, mstore: shardstore.Store
) -> None:
    key = _key()
    chat_store.set_messages(key, MESSAGES[:5])
    sid = chat_store.session_id(key)
    before = mstore.tail(sid, n=100)
    chat_store.set_messages(key, MESSAGES[:3] + MESSAGES[6:])
    after = mstore.tail(sid, n=100)
    assert after[:3] == before[:3]  # the same turns: not rewritten
    assert [t.turn_seq for t in after] == [0, 1, 2, 3, 4]
    assert chat_store.get_messages(key) == MESSAGES[:3] + MESSAGES[6:]
    chat_store.set_messages(key, MESSAGES[:3] + MESSAGES[6:])  # the same list: no write
    assert mstore.tail(sid, n=100) == after


def test_windows_keep_tool_pairs_whole(
    chat_store: ShardstoreChatStore, mstore: shardstore.Store
) -> None:
    key = _key()
    chat_store.add_messages(key, MESSAGES)
    for n in range(1, len(MESSAGES) + 1):
        windowed = ShardstoreChatStore(mstore, tenant_id=chat_store.tenant_id, max_messages=n)
        window = windowed.get_messages(key)
        assert window == MESSAGES[len(MESSAGES) - len(window) :]
        assert window and window[0].role != MessageRole.TOOL
        assert len(window) == (n - 1 if n in (3, 5) else n)  # a cut-off result went
    sid = chat_store.session_id(key)
    for n in (3, 5):
        turns = mstore.tail(sid, n=n)
        assert len(turns) == n - 1 and not pairing.is_tool_result(turns[0].message)


# ---------------------------------------------------------------- purge, RLS, search


def test_a_purge_removes_the_key(
    chat_store: ShardstoreChatStore, mstore: shardstore.Store, module_dsn: str
) -> None:
    key = _key()
    chat_store.add_messages(key, MESSAGES[:2])
    sid = chat_store.session_id(key)
    mstore.purge_session(sid)
    with psycopg.connect(module_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.turns WHERE session_id = %s", (sid,)
        ).fetchone()
    assert row == (0,)
    assert chat_store.get_keys() == []
    fresh = ShardstoreChatStore(mstore, tenant_id=chat_store.tenant_id)
    with pytest.raises(shardstore.SessionPurged):
        fresh.get_messages(key)
    with pytest.raises(shardstore.SessionPurged):
        fresh.add_message(key, MESSAGES[0])


def test_a_tenant_cannot_reach_another_tenants_keys(
    chat_store: ShardstoreChatStore, module_dsn: str
) -> None:
    key = _key()
    chat_store.add_messages(key, MESSAGES[:2])
    sid = chat_store.session_id(key)
    role = make_tenant_role(module_dsn)
    conn = psycopg.connect(module_dsn, autocommit=True)
    try:
        conn.execute(f'SET ROLE "{role}"')
        beta = rls.connect_tenant(conn, tenant="beta")
        # beta names the owner's tenant and key, and the session by its UUID
        for claimed, claimed_key in (
            (ShardstoreChatStore(beta, tenant_id=chat_store.tenant_id), key),
            (ShardstoreChatStore(beta, tenant_id="beta"), str(sid)),
        ):
            assert claimed.get_messages(claimed_key) == []
            assert claimed.get_keys() == []
            assert claimed.delete_messages(claimed_key) is None
            assert claimed.delete_last_message(claimed_key) is None
            with pytest.raises(shardstore.ShardstoreError):
                claimed.set_messages(claimed_key, [MESSAGES[0]])
            with pytest.raises(shardstore.ShardstoreError):
                claimed.add_message(claimed_key, MESSAGES[0])
    finally:
        conn.close()
        drop_tenant_role(module_dsn, role)
    assert chat_store.get_messages(key) == MESSAGES[:2]


def test_search_finds_a_turn_written_through_the_adapter(
    chat_store: ShardstoreChatStore, mstore: shardstore.Store
) -> None:
    key = _key()
    chat_store.add_message(key, ChatMessage(role="user", content="the quokkaparcel is lost"))
    hits = mstore.search("quokkaparcel", session_id=chat_store.session_id(key), mode="text")
    assert hits and hits[0].turns[0].message["blocks"][0]["text"] == "the quokkaparcel is lost"


# ---------------------------------------------------------------- hostile input


def _deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


class _Opaque:
    pass


HOSTILE: list[tuple[str, Any, type[Exception]]] = [
    ("str", "a string", shardstore.InvalidMessage),
    ("dict", {"role": "user", "content": "a dict"}, shardstore.InvalidMessage),
    (
        "nan",
        ChatMessage(role="user", content="x", additional_kwargs={"n": float("nan")}),
        shardstore.InvalidMessage,
    ),
    (
        "inf",
        ChatMessage(role="user", content="x", additional_kwargs={"n": [float("inf")]}),
        shardstore.InvalidMessage,
    ),
    (
        "deep",
        ChatMessage(role="user", content="x", additional_kwargs={"d": _deep(300)}),
        shardstore.InvalidMessage,
    ),
    (
        "opaque",
        ChatMessage(role="user", content="x", additional_kwargs={"o": _Opaque()}),
        shardstore.InvalidMessage,
    ),
    ("too-large", ChatMessage(role="user", content="x" * (17 << 20)), shardstore.TurnTooLarge),
]


@pytest.mark.parametrize(("bad", "error"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_bad_messages_write_nothing(
    chat_store: ShardstoreChatStore, mstore: shardstore.Store, bad: Any, error: type
) -> None:
    fresh = _key()
    with pytest.raises(error):
        chat_store.add_message(fresh, bad)
    with pytest.raises(error):
        chat_store.set_messages(fresh, [MESSAGES[0], bad])
    with pytest.raises(error):
        run(chat_store.async_add_message(fresh, bad))
    assert chat_store.get_keys() == []
    assert not mstore.sessions(external_id=fresh)
    used = _key()
    chat_store.add_messages(used, MESSAGES[:2])
    with pytest.raises(error):
        chat_store.set_messages(used, [MESSAGES[0], bad])
    with pytest.raises(error):
        run(chat_store.aset_messages(used, [bad]))
    assert chat_store.get_messages(used) == MESSAGES[:2]


def test_bad_arguments_are_refused(chat_store: ShardstoreChatStore) -> None:
    key = _key()
    chat_store.add_messages(key, MESSAGES[:2])
    for idx in (-1, True, "0", 1.0, None):
        with pytest.raises(shardstore.InvalidInput):
            chat_store.delete_message(key, idx)  # type: ignore[arg-type]
        with pytest.raises(shardstore.InvalidInput):
            run(chat_store.adelete_message(key, idx))  # type: ignore[arg-type]
    assert chat_store.delete_message(key, 2**70) is None
    for messages in (MESSAGES[0], "x", None, {"a": 1}):
        with pytest.raises(shardstore.InvalidInput):
            chat_store.set_messages(key, messages)  # type: ignore[arg-type]
    assert chat_store.get_messages(key) == MESSAGES[:2]
    for bad_key in ("", None, 3, "a\x00", "x" * 600):
        with pytest.raises(shardstore.InvalidInput):
            chat_store.get_messages(bad_key)  # type: ignore[arg-type]
        with pytest.raises(shardstore.InvalidInput):
            chat_store.add_message(bad_key, MESSAGES[0])  # type: ignore[arg-type]
    for tenant in ("", None, 3, "a\x00"):
        with pytest.raises(shardstore.InvalidInput):
            ShardstoreChatStore(chat_store.store, tenant_id=tenant)  # type: ignore[arg-type]
    for limit in (0, -1, True, "5", 2**64):
        with pytest.raises(shardstore.InvalidInput):
            ShardstoreChatStore(chat_store.store, tenant_id="t", max_messages=limit)  # type: ignore[arg-type]
    for store in (None, "postgresql://x", SimpleChatStore()):
        with pytest.raises(shardstore.ConfigurationError, match="Store"):
            ShardstoreChatStore(store, tenant_id="t")  # type: ignore[arg-type]
    assert chat_store.get_keys() == [key]


def test_turns_that_are_not_chat_messages_are_refused_on_read(
    chat_store: ShardstoreChatStore, mstore: shardstore.Store
) -> None:
    key = str(uuid.uuid4())
    sid = chat_store.session_id(key)
    mstore.create_session(chat_store.tenant_id, session_id=sid)
    mstore.append_turn(sid, {"role": "user", "content": "written by the CLI"})
    assert chat_store.get_messages(key) == [ChatMessage(role="user", content="written by the CLI")]
    mstore.append_turn(sid, {"type": "function_call", "call_id": "c", "name": "f", "arguments": ""})
    with pytest.raises(shardstore.InvalidMessage, match="function_call"):
        chat_store.get_messages(key)
    mstore.append_turn(sid, {"role": "critic", "content": "x"})
    with pytest.raises(shardstore.InvalidMessage, match="critic"):
        chat_store.delete_last_message(key)


# ---------------------------------------------------------------- the docs page, the extra


def test_the_docs_example_runs(module_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    page = (ROOT / "docs" / "integrations" / "llamaindex.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.DOTALL | re.MULTILINE)
    assert blocks and len(blocks[0].strip().splitlines()) <= 10
    monkeypatch.setenv("SHARDSTORE_DSN", module_dsn)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(blocks[0], "docs/integrations/llamaindex.md", "exec"), namespace)
    assert isinstance(namespace["chat_store"], ShardstoreChatStore)
    assert len(namespace["memory"].get_all()) >= 2  # the question and its answer
    namespace["store"].close()


def _import_fresh(module: str, blocked: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import ``module`` again with every ``blocked`` module made unimportable (as if not
    installed); the test's module objects are put back afterwards."""
    import shardstore.integrations as package

    for name in [m for m in sys.modules if m == blocked or m.startswith(blocked + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, blocked, None)
    monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(package, module.rsplit(".", 1)[1], sys.modules.get(module), raising=False)
    return importlib.import_module(module)


def test_the_adapter_imports_without_pydantic_ai(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = _import_fresh("shardstore.integrations.llamaindex", "pydantic_ai", monkeypatch)
    assert fresh.ShardstoreChatStore is not ShardstoreChatStore


def test_without_the_extra_the_import_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(shardstore.MissingDependency, match=re.escape("shardstore[llamaindex]")):
        _import_fresh("shardstore.integrations.llamaindex", "llama_index", monkeypatch)
