"""The Google ADK session service under ADK's own Runner, with a scripted offline model.

One database for the module (behind the round-trip counting proxy, tests/wire.py) and one
store; each test uses sessions of its own. ADK's InMemorySessionService is the oracle for
events, state scopes and GetSessionConfig.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncGenerator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.genai import types
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.core.sql import query
from shardstore.integrations.google_adk import (
    AdkSessionExists,
    AdkSessionNotFound,
    ShardstoreSessionService,
    StaleAdkSession,
    _event_message,
)
from shardstore.schema import rls
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role
from tests.wire import WireProxy

APP = "weather"
DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "google-adk.md"


class ScriptedLlm(BaseLlm):
    """An offline model: each call returns the next canned response."""

    model: str = "scripted"
    script: list[LlmResponse] = []  # noqa: RUF012  (a pydantic field)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        yield self.script.pop(0)


def weather(city: str) -> dict[str, str]:
    """The weather of a city."""
    return {"city": city, "sky": "sunny"}


def _script() -> list[LlmResponse]:
    call = types.FunctionCall(id="call-1", name="weather", args={"city": "Paris"})
    return [
        LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)])),
        LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text="Sunny in Paris.")])
        ),
        LlmResponse(content=types.Content(role="model", parts=[types.Part(text="Still sunny.")])),
    ]


def _user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def _conversation(service: BaseSessionService, user: str) -> tuple[str, list[Event]]:
    """Two runs of an agent with a tool: a function call, its response, two answers."""
    agent = LlmAgent(name="helper", model=ScriptedLlm(script=_script()), tools=[weather])
    runner = Runner(agent=agent, app_name=APP, session_service=service)
    session = await service.create_session(
        app_name=APP, user_id=user, state={"app:units": "C", "user:lang": "fr", "turns": 0}
    )
    events = []
    for text in ("weather in Paris?", "and now?"):
        async for event in runner.run_async(
            user_id=user, session_id=session.id, new_message=_user(text)
        ):
            events.append(event)
    return session.id, events


def _shape(events: list[Event]) -> list[tuple[str, Any]]:
    return [
        (e.author, e.content.model_dump(exclude_none=True) if e.content else None) for e in events
    ]


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
def service(store: shardstore.Store) -> ShardstoreSessionService:
    return ShardstoreSessionService(store, tenant_id=f"t-{uuid.uuid4().hex[:8]}")


def test_runner_round_trip_matches_in_memory(
    store: shardstore.Store, service: ShardstoreSessionService
) -> None:
    async def main() -> None:
        sid, ours = await _conversation(service, "u1")
        _, theirs = await _conversation(InMemorySessionService(), "u1")
        assert _shape(ours) == _shape(theirs)
        got = await service.get_session(app_name=APP, user_id="u1", session_id=sid)
        assert got is not None
        # the runner stores each user message as an event too; it yields the others
        assert [e.content.parts[0].text for e in got.events if e.author == "user"] == [
            "weather in Paris?",
            "and now?",
        ]
        for a, b in zip([e for e in got.events if e.author != "user"], ours, strict=True):
            da, db = a.model_dump(), b.model_dump()
            assert da == db, {k: (da[k], db[k]) for k in da if da[k] != db[k]}
        assert got.state == {"app:units": "C", "user:lang": "fr", "turns": 0}
        # the pair is two turns; a window opening on the response drops it
        shard = service.shardstore_session_id(APP, "u1", sid)
        stored = store.tail(shard, n=100)
        kinds = [t.message["role"] for t in stored]
        assert kinds == ["user", "model", "user", "model", "user", "model"]
        assert "function_response" in json.dumps(stored[2].message)
        assert [t.turn_seq for t in store.tail(shard, n=4)] == [3, 4, 5]
        assert [t.turn_seq for t in store.tail(shard, n=5)] == [1, 2, 3, 4, 5]
        ctx = store.context(shard, max_tokens=10_000)
        assert ctx is not None

    asyncio.run(main())


def test_state_scopes_follow_adk(service: ShardstoreSessionService) -> None:
    async def main() -> None:
        oracle = InMemorySessionService()
        for svc in (service, oracle):
            a = await svc.create_session(app_name=APP, user_id="ann", state={"own": 1})
            b = await svc.create_session(app_name=APP, user_id="bob")
            delta = {"app:mode": "x", "user:seen": True, "temp:scratch": 9, "own": 2}
            ev = Event(author="helper", invocation_id="i", actions=EventActions(state_delta=delta))
            await svc.append_event(a, ev)
            assert a.state["temp:scratch"] == 9  # applied to the object, never stored
            for who, s in (("ann", a), ("bob", b)):
                got = await svc.get_session(app_name=APP, user_id=who, session_id=s.id)
                assert got is not None
                yield_ = (svc is service, who, got.state)
                results.append(yield_)
            users = await svc.get_user_state(app_name=APP, user_id="ann")
            results.append((svc is service, "user", users))
            listed = await svc.list_sessions(app_name=APP)
            results.append((svc is service, "list", sorted(str(s.state) for s in listed.sessions)))

    results: list[tuple[bool, str, Any]] = []
    asyncio.run(main())
    ours = [r[1:] for r in results if r[0]]
    theirs = [r[1:] for r in results if not r[0]]
    assert ours == theirs
    assert ("ann", {"own": 2, "app:mode": "x", "user:seen": True}) in ours


def test_get_session_config_matches_in_memory(service: ShardstoreSessionService) -> None:
    async def main() -> None:
        oracle = InMemorySessionService()
        sessions = {}
        for svc in (service, oracle):
            s = await svc.create_session(app_name=APP, user_id="u", session_id="fixed")
            for i in range(150):
                ev = Event(author="user", content=_user(f"m{i}"), timestamp=1000.0 + i)
                await svc.append_event(s, ev)
            sessions[svc is service] = svc
        configs = [
            GetSessionConfig(num_recent_events=0),
            GetSessionConfig(num_recent_events=1),
            GetSessionConfig(num_recent_events=10),
            GetSessionConfig(num_recent_events=500),
            GetSessionConfig(after_timestamp=1140.0),
            GetSessionConfig(after_timestamp=1010.0),  # past the first window read
            GetSessionConfig(after_timestamp=5000.0),
            GetSessionConfig(num_recent_events=20, after_timestamp=1135.0),
            None,
        ]
        for config in configs:
            got = [
                await sessions[flag].get_session(
                    app_name=APP, user_id="u", session_id="fixed", config=config
                )
                for flag in (True, False)
            ]
            assert got[0] is not None and got[1] is not None
            assert [e.timestamp for e in got[0].events] == [e.timestamp for e in got[1].events]
        assert await service.get_session(app_name=APP, user_id="u", session_id="nope") is None

    asyncio.run(main())


def _buffers(dsn: str, sid: uuid.UUID, n: int) -> int:
    """Shared buffers (hit + read) the tail read of the newest ``n`` turns touches,
    including the blocks its function reads (EXPLAIN counts them to the calling node)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query('tail_window')}", (sid, n, None)
        ).fetchone()
        assert row is not None
        plan = row[0][0]["Plan"]
        return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def test_a_long_session_reads_like_a_short_one(
    proxy: WireProxy, store: shardstore.Store, service: ShardstoreSessionService
) -> None:
    """get_session(num_recent_events=20) of 10,000 events costs what it costs at 10: the
    same round trips, and its tail read touches about as many buffers."""

    async def fill(n: int) -> str:
        s = await service.create_session(app_name=APP, user_id="big", state={"k": 1})
        shard = service.shardstore_session_id(APP, "big", s.id)
        batch = []
        for i in range(n):
            ev = Event(author="user", invocation_id="i", content=_user(f"message {i}"))
            batch.append(_event_message(ev))
            if len(batch) == 2000 or i == n - 1:
                store.append_turns(shard, batch)
                batch = []
        store.flush(shard)
        return s.id

    async def main() -> dict[int, tuple[int, int]]:
        out = {}
        for n in (10, 10_000):
            ext = await fill(n)
            config = GetSessionConfig(num_recent_events=20)
            # past the connection's prepare threshold: the statements' first runs (and the
            # run that prepares each) cost what a steady-state call does not
            for _ in range(6):
                await service.get_session(
                    app_name=APP, user_id="big", session_id=ext, config=config
                )
            with proxy.counting() as trips:
                got = await service.get_session(
                    app_name=APP, user_id="big", session_id=ext, config=config
                )
            assert got is not None and len(got.events) == min(n, 20)
            shard = service.shardstore_session_id(APP, "big", ext)
            out[n] = (trips[0], _buffers(proxy.dsn(), shard, 20))
        return out

    costs = asyncio.run(main())
    assert costs[10][0] == costs[10_000][0]
    assert costs[10_000][1] <= 2 * costs[10][1] + 8, costs


