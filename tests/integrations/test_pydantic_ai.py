"""The Pydantic AI adapter (issue 38): ShardstoreMessageHistory with the real pydantic_ai,
its offline TestModel and FunctionModel running real Agent.run / run_sync with
message_history, on a real PostgreSQL.

One database and one store serve the module (each test has its own conversation ids), so
the module's setup is paid once."""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import shardstore
from shardstore.history import pairing
from shardstore.integrations.ids import external_session_id
from shardstore.integrations.pydantic_ai import ShardstoreMessageHistory, to_turns
from shardstore.models import Turn
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


def _new_id() -> str:
    return f"conv-{uuid.uuid4().hex[:10]}"


def _exists(store: shardstore.Store, history: ShardstoreMessageHistory) -> bool:
    return bool(store.sessions(external_id=history.conversation_id))


def _weather_agent() -> Agent[None, str]:
    agent = Agent(TestModel(), instructions="be brief")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


def _parallel_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Two tool calls in one step on each new prompt, then a text answer."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    if any(isinstance(p, UserPromptPart) for p in last.parts):
        step = len(messages)
        return ModelResponse(
            parts=[
                ToolCallPart("weather", {"city": "Oslo"}, tool_call_id=f"a{step}"),
                ToolCallPart("weather", {"city": "Rome"}, tool_call_id=f"b{step}"),
            ]
        )
    returns = [p.content for p in last.parts if isinstance(p, ToolReturnPart)]
    return ModelResponse(parts=[TextPart(f"seen {len(messages)} messages: {returns}")])


def _parallel_agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(_parallel_model), instructions="be brief")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


def _dump(messages: list[ModelMessage]) -> Any:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def _pairs_whole(messages: list[ModelMessage]) -> None:
    """Every ToolReturnPart has its ToolCallPart earlier in the list, and every call its
    returns later (but for the newest response, a step in flight)."""
    calls: dict[str, int] = {}
    returned: set[str] = set()
    for at, message in enumerate(messages):
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls[part.tool_call_id] = at
            elif isinstance(part, ToolReturnPart):
                assert part.tool_call_id in calls, f"return {part.tool_call_id} without its call"
                returned.add(part.tool_call_id)
    for call, at in calls.items():
        assert call in returned or at == len(messages) - 1, f"call {call} without its return"


# ---------------------------------------------------------------- agent runs


def test_agent_runs_keep_the_history_exactly(mstore: shardstore.Store) -> None:
    conversation = _new_id()
    history = ShardstoreMessageHistory(conversation, mstore, tenant_id="acme", subject_id="u1")
    agent = _weather_agent()
    assert history.messages() == []
    first = history.run_sync(agent, "weather in Oslo?")
    second = history.run_sync(agent, "and tomorrow?")
    got = history.messages()
    assert got == second.all_messages()  # what the agent itself holds, equal
    assert got[: len(first.all_messages())] == first.all_messages()
    assert _dump(got) == _dump(second.all_messages())
    # one turn per ModelRequest / ModelResponse, pydantic-ai's JSON plus the type
    sid = external_session_id("pydantic-ai", "acme", conversation)
    assert history.shardstore_session_id == sid
    turns = mstore.tail(sid, n=100)
    assert [t.message["kind"] for t in turns] == [m.kind for m in got]
    assert {t.message["type"] for t in turns} == {"pydantic-ai"}
    assert [{k: v for k, v in t.message.items() if k != "type"} for t in turns] == _dump(got)
    info = mstore.session(sid)
    assert info.metadata == {"framework": "pydantic-ai", "external_id": conversation}
    assert (info.tenant_id, info.subject_id) == ("acme", "u1")
    # a second history object (a new process) continues the same conversation
    again = ShardstoreMessageHistory(conversation, mstore, tenant_id="acme")
    third = again.run_sync(agent, "thanks")
    assert third.all_messages()[: len(got)] == got
    assert again.messages() == third.all_messages()


