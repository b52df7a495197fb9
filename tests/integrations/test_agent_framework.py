"""The Agent Framework history provider and workflow checkpoint storage, with the real
framework: an Agent with an offline scripted chat client and a checkpointed workflow.
One database and store for the module (behind tests/wire.py's round-trip counter)."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("agent_framework")

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    Executor,
    FunctionInvocationLayer,
    InMemoryCheckpointStorage,
    Message,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    tool,
)
from agent_framework._workflows._checkpoint import WorkflowCheckpoint
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.integrations.agent_framework import (
    ShardstoreCheckpointStorage,
    ShardstoreHistoryProvider,
    WorkflowCheckpointNotFound,
)
from shardstore.schema import rls
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role
from tests.wire import WireProxy

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "agent-framework.md"


class ScriptedClient(FunctionInvocationLayer, BaseChatClient):  # type: ignore[misc]
    """An offline chat client: each call answers with the next canned response and
    records the messages it was given."""

    def __init__(self, script: Sequence[ChatResponse]) -> None:
        super().__init__()
        self.script = list(script)
        self.seen: list[list[Message]] = []

    async def _answer(self, messages: Sequence[Message]) -> ChatResponse:
        self.seen.append(list(messages))
        return self.script.pop(0)

    def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **kw: Any) -> Any:
        return self._answer(messages)


@tool
def weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


def _script() -> list[ChatResponse]:
    call = Content.from_function_call(call_id="c1", name="weather", arguments={"city": "Paris"})
    return [
        ChatResponse(messages=[Message(role="assistant", contents=[call])]),
        ChatResponse(messages=[Message(role="assistant", contents=["Sunny in Paris."])]),
        ChatResponse(messages=[Message(role="assistant", contents=["Still sunny."])]),
    ]


class Upper(Executor):
    @handler
    async def shout(self, text: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(text.upper())


class Exclaim(Executor):
    @handler
    async def finish(self, text: str, ctx: WorkflowContext[str, str]) -> None:
        await ctx.yield_output(text + "!")


def _bare(message: Message) -> dict[str, Any]:
    return {k: v for k, v in message.to_dict().items() if k != "additional_properties"}


def _workflow(storage: Any) -> Any:
    upper, exclaim = Upper(id="upper"), Exclaim(id="exclaim")
    builder = WorkflowBuilder(start_executor=upper, checkpoint_storage=storage, name="shout")
    return builder.add_edge(upper, exclaim).build()


@pytest.fixture(scope="module")
def proxy(server_dsn: str, template_db: str) -> Iterator[WireProxy]:
    name = f"shardstore_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    try:
        with WireProxy(make_conninfo(server_dsn, dbname=name)) as p:
            yield p
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def store(proxy: WireProxy) -> Iterator[shardstore.Store]:
    s = shardstore.connect(proxy.dsn())
    yield s
    s.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def _run_agent(history: Any) -> tuple[Agent, Any, ScriptedClient]:
    client = ScriptedClient(_script())
    agent = Agent(client=client, tools=[weather], context_providers=[history])
    session = agent.create_session()
    await agent.run("weather in Paris?", session=session)
    await agent.run("and now?", session=session)
    return agent, session, client


def test_agent_with_a_tool_call(store: shardstore.Store, tenant: str) -> None:
    async def main() -> None:
        history = ShardstoreHistoryProvider(store, tenant_id=tenant)
        _, session, client = await _run_agent(history)
        saved = await history.get_messages(session.session_id)
        assert [m.role for m in saved] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
        ]
        # the model's second call was given the stored history (tagged by the framework
        # with the provider that loaded it) and the new input
        assert [_bare(m) for m in client.seen[-1]] == [_bare(m) for m in saved[:5]]
        # a fresh provider (another process) reads the same, equal messages
        again = await ShardstoreHistoryProvider(store, tenant_id=tenant).get_messages(
            session.session_id
        )
        assert [m.to_dict() for m in again] == [m.to_dict() for m in saved]
        windowed = ShardstoreHistoryProvider(store, tenant_id=tenant, max_messages=4)
        window = await windowed.get_messages(session.session_id)
        assert [m.role for m in window] == ["assistant", "user", "assistant"]  # no lone tool result
        shard = history.shardstore_session_id(session.session_id)
        assert [t.message["role"] for t in store.tail(shard, n=4)] == [
            "assistant",
            "user",
            "assistant",
        ]

    asyncio.run(main())


def test_workflow_checkpointed_stopped_and_resumed(store: shardstore.Store, tenant: str) -> None:
    async def main() -> None:
        storage = ShardstoreCheckpointStorage(store, tenant_id=tenant)
        oracle = InMemoryCheckpointStorage()
        first = await _workflow(storage).run("hello")
        await _workflow(oracle).run("hello")
        assert first.get_outputs() == ["HELLO!"]
        ours = await storage.list_checkpoints(workflow_name="shout")
        theirs = await oracle.list_checkpoints(workflow_name="shout")
        assert [(c.iteration_count, list(c.messages)) for c in ours] == [
            (c.iteration_count, list(c.messages)) for c in theirs
        ]
        assert await storage.list_checkpoint_ids(workflow_name="shout") == [
            c.checkpoint_id for c in ours
        ]
        latest = await storage.get_latest(workflow_name="shout")
        assert latest is not None and latest.checkpoint_id == ours[-1].checkpoint_id
        # stopped after the first superstep: a new workflow resumes from shardstore
        resumed = await _workflow(storage).run(checkpoint_id=ours[0].checkpoint_id)
        assert resumed.get_outputs() == ["HELLO!"]
        loaded = await storage.load(ours[0].checkpoint_id)
        assert loaded.to_dict().keys() == ours[0].to_dict().keys()
        assert loaded.messages.keys() == ours[0].messages.keys()
        assert await storage.delete(ours[0].checkpoint_id) is True
        assert await storage.delete(ours[0].checkpoint_id) is False
        with pytest.raises(WorkflowCheckpointNotFound):
            await storage.load(ours[0].checkpoint_id)
        assert (
            await ShardstoreCheckpointStorage(store, tenant_id="other").get_latest(
                workflow_name="shout"
            )
            is None
        )

    asyncio.run(main())


def test_round_trips_of_the_hot_path(
    proxy: WireProxy, store: shardstore.Store, tenant: str
) -> None:
    async def main() -> dict[str, int]:
        history = ShardstoreHistoryProvider(store, tenant_id=tenant)
        windowed = ShardstoreHistoryProvider(store, tenant_id=tenant, max_messages=10)
        await history.save_messages("rt", [Message(role="user", contents=["warm"])])
        await windowed.get_messages("rt")
        storage = ShardstoreCheckpointStorage(store, tenant_id=tenant)
        # past the connection's prepare threshold, so that each count is a steady-state
        # call's (the run that prepares a statement costs one more round trip)
        for i in range(6):
            await history.save_messages("rt", [Message(role="assistant", contents=["hi"])] * 2)
            await history.get_messages("rt")
            await windowed.get_messages("rt")
            warm = WorkflowCheckpoint(workflow_name=f"w{i}", graph_signature_hash="h", state={})
            await storage.save(warm)
            await storage.load(warm.checkpoint_id)
        counts = {}
        with proxy.counting() as n:
            await history.save_messages("rt", [Message(role="assistant", contents=["hi"])] * 2)
        counts["save_messages"] = n[0]
        with proxy.counting() as n:
            await history.get_messages("rt")
        counts["get_messages"] = n[0]
        with proxy.counting() as n:
            await windowed.get_messages("rt")
        counts["get_messages_windowed"] = n[0]
        cp = WorkflowCheckpoint(workflow_name="rt", graph_signature_hash="h", state={"k": 1})
        with proxy.counting() as n:
            await storage.save(cp)
        counts["checkpoint_save"] = n[0]
        with proxy.counting() as n:
            await storage.load(cp.checkpoint_id)
        counts["checkpoint_load"] = n[0]
        return counts

    assert asyncio.run(main()) == {
        "save_messages": 1,
        "get_messages": 1,
        "get_messages_windowed": 1,
        "checkpoint_save": 4,
        "checkpoint_load": 1,
    }


def test_hostile_input_writes_nothing(store: shardstore.Store, tenant: str) -> None:
    async def main() -> None:
        history = ShardstoreHistoryProvider(store, tenant_id=tenant)
        storage = ShardstoreCheckpointStorage(store, tenant_id=tenant)
        deep: Any = "x"
        for _ in range(300):
            deep = [deep]
        calls = [
            lambda: history.save_messages("h", [{"role": "user"}]),  # type: ignore[list-item]
            lambda: history.save_messages("h", "hello"),  # type: ignore[arg-type]
            lambda: history.save_messages(None, [Message(role="user", contents=["x"])]),
            lambda: history.save_messages("x" * 10_000, [Message(role="user", contents=["x"])]),
            lambda: history.save_messages(
                "h",
                [
                    Message(role="user", contents=["ok"]),
                    Message(role="user", contents=["\x00" * 3, "z" * (17 << 20)]),
                ],
            ),
            lambda: history.get_messages(42),  # type: ignore[arg-type]
            lambda: storage.save({"checkpoint_id": "x"}),  # type: ignore[arg-type]
            lambda: storage.save(
                WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", state={"d": deep})
            ),
            lambda: storage.load(7),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises(shardstore.InvalidInput):
                await call()
        bad_constructors: list[dict[str, Any]] = [
            {"max_messages": 0},
            {"max_messages": True},
            {"max_messages": 1 << 40},
            {"max_messages": "5"},
            {"tenant_id": ""},
            {"tenant_id": 7},
            {"tenant_id": "t\x00"},
            {"subject_id": "s" * 10_000},
            {"subject_id": ["s"]},
            {"agent_id": 3.5},
        ]
        for bad in bad_constructors:
            with pytest.raises(shardstore.InvalidInput):
                ShardstoreHistoryProvider(store, **{"tenant_id": tenant, **bad})
        with pytest.raises(shardstore.ShardstoreError):
            ShardstoreHistoryProvider("postgresql://x", tenant_id=tenant)  # type: ignore[arg-type]
        with pytest.raises(shardstore.ShardstoreError):
            ShardstoreCheckpointStorage(object(), tenant_id=tenant)  # type: ignore[arg-type]
        with pytest.raises(shardstore.InvalidInput):
            ShardstoreCheckpointStorage(store, tenant_id="")
        assert await history.get_messages("h") == []
        assert store.sessions(tenant_id=tenant) == []

    asyncio.run(main())


def test_purge_retention_search_and_rls(
    proxy: WireProxy, store: shardstore.Store, tenant: str
) -> None:
    dsn = proxy.dsn()

    async def main() -> None:
        history = ShardstoreHistoryProvider(store, tenant_id=tenant)
        _, session, _ = await _run_agent(history)
        shard = history.shardstore_session_id(session.session_id)
        hits = store.search("Paris", tenant_id=tenant, mode="text")
        assert hits and {h.session_id for h in hits} == {shard}
        store.purge_session(shard)
        with pytest.raises(shardstore.SessionPurged):
            await ShardstoreHistoryProvider(store, tenant_id=tenant).get_messages(
                session.session_id
            )
        await history.save_messages("old", [Message(role="user", contents=["long ago"])])
        old = history.shardstore_session_id("old")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE shardstore.sessions SET last_turn_at = now() - interval '400 days',"
                " created_at = now() - interval '400 days' WHERE session_id = %s",
                (old,),
            )
            conn.execute(
                "UPDATE shardstore.turn_buffer SET created_at = now() - interval '400 days'"
                " WHERE session_id = %s",
                (old,),
            )
        store.maintain(retention=timedelta(days=365), embed=False)
        assert await ShardstoreHistoryProvider(store, tenant_id=tenant).get_messages("old") == []
        await history.save_messages("secret", [Message(role="user", contents=["globex only"])])
        await ShardstoreCheckpointStorage(store, tenant_id=tenant).save(
            WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", checkpoint_id="cp-1")
        )

    asyncio.run(main())
    role = make_tenant_role(dsn)
    try:
        with as_tenant(dsn, role, "acme") as conn:
            acme = rls.connect_tenant(conn)

            async def as_acme() -> None:
                posing = ShardstoreHistoryProvider(acme, tenant_id=tenant)
                assert await posing.get_messages("secret") == []
                with pytest.raises(shardstore.ShardstoreError):
                    await posing.save_messages("secret", [Message(role="user", contents=["x"])])
                storage = ShardstoreCheckpointStorage(acme, tenant_id=tenant)
                with pytest.raises(WorkflowCheckpointNotFound):
                    await storage.load("cp-1")
                assert await storage.list_checkpoint_ids(workflow_name="w") == []
                mine = ShardstoreHistoryProvider(acme, tenant_id="acme")
                await mine.save_messages("secret", [Message(role="user", contents=["acme's"])])
                assert [m.text for m in await mine.get_messages("secret")] == ["acme's"]

            asyncio.run(as_acme())
            acme.close()
    finally:
        drop_tenant_role(dsn, role)
    got = asyncio.run(ShardstoreHistoryProvider(store, tenant_id=tenant).get_messages("secret"))
    assert [m.text for m in got] == ["globex only"]


def test_async_store_parity(proxy: WireProxy) -> None:
    async def main() -> None:
        astore = await shardstore.connect_async(proxy.dsn())
        try:
            history = ShardstoreHistoryProvider(astore, tenant_id="async")
            _, session, _ = await _run_agent(history)
            assert len(await history.get_messages(session.session_id)) == 6
            storage = ShardstoreCheckpointStorage(astore, tenant_id="async")
            assert (await _workflow(storage).run("hi")).get_outputs() == ["HI!"]
            assert await storage.get_latest(workflow_name="shout") is not None
        finally:
            await astore.close()

    asyncio.run(main())


def test_the_doc_example_runs(proxy: WireProxy) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks and len(blocks[0].strip().splitlines()) <= 10
    os.environ["SHARDSTORE_DSN"] = proxy.dsn()
    try:
        exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "__main__"})
    finally:
        del os.environ["SHARDSTORE_DSN"]