def test_round_trips_of_the_hot_path(proxy: WireProxy, service: ShardstoreSessionService) -> None:
    """What each hot call costs on the wire (reported in docs/integrations/google-adk.md)."""

    async def main() -> dict[str, int]:
        s = await service.create_session(app_name=APP, user_id="rt", state={"a": 1})
        warm = Event(author="user", invocation_id="i", content=_user("warm"))
        await service.append_event(s, warm)
        counts = {}
        with proxy.counting() as n:
            await service.append_event(
                s, Event(author="user", invocation_id="i", content=_user("hi"))
            )
        counts["append_event"] = n[0]
        delta = {"a": 2, "user:x": 1}
        ev = Event(author="m", invocation_id="i", actions=EventActions(state_delta=delta))
        with proxy.counting() as n:
            await service.append_event(s, ev)
        counts["append_event_with_state"] = n[0]
        with proxy.counting() as n:
            await service.get_session(
                app_name=APP,
                user_id="rt",
                session_id=s.id,
                config=GetSessionConfig(num_recent_events=20),
            )
        counts["get_session"] = n[0]
        return counts

    assert asyncio.run(main()) == {
        "append_event": 1,
        "append_event_with_state": 9,
        "get_session": 7,
    }


def test_hostile_input_writes_nothing(
    store: shardstore.Store, service: ShardstoreSessionService
) -> None:
    async def main() -> None:
        s = await service.create_session(app_name=APP, user_id="h")
        shard = service.shardstore_session_id(APP, "h", s.id)
        deep: Any = "x"
        for _ in range(300):
            deep = {"d": deep}
        bad_calls = [
            lambda: service.create_session(app_name=1, user_id="h"),  # type: ignore[arg-type]
            lambda: service.create_session(app_name=APP, user_id="h", state=[1]),  # type: ignore[arg-type]
            lambda: service.create_session(app_name=APP, user_id="h", state={"deep": deep}),
            lambda: service.create_session(app_name=APP, user_id="h", session_id="x" * 10_000),
            lambda: service.create_session(app_name=APP, user_id="", session_id="y"),
            lambda: service.get_session(
                app_name=APP, user_id="h", session_id=s.id, config={"n": 1}
            ),  # type: ignore[arg-type]
            lambda: service.append_event(s, {"author": "user"}),  # type: ignore[arg-type]
            lambda: service.append_event("s", Event(author="user")),  # type: ignore[arg-type]
            lambda: service.append_event(
                s, Event(author="u", actions=EventActions(state_delta={"user:deep": deep}))
            ),
            lambda: service.append_event(
                s, Event(author="u", content=_user("z" * (17 * 1024 * 1024)))
            ),
            lambda: service.append_event(s, Event(author="u", id="k" * 10_000)),
        ]
        for call in bad_calls:
            with pytest.raises(shardstore.InvalidInput):
                await call()
        assert store.session(shard).turn_count == 0
        assert await service.get_user_state(app_name=APP, user_id="h") == {}
        ghost = s.model_copy(update={"id": "ghost"})
        with pytest.raises(AdkSessionNotFound):
            await service.append_event(ghost, Event(author="u", content=_user("x")))
        with pytest.raises(AdkSessionExists):
            await service.create_session(app_name=APP, user_id="h", session_id=s.id)
        stale = await service.get_session(app_name=APP, user_id="h", session_id=s.id)
        assert stale is not None
        await service.append_event(s, Event(author="u", content=_user("moves it on")))
        with pytest.raises(StaleAdkSession):
            await service.append_event(
                stale, Event(author="u", actions=EventActions(state_delta={"k": 1}))
            )
        assert store.session(shard).turn_count == 1
        again = Event(author="u", id="same-id", content=_user("once"))
        await service.append_event(s, again)
        await service.append_event(s, again.model_copy())
        assert store.session(shard).turn_count == 2  # a re-delivered event is stored once

    asyncio.run(main())