def test_normalized_parts_round_trip_as_pydantic_ai_does(mstore: shardstore.Store) -> None:
    """Values pydantic-ai's own JSON changes (BinaryContent -> BinaryImage, a deprecated
    RetryPromptPart -> ToolReturnPart) come back as its round trip gives them; everything
    else equal, strings and numbers JSONB alone would alter included."""
    with pytest.warns(Warning, match="RetryPromptPart"):
        retry = RetryPromptPart(content="bad args", tool_name="f", tool_call_id="c9")
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                UserPromptPart(
                    [
                        "look \x00 \ud800 héllo",
                        BinaryContent(b"\x89PNG\x00", media_type="image/png"),
                    ]
                )
            ]
        ),
        ModelResponse(
            parts=[
                ThinkingPart("hmm", signature="sig"),
                ToolCallPart("f", {"x": -0.0, "big": 10**30, "f": 1e300}, tool_call_id="c9"),
            ],
            model_name="m",
        ),
        ModelRequest(parts=[retry]),
        ModelResponse(parts=[ToolCallPart("f", '{"x": 1}', tool_call_id="c10")]),
        ModelRequest(parts=[ToolReturnPart("f", {"rows": [1, 2]}, tool_call_id="c10")]),
        ModelResponse(parts=[TextPart("done")]),
    ]
    history = ShardstoreMessageHistory(_new_id(), mstore, tenant_id="acme")
    history.add_messages(messages[:3])
    history.add_messages(messages[3:])
    got = history.messages()
    expected = ModelMessagesTypeAdapter.validate_python(_dump(messages))
    assert got == expected
    # stored as pydantic-ai dumps them, as they are: the legacy part too
    stored = mstore.tail(history.shardstore_session_id, n=10)
    assert [{k: v for k, v in t.message.items() if k != "type"} for t in stored] == _dump(messages)
    assert got[1] == messages[1] and got[3:] == messages[3:]  # unnormalized parts: equal
    args: Any = got[1].parts[1].args  # type: ignore[union-attr]
    assert str(args["x"]) == "-0.0" and args["big"] == 10**30


def test_windows_keep_tool_pairs_whole(mstore: shardstore.Store) -> None:
    """Parallel calls in one response, their returns in the next request: every window
    (by messages and by tokens) of the adapter, of store.tail and store.context holds each
    return with its call."""
    conversation = _new_id()
    full = ShardstoreMessageHistory(conversation, mstore, tenant_id="acme")
    agent = _parallel_agent()
    for prompt in ("weather?", "again?", "once more?"):
        full.run_sync(agent, prompt)
    everything = full.messages()
    assert len(everything) == 12
    kinds = [[p.part_kind for p in m.parts] for m in everything]
    assert kinds[1] == ["tool-call", "tool-call"] and kinds[2] == ["tool-return", "tool-return"]
    sid = full.shardstore_session_id
    tokens = [t.tokens for t in mstore.tail(sid, n=100)]
    for n in range(1, 13):
        window = ShardstoreMessageHistory(
            conversation, mstore, tenant_id="acme", max_messages=n
        ).messages()
        assert window == everything[len(everything) - len(window) :]
        assert len(window) >= n - 1  # only a cut-off return is dropped
        _pairs_whole(window)
        if n % 4 == 2:  # the window opened on the returns of a step: they went
            assert len(window) == n - 1
    for budget in (1, tokens[-1], sum(tokens[-2:]), sum(tokens[-3:]), sum(tokens[-7:])):
        window = ShardstoreMessageHistory(
            conversation, mstore, tenant_id="acme", max_tokens=budget
        ).messages()
        assert sum(tokens[len(tokens) - len(window) :]) <= budget
        _pairs_whole(window)
    # the store's own windows follow the same rule on these turns
    for n in (3, 7, 11):
        turns = mstore.tail(sid, n=n)
        assert not pairing.is_tool_result(turns[0].message)
        assert turns[0].message["kind"] == "response"
    for budget in (sum(tokens[-2:]) + 5, sum(tokens[-6:]) + 5):
        view = mstore.context(sid, budget)
        recent = [m for m, p in zip(view.messages, view.parts, strict=True) if p.kind == "recent"]
        assert recent and not pairing.is_tool_result(recent[0])
        _pairs_whole(
            ModelMessagesTypeAdapter.validate_python(
                [{k: v for k, v in m.items() if k != "type"} for m in recent]
            )
        )
    # and the agent runs on a window
    window_history = ShardstoreMessageHistory(
        conversation, mstore, tenant_id="acme", max_messages=6
    )
    result = window_history.run_sync(agent, "last one?")
    assert result.output.startswith("seen 8 messages")  # 5 of the window, then 3 of this run