def test_purge_retention_and_search(
    proxy: WireProxy, store: shardstore.Store, service: ShardstoreSessionService
) -> None:
    async def main() -> None:
        tenant = service.tenant_id
        gone, _ = await _conversation(service, "erased")
        await service.delete_session(app_name=APP, user_id="erased", session_id=gone)
        assert await service.get_session(app_name=APP, user_id="erased", session_id=gone) is None
        await service.delete_session(app_name=APP, user_id="erased", session_id=gone)  # no-op
        with pytest.raises(shardstore.SessionPurged):
            await service.create_session(app_name=APP, user_id="erased", session_id=gone)
        kept, _ = await _conversation(service, "subject")
        assert await service.get_user_state(app_name=APP, user_id="subject") == {"lang": "fr"}
        store.purge_subject(tenant, "subject")
        assert await service.get_session(app_name=APP, user_id="subject", session_id=kept) is None
        assert await service.get_user_state(app_name=APP, user_id="subject") == {}
        old, _ = await _conversation(service, "old")
        hits = store.search("Paris", tenant_id=tenant, mode="text")
        assert hits and all(
            h.session_id == service.shardstore_session_id(APP, "old", old) for h in hits
        )
        shard = service.shardstore_session_id(APP, "old", old)
        with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
            conn.execute(
                "UPDATE shardstore.sessions SET last_turn_at = now() - interval '400 days',"
                " created_at = now() - interval '400 days' WHERE session_id = %s",
                (shard,),
            )
            conn.execute(
                "UPDATE shardstore.turn_buffer SET created_at = now() - interval '400 days'"
                " WHERE session_id = %s",
                (shard,),
            )
        store.maintain(retention=timedelta(days=365), embed=False)
        assert await service.get_session(app_name=APP, user_id="old", session_id=old) is None

    asyncio.run(main())


def test_tenants_are_isolated_under_rls(proxy: WireProxy, store: shardstore.Store) -> None:
    dsn = proxy.dsn()
    owner = ShardstoreSessionService(store, tenant_id="globex")
    theirs = asyncio.run(owner.create_session(app_name=APP, user_id="u", state={"user:pin": 1}))
    role = make_tenant_role(dsn)
    try:
        with as_tenant(dsn, role, "acme") as conn:
            tenant_store = rls.connect_tenant(conn)
            mine = ShardstoreSessionService(tenant_store, tenant_id="acme")
            posing = ShardstoreSessionService(tenant_store, tenant_id="globex")

            async def main() -> None:
                s = await mine.create_session(app_name=APP, user_id="u")
                await mine.append_event(s, Event(author="u", content=_user("mine")))
                assert (
                    await posing.get_session(app_name=APP, user_id="u", session_id=theirs.id)
                    is None
                )
                assert await posing.get_user_state(app_name=APP, user_id="u") == {}
                assert (await posing.list_sessions(app_name=APP)).sessions == []
                with pytest.raises(shardstore.ShardstoreError):
                    await posing.append_event(theirs, Event(author="u", content=_user("x")))

            asyncio.run(main())
            tenant_store.close()
        got = asyncio.run(owner.get_session(app_name=APP, user_id="u", session_id=theirs.id))
        assert got is not None and got.events == [] and got.state == {"user:pin": 1}
    finally:
        drop_tenant_role(dsn, role)


def test_async_store_parity(proxy: WireProxy) -> None:
    async def main() -> None:
        astore = await shardstore.connect_async(proxy.dsn())
        try:
            service = ShardstoreSessionService(astore, tenant_id="async")
            sid, events = await _conversation(service, "a")
            got = await service.get_session(app_name=APP, user_id="a", session_id=sid)
            assert got is not None
            assert [e.id for e in got.events if e.author != "user"] == [e.id for e in events]
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