def test_pairing_rules_for_the_stored_form() -> None:
    """The pure rules on pydantic-ai turns: a request holding a tool return is a result,
    a response never; neither is a Responses item (no extra statement for a tail)."""
    call, ret = to_turns(
        [
            ModelResponse(parts=[ToolCallPart("f", {}, tool_call_id="c1")]),
            ModelRequest(parts=[ToolReturnPart("f", "r", tool_call_id="c1")]),
        ]
    )
    prompt = to_turns([ModelRequest(parts=[UserPromptPart("hi")])])[0]
    assert pairing.is_tool_result(ret) and pairing.is_pydantic_ai_result(ret)
    assert not pairing.is_tool_result(call) and not pairing.is_tool_result(prompt)
    assert not any(pairing.may_follow_reasoning(m) for m in (call, ret, prompt))
    assert pairing.responses_call_id(call) is None and pairing.responses_result_id(ret) is None
    turns = [Turn(i, m, 1, None, 0) for i, m in enumerate([prompt, call, ret, prompt])]  # type: ignore[arg-type]
    assert pairing.trim_tail(turns[2:]) == turns[3:]
    assert pairing.trim_tail(turns[1:]) == turns[1:]
    assert pairing.whole_window(turns, 2) == turns[1:]
    # a request with parts that are not a list, or not dicts, is no result
    assert not pairing.is_tool_result({**ret, "parts": "x"})
    assert not pairing.is_tool_result({**ret, "parts": ["tool-return"]})


# ---------------------------------------------------------------- async


def test_async_runs_on_both_stores_match_the_sync_run(
    mstore: shardstore.Store, module_dsn: str
) -> None:
    agent = _parallel_agent()
    prompts = ("weather?", "again?")

    def shape(messages: list[ModelMessage]) -> list[Any]:
        return [
            (m.kind, [(p.part_kind, getattr(p, "content", None)) for p in m.parts])
            for m in messages
        ]

    sync_history = ShardstoreMessageHistory(_new_id(), mstore, tenant_id="acme")
    for prompt in prompts:
        sync_history.run_sync(agent, prompt)
    expected = shape(sync_history.messages())

    async def on(store: Any) -> list[Any]:
        history = ShardstoreMessageHistory(_new_id(), store, tenant_id="acme")
        for prompt in prompts:
            await history.run(agent, prompt)
        got = await history.amessages()
        await history.aadd_messages([ModelRequest(parts=[UserPromptPart("extra")])])
        assert len(await history.amessages()) == len(got) + 1
        await history.aclear()
        assert await history.amessages() == []
        return shape(got)

    async def on_async_store() -> list[Any]:
        astore = await shardstore.connect_async(module_dsn)
        try:
            history = ShardstoreMessageHistory("refused", astore, tenant_id="acme")
            with pytest.raises(shardstore.ConfigurationError, match="AsyncStore"):
                history.messages()
            return await on(astore)
        finally:
            await astore.close()

    assert run(on(mstore)) == expected  # the async methods on a sync Store
    assert run(on_async_store()) == expected


def test_clear_keeps_the_session_for_more(mstore: shardstore.Store) -> None:
    history = ShardstoreMessageHistory(_new_id(), mstore, tenant_id="acme")
    history.run_sync(_weather_agent(), "hi")
    history.clear()
    assert history.messages() == []
    history.run_sync(_weather_agent(), "hi again")
    assert len(history.messages()) == 4
    assert not mstore.session(history.shardstore_session_id).purged


# ---------------------------------------------------------------- purge, RLS, search


def test_a_purge_removes_the_conversation(mstore: shardstore.Store, module_dsn: str) -> None:
    history = ShardstoreMessageHistory(_new_id(), mstore, tenant_id="acme")
    history.run_sync(_weather_agent(), "secret plans")
    sid = history.shardstore_session_id
    mstore.purge_session(sid)
    with psycopg.connect(module_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.turns WHERE session_id = %s", (sid,)
        ).fetchone()
    assert row == (0,)
    again = ShardstoreMessageHistory(history.conversation_id, mstore, tenant_id="acme")
    with pytest.raises(shardstore.SessionPurged):
        again.messages()
    with pytest.raises(shardstore.SessionPurged):
        again.run_sync(_weather_agent(), "more")


def test_a_tenant_cannot_reach_another_tenants_history(
    mstore: shardstore.Store, module_dsn: str
) -> None:
    conversation = _new_id()
    mine = ShardstoreMessageHistory(conversation, mstore, tenant_id="acme")
    mine.run_sync(_weather_agent(), "acme's secret")
    before = mine.messages()
    role = make_tenant_role(module_dsn)
    conn = psycopg.connect(module_dsn, autocommit=True)
    try:
        conn.execute(f'SET ROLE "{role}"')
        beta = rls.connect_tenant(conn, tenant="beta")
        # beta names acme's tenant and conversation, and acme's session by its UUID
        for claimed in (
            ShardstoreMessageHistory(conversation, beta, tenant_id="acme"),
            ShardstoreMessageHistory(str(mine.shardstore_session_id), beta, tenant_id="beta"),
        ):
            assert claimed.messages() == []
            with pytest.raises(shardstore.ShardstoreError):
                claimed.add_messages([ModelRequest(parts=[UserPromptPart("overwrite")])])
        assert beta.sessions() == []
    finally:
        conn.close()
        drop_tenant_role(module_dsn, role)
    assert mine.messages() == before


def test_search_finds_a_turn_written_through_the_adapter(mstore: shardstore.Store) -> None:
    history = ShardstoreMessageHistory(_new_id(), mstore, tenant_id="acme")
    history.run_sync(_weather_agent(), "my parcel zanzibarquokka never arrived")
    hits = mstore.search("zanzibarquokka", session_id=history.shardstore_session_id, mode="text")
    assert hits
    message = hits[0].turns[0].message
    assert message["type"] == "pydantic-ai" and message["kind"] == "request"
    assert "zanzibarquokka" in message["parts"][0]["content"]


# ---------------------------------------------------------------- hostile input


def _deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"d": value}
    return value


HOSTILE: list[tuple[str, Any, type[Exception]]] = [
    ("message", ModelRequest(parts=[UserPromptPart("one, not a list")]), shardstore.InvalidInput),
    ("str", "a string", shardstore.InvalidInput),
    ("none", None, shardstore.InvalidInput),
    ("dict", [{"kind": "request", "parts": []}], shardstore.InvalidMessage),
    ("mixed", [ModelRequest(parts=[UserPromptPart("ok")]), 3], shardstore.InvalidMessage),
    (
        "nan",
        [ModelResponse(parts=[ToolCallPart("f", {"x": float("nan")}, tool_call_id="c")])],
        shardstore.InvalidMessage,
    ),
    (
        "inf-in-return",
        [ModelRequest(parts=[ToolReturnPart("f", [float("-inf")], tool_call_id="c")])],
        shardstore.InvalidMessage,
    ),
    (
        "deep",
        [ModelResponse(parts=[ToolCallPart("f", _deep(300), tool_call_id="c")])],
        shardstore.InvalidMessage,
    ),
    (
        "unserializable",
        [ModelRequest(parts=[ToolReturnPart("f", object(), tool_call_id="c")])],
        shardstore.InvalidMessage,
    ),
    (
        "too-large",
        [ModelRequest(parts=[UserPromptPart("x" * (17 << 20))])],
        shardstore.TurnTooLarge,
    ),
]


@pytest.mark.parametrize(("bad", "error"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_bad_messages_write_nothing(mstore: shardstore.Store, bad: Any, error: type) -> None:
    ok = ModelRequest(parts=[UserPromptPart("ok")])
    fresh = ShardstoreMessageHistory(_new_id(), mstore, tenant_id="acme")
    with pytest.raises(error):
        fresh.add_messages(bad)
    with pytest.raises(error):
        run(fresh.aadd_messages(bad))
    if isinstance(bad, list):  # after a good message in the same batch: still nothing
        with pytest.raises(error):
            fresh.add_messages([ok, *bad])
    assert not _exists(mstore, fresh)
    used = ShardstoreMessageHistory(_new_id(), mstore, tenant_id="acme")
    used.add_messages([ok])
    with pytest.raises(error):
        used.add_messages(bad)
    assert used.messages() == [ok]


def test_bad_arguments_are_refused(mstore: shardstore.Store) -> None:
    for bad in ("", None, 3, "a\x00", "x" * 600):
        with pytest.raises(shardstore.InvalidInput):
            ShardstoreMessageHistory(bad, mstore, tenant_id="acme")  # type: ignore[arg-type]
        with pytest.raises(shardstore.InvalidInput):
            ShardstoreMessageHistory("c", mstore, tenant_id=bad)  # type: ignore[arg-type]
    for limit in (0, -1, True, "5", 1.5, 2**64):
        with pytest.raises(shardstore.InvalidInput):
            ShardstoreMessageHistory("c", mstore, tenant_id="acme", max_messages=limit)  # type: ignore[arg-type]
        with pytest.raises(shardstore.InvalidInput):
            ShardstoreMessageHistory("c", mstore, tenant_id="acme", max_tokens=limit)  # type: ignore[arg-type]
    for store in (None, "postgresql://x", Agent(TestModel())):
        with pytest.raises(shardstore.ConfigurationError, match="Store"):
            ShardstoreMessageHistory("c", store, tenant_id="acme")  # type: ignore[arg-type]
    history = ShardstoreMessageHistory(_new_id(), mstore, tenant_id="acme")
    with pytest.raises(shardstore.InvalidInput, match="message_history"):
        history.run_sync(_weather_agent(), "hi", message_history=[])
    with pytest.raises(shardstore.InvalidInput, match="message_history"):
        run(history.run(_weather_agent(), "hi", message_history=[]))
    assert not _exists(mstore, history)


def test_turns_that_are_not_pydantic_ai_messages_are_refused_on_read(
    mstore: shardstore.Store,
) -> None:
    history = ShardstoreMessageHistory(str(uuid.uuid4()), mstore, tenant_id="acme")
    sid = history.shardstore_session_id
    mstore.create_session("acme", session_id=sid)
    mstore.append_turn(sid, {"role": "user", "content": "written by the CLI"})
    with pytest.raises(shardstore.InvalidMessage, match="'user'"):
        history.messages()
    mstore.rewind(sid, 0)
    mstore.append_turn(sid, {"type": "pydantic-ai", "kind": "request", "parts": [{"x": 1}]})
    with pytest.raises(shardstore.InvalidMessage, match="not a Pydantic AI message"):
        history.messages()


def test_a_uuid_conversation_of_another_tenant_is_refused(mstore: shardstore.Store) -> None:
    sid = mstore.create_session("them")
    mine = ShardstoreMessageHistory(str(sid), mstore, tenant_id="acme")
    with pytest.raises(shardstore.SessionConflict):
        mine.add_messages([ModelRequest(parts=[UserPromptPart("x")])])
    assert mstore.session(sid).turn_count == 0


# ---------------------------------------------------------------- the docs page, the extra


def test_the_docs_example_runs(module_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    page = (ROOT / "docs" / "integrations" / "pydantic-ai.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.DOTALL | re.MULTILINE)
    assert blocks and len(blocks[0].strip().splitlines()) <= 10
    monkeypatch.setenv("SHARDSTORE_DSN", module_dsn)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(blocks[0], "docs/integrations/pydantic-ai.md", "exec"), namespace)
    history = namespace["history"]
    assert isinstance(history, ShardstoreMessageHistory)
    assert len(history.messages()) >= 4
    namespace["store"].close()


def _import_fresh(module: str, blocked: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import ``module`` again with every ``blocked`` module made unimportable (as if not
    installed); the test's module objects are put back afterwards."""
    import importlib

    import shardstore.integrations as package

    for name in [m for m in sys.modules if m == blocked or m.startswith(blocked + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, blocked, None)
    monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(package, module.rsplit(".", 1)[1], sys.modules.get(module), raising=False)
    return importlib.import_module(module)


def test_the_adapter_imports_without_llamaindex(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = _import_fresh("shardstore.integrations.pydantic_ai", "llama_index", monkeypatch)
    assert fresh.ShardstoreMessageHistory is not ShardstoreMessageHistory


def test_without_the_extra_the_import_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(shardstore.MissingDependency, match=re.escape("shardstore[pydantic-ai]")):
        _import_fresh("shardstore.integrations.pydantic_ai", "pydantic_ai", monkeypatch)
