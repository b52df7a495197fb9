"""The OpenAI Agents SDK adapter (issue 12 §2): ShardstoreSession under the real SDK's
Runner, driven offline by agents.testing.ScriptedModel, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest
from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.integrations.ids import external_session_id
from shardstore.integrations.openai_agents import ShardstoreSession

set_tracing_disabled(True)  # offline: no trace export

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _script() -> list[Any]:
    """Run 1: a tool call, its answer; run 2: a plain answer."""
    return [
        [function_call("add", {"a": 2, "b": 3}, call_id="call_1")],
        [assistant_message("2 + 3 = 5", item_id="msg_1")],
        [assistant_message("You asked about 2 + 3.", item_id="msg_2")],
    ]


def _agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="calc", instructions="add", model=model, tools=[add])


async def _two_runs(session: Any) -> tuple[ScriptedModel, list[Any], list[Any]]:
    model = ScriptedModel(_script())
    agent = _agent(model)
    first = await Runner.run(agent, "what is 2+3?", session=session)
    assert first.final_output == "2 + 3 = 5"
    after_first = await session.get_items()
    second = await Runner.run(agent, "what did I ask?", session=session)
    assert second.final_output == "You asked about 2 + 3."
    model.assert_complete()
    return model, after_first, await session.get_items()


@pytest.fixture
def astore(dsn: str) -> Iterator[Callable[[], Awaitable[shardstore.AsyncStore]]]:
    """connect_async inside the test's own event loop (each asyncio.run has its own)."""

    def make() -> Awaitable[shardstore.AsyncStore]:
        return shardstore.connect_async(dsn)

    yield make


def _count_sessions(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone()
        assert row is not None
        return int(row[0])


# ---------------------------------------------------------------- the SDK's Runner


def test_runner_two_runs_share_the_session_async(astore: Any, dsn: str) -> None:
    async def main() -> None:
        store = await astore()
        try:
            session = ShardstoreSession("chat-1", store, tenant_id="acme", subject_id="u1")
            assert isinstance(session, Session)  # the SDK's runtime protocol
            model, after_first, after_second = await _two_runs(session)
            # the oracle: the SDK's own SQLite session, given the same script
            sqlite = SQLiteSession("oracle")
            _, oracle_first, oracle_second = await _two_runs(sqlite)
            assert after_first == oracle_first
            assert after_second == oracle_second
            kinds = [i.get("type", i.get("role")) for i in after_first]
            assert kinds == ["user", "function_call", "function_call_output", "message"]
            # the second run's model call saw the first run's items, in order, then its input
            second_input = model.last_call.input  # type: ignore[union-attr]
            assert second_input == [*after_first, {"content": "what did I ask?", "role": "user"}]
            assert after_second[: len(after_first)] == after_first
            # mapped id, metadata, owners
            sid = external_session_id("openai-agents", "acme", "chat-1")
            assert session.shardstore_session_id == sid
            info = await store.session(sid)
            assert (info.tenant_id, info.subject_id) == ("acme", "u1")
            assert info.metadata == {"framework": "openai-agents", "external_id": "chat-1"}
            assert info.turn_count == len(after_second) == 6
            assert [t.message for t in await store.tail(sid, n=100)] == after_second
        finally:
            await store.close()

    run(main())


def test_runner_with_a_sync_store(store: shardstore.Store) -> None:
    session = ShardstoreSession("chat-sync", store, tenant_id="acme")
    model, after_first, after_second = run(_two_runs(session))
    assert len(after_first) == 4 and len(after_second) == 6
    assert [t.message for t in store.history(session.shardstore_session_id)] == after_second
    assert model.last_call.input[:4] == after_first  # type: ignore[index,union-attr]


def test_pop_item_then_retry(store: shardstore.Store) -> None:
    """The SDK's "edit the last message" flow: pop the answer and the question, run again
    with a corrected question; the retry's model call does not see the popped items."""
    session = ShardstoreSession("chat-retry", store, tenant_id="acme")

    async def main() -> tuple[ScriptedModel, list[Any], list[Any], list[Any]]:
        model = ScriptedModel(
            [[assistant_message("Paris", item_id="m1")], [assistant_message("Rome", item_id="m2")]]
        )
        agent = Agent(name="geo", model=model)
        await Runner.run(agent, "capital of France?", session=session)
        before = await session.get_items()
        popped = [await session.pop_item(), await session.pop_item()]
        await Runner.run(agent, "capital of Italy?", session=session)
        return model, before, popped, await session.get_items()

    model, before, popped, after = run(main())
    assert popped == [before[1], before[0]]  # newest first
    assert popped[0]["role"] == "assistant" and popped[1] == {  # type: ignore[index]
        "content": "capital of France?",
        "role": "user",
    }
    assert model.last_call.input == [{"content": "capital of Italy?", "role": "user"}]  # type: ignore[union-attr]
    assert [i.get("role") for i in after] == ["user", "assistant"]
    assert after[0]["content"] == "capital of Italy?"
    info = store.session(session.shardstore_session_id)
    assert info.turn_count == 2  # the retry took the popped positions: no gap
    assert [t.turn_seq for t in store.tail(info.session_id, n=10)] == [0, 1]


# ---------------------------------------------------------------- items and order


RESPONSES_ITEMS: list[dict[str, Any]] = [
    {"role": "system", "content": "be exact"},
    {"content": "héllo \u0000 \ud800 nul and a lone surrogate", "role": "user"},
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "think"}],
        "encrypted_content": "gAAAA" + "x" * 300,
    },
    {
        "arguments": '{"q": "weather", "n": 3}',
        "call_id": "call_9",
        "name": "search",
        "type": "function_call",
        "id": "fc_9",
        "status": "completed",
    },
    {
        "call_id": "call_9",
        "output": [
            {"type": "input_text", "text": "sunny"},
            {"type": "input_image", "detail": "low"},
        ],
        "type": "function_call_output",
    },
    {
        "id": "msg_9",
        "content": [
            {"annotations": [], "text": "It is sunny.", "type": "output_text", "logprobs": []}
        ],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {"type": "item_reference", "id": "msg_0"},
    {"content": "numbers", "role": "user", "x": [1e300, -0.0, 1e16, 2**70, 0.1, True, None]},
]


def _typed(value: Any) -> Any:
    """``value`` with every scalar tagged by its type and floats by their repr: == would
    take -0.0 for 0.0, 1 for 1.0 and True for 1."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


def test_items_round_trip_exactly_and_limits_are_raw(store: shardstore.Store) -> None:
    session = ShardstoreSession("items", store, tenant_id="acme")
    items = copy.deepcopy(RESPONSES_ITEMS)

    async def main() -> None:
        await session.add_items(items[:3])
        await session.add_items(items[3:])
        got = await session.get_items()
        assert got == RESPONSES_ITEMS
        assert _typed(got) == _typed(RESPONSES_ITEMS)
        # exactly the newest N: a window may open on a function_call_output (no trim)
        window = await session.get_items(limit=4)
        assert window == RESPONSES_ITEMS[-4:]
        assert window[0]["type"] == "function_call_output"
        assert await session.get_items(limit=0) == []
        assert await session.get_items(limit=1000) == RESPONSES_ITEMS
        assert items == RESPONSES_ITEMS  # the caller's items were not changed

    run(main())


def test_session_settings_limit_is_the_default(store: shardstore.Store) -> None:
    items = [{"role": "user", "content": f"m{i}"} for i in range(10)]
    session = ShardstoreSession(
        "limited", store, tenant_id="acme", session_settings=SessionSettings(limit=3)
    )
    as_dict = ShardstoreSession("limited", store, tenant_id="acme", session_settings={"limit": 2})

    async def main() -> None:
        await session.add_items(items)
        assert await session.get_items() == items[-3:]
        assert await session.get_items(limit=5) == items[-5:]  # an explicit limit wins
        assert await as_dict.get_items() == items[-2:]

    run(main())


def test_an_equal_timestamp_batch_keeps_its_order(store: shardstore.Store) -> None:
    """One add_items call is one statement: its turns share one timestamp, and their
    order is the order given (turn_seq), across chunk boundaries too."""
    session = ShardstoreSession("batch", store, tenant_id="acme")
    batch = [
        {"role": "user" if i % 2 else "assistant", "content": f"item {i} " + "w" * (i % 7) * 50}
        for i in range(300)
    ]
    run(session.add_items(batch))
    turns = list(store.history(session.shardstore_session_id))
    assert len({t.created_at for t in turns}) == 1  # truly equal timestamps
    assert [t.message for t in turns] == batch
    assert len({t.chunk_seq for t in turns}) > 1  # it spans several chunks
    assert run(session.get_items()) == batch
    assert run(session.get_items(limit=17)) == batch[-17:]


# ---------------------------------------------------------------- pop and clear


def test_pop_and_clear_on_an_unknown_session_create_nothing(
    store: shardstore.Store, dsn: str
) -> None:
    session = ShardstoreSession("never-written", store, tenant_id="acme")

    async def main() -> None:
        assert await session.get_items() == []
        assert await session.get_items(limit=3) == []
        assert await session.pop_item() is None
        await session.clear_session()
        await session.add_items([])

    run(main())
    assert _count_sessions(dsn) == 0


def test_pop_item_removes_exactly_the_newest(store: shardstore.Store) -> None:
    session = ShardstoreSession("pops", store, tenant_id="acme")
    items = copy.deepcopy(RESPONSES_ITEMS)

    async def main() -> list[Any]:
        await session.add_items(items)
        popped = []
        while (item := await session.pop_item()) is not None:
            popped.append(item)
        return popped

    assert run(main()) == list(reversed(RESPONSES_ITEMS))
    info = store.session(session.shardstore_session_id)
    assert info.turn_count == 0 and not info.purged


def test_clear_session_empties_and_stays_usable(store: shardstore.Store) -> None:
    session = ShardstoreSession("cleared", store, tenant_id="acme", subject_id="u7")
    sid = session.shardstore_session_id
    first = [{"role": "user", "content": f"a{i}"} for i in range(30)]
    again = [{"role": "user", "content": "fresh"}]

    async def main() -> None:
        await session.add_items(first)
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items(again)
        assert await session.get_items() == again

    run(main())
    info = store.session(sid)
    assert info.turn_count == 1 and info.subject_id == "u7"
    assert info.metadata["external_id"] == "cleared"
    assert [t.turn_seq for t in store.tail(sid)] == [0]


def test_clear_session_after_a_range_purge(store: shardstore.Store) -> None:
    """A range purge removed the oldest turns; clear rewinds to the first one kept."""
    session = ShardstoreSession("ranged", store, tenant_id="acme")
    sid = session.shardstore_session_id
    run(session.add_items([{"role": "user", "content": f"m{i}"} for i in range(10)]))
    store.purge_range(sid, before_turn_seq=4)
    assert len(run(session.get_items())) == 6
    run(session.clear_session())
    assert run(session.get_items()) == []
    run(session.add_items([{"role": "user", "content": "after"}]))
    assert run(session.get_items()) == [{"role": "user", "content": "after"}]


def test_clear_session_removes_checkpoints_and_keys(store: shardstore.Store) -> None:
    session = ShardstoreSession("ck", store, tenant_id="acme")
    sid = session.shardstore_session_id
    run(session.add_items([{"role": "user", "content": "q"}]))
    store.append_turn(sid, {"role": "assistant", "content": "a"}, "key-1", checkpoint={"s": 1})
    assert store.checkpoints(sid)
    run(session.clear_session())
    assert store.checkpoints(sid) == []
    again = store.append_turn(sid, {"role": "assistant", "content": "a"}, "key-1")
    assert not again.duplicate and again.turn_seq == 0  # the key was released


@pytest.mark.slow
def test_concurrent_adds_and_pops_lose_nothing(astore: Any) -> None:
    """Pops racing appends: every item is either still stored or was returned by exactly
    one pop; a pop never removes an item it did not return."""

    async def main() -> None:
        store = await astore()
        try:
            session = ShardstoreSession("race", store, tenant_id="acme")
            await session.add_items([{"role": "user", "content": "seed"}])
            added = [{"role": "user", "content": f"w{w}-{i}"} for w in range(3) for i in range(15)]

            async def writer(w: int) -> None:
                for i in range(15):
                    await session.add_items([{"role": "user", "content": f"w{w}-{i}"}])

            async def popper() -> list[Any]:
                got = []
                for _ in range(15):
                    item = await session.pop_item()
                    if item is not None:
                        got.append(item)
                    await asyncio.sleep(0)
                return got

            results = await asyncio.gather(writer(0), writer(1), writer(2), popper(), popper())
            popped = results[3] + results[4]
            left = await session.get_items()
            everything = sorted(
                json.dumps(i) for i in [*added, {"role": "user", "content": "seed"}]
            )
            assert sorted(json.dumps(i) for i in left + popped) == everything
        finally:
            await store.close()

    run(main())


def test_a_cancelled_add_items_still_finishes_its_write(astore: Any, dsn: str) -> None:
    """The SDK may cancel a run while it saves; the write in flight completes (or fails)
    before the cancellation reaches the caller, so the caller knows where it stands."""

    async def main() -> None:
        store = await astore()
        try:
            session = ShardstoreSession("cancel", store, tenant_id="acme")
            await session.add_items([{"role": "user", "content": "first"}])
            sid = session.shardstore_session_id
            with psycopg.connect(dsn) as blocker:
                blocker.execute(
                    "SELECT 1 FROM shardstore.sessions WHERE session_id = %s FOR UPDATE", (sid,)
                )
                task = asyncio.ensure_future(
                    session.add_items([{"role": "assistant", "content": "second"}])
                )
                for _ in range(500):  # until the append waits for the row lock
                    await asyncio.sleep(0.01)
                    waiting = blocker.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND datname = current_database()"
                    ).fetchone()
                    if waiting and waiting[0]:
                        break
                task.cancel()
                await asyncio.sleep(0.05)
                assert not task.done()  # still waiting for its write's outcome
                blocker.rollback()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert [i["content"] for i in await session.get_items()] == ["first", "second"]
        finally:
            await store.close()

    run(main())


# ---------------------------------------------------------------- a model of the protocol


ITEM = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system"]), "content": st.text(max_size=20)}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": st.text(min_size=1, max_size=5),
            "name": st.just("f"),
            "arguments": st.text(max_size=10),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call_output"),
            "call_id": st.text(min_size=1, max_size=5),
            "output": st.one_of(
                st.text(max_size=10), st.floats(allow_nan=False, allow_infinity=False)
            ),
        }
    ),
)
STEP = st.one_of(
    st.tuples(st.just("add"), st.lists(ITEM, max_size=5)),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("get"), st.one_of(st.none(), st.integers(0, 8))),
    st.tuples(st.just("clear"), st.none()),
)


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, max_size=12))
def test_session_against_a_list_model(store: shardstore.Store, steps: list[Any]) -> None:
    session = ShardstoreSession(f"model-{uuid.uuid4()}", store, tenant_id="acme")
    model: list[Any] = []

    async def main() -> None:
        for kind, arg in steps:
            if kind == "add":
                await session.add_items(copy.deepcopy(arg))
                model.extend(arg)
            elif kind == "pop":
                assert await session.pop_item() == (model.pop() if model else None)
            elif kind == "get":
                expected = (
                    model if arg is None else model[max(0, len(model) - arg) :] if arg else []
                )
                assert await session.get_items(arg) == expected
            else:
                await session.clear_session()
                model.clear()
        assert await session.get_items() == model

    run(main())


# ---------------------------------------------------------------- ownership and hostile input


def test_a_uuid_session_of_another_tenant_is_refused(store: shardstore.Store) -> None:
    sid = store.create_session("other-tenant")
    store.append_turn(sid, {"role": "user", "content": "theirs"})
    session = ShardstoreSession(str(sid), store, tenant_id="acme")
    with pytest.raises(shardstore.SessionConflict):
        run(session.add_items([{"role": "user", "content": "mine"}]))
    with pytest.raises(shardstore.SessionConflict):
        run(session.get_items())
    assert [t.message["content"] for t in store.tail(sid)] == ["theirs"]
    # the owner's tenant reads it (a UUID id is used as it is)
    assert run(ShardstoreSession(str(sid), store, tenant_id="other-tenant").get_items()) == [
        {"role": "user", "content": "theirs"}
    ]


def test_a_purged_session_is_refused(store: shardstore.Store) -> None:
    session = ShardstoreSession("gone", store, tenant_id="acme")
    run(session.add_items([{"role": "user", "content": "x"}]))
    store.purge_session(session.shardstore_session_id)
    fresh = ShardstoreSession("gone", store, tenant_id="acme")
    for call in (fresh.get_items, fresh.pop_item, fresh.clear_session):
        with pytest.raises(shardstore.SessionPurged):
            run(call())
    with pytest.raises(shardstore.SessionPurged):
        run(fresh.add_items([{"role": "user", "content": "y"}]))


BAD_IDS: list[Any] = ["", None, 42, b"bytes", "a\x00b", "\ud800", "x" * 600, ["chat"]]


@pytest.mark.slow
@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_bad_session_ids(store: shardstore.Store, dsn: str, bad: Any) -> None:
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreSession(bad, store, tenant_id="acme")
    assert _count_sessions(dsn) == 0


@pytest.mark.parametrize("bad", ["", None, 7, "t\x00", "\udfff", "t" * 300])
def test_bad_tenants_and_owners(store: shardstore.Store, bad: Any) -> None:
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreSession("s", store, tenant_id=bad)
    if bad is not None:
        with pytest.raises(shardstore.InvalidInput):
            ShardstoreSession("s", store, tenant_id="acme", subject_id=bad)


@pytest.mark.parametrize(
    "bad",
    [None, "postgresql://x", object(), SQLiteSession("x")],
    ids=["none", "dsn", "obj", "sqlite"],
)
def test_wrong_store_type(bad: Any) -> None:
    with pytest.raises(shardstore.ConfigurationError, match="Store"):
        ShardstoreSession("s", bad, tenant_id="acme")


def test_a_psycopg_connection_is_not_a_store(dsn: str) -> None:
    with psycopg.connect(dsn) as conn, pytest.raises(shardstore.ConfigurationError):
        ShardstoreSession("s", conn, tenant_id="acme")


BAD_ITEMS: list[Any] = [
    ["not a dict"],
    [{"content": "no role or type"}],
    [{"role": None, "type": "message"}],
    [{"role": "user", "content": float("nan")}],
    [{"role": "user", "content": object()}],
    [{"role": "user", 1: "int key"}],
    [{"role": "user", "content": "ok"}, 5],  # one bad item: the good one is not stored
    "a string",
    {"role": "user", "content": "a dict, not a list"},
    None,
]


def _item_id(bad: Any) -> str:
    """repr without object addresses: pytest-xdist's workers must collect the same ids."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(bad))


@pytest.mark.slow
@pytest.mark.parametrize("bad", BAD_ITEMS, ids=_item_id)
def test_bad_items_write_nothing(store: shardstore.Store, dsn: str, bad: Any) -> None:
    fresh = ShardstoreSession("hostile-new", store, tenant_id="acme")
    with pytest.raises(shardstore.InvalidInput):
        run(fresh.add_items(bad))
    assert _count_sessions(dsn) == 0  # not even the session was created
    used = ShardstoreSession("hostile-used", store, tenant_id="acme")
    run(used.add_items([{"role": "user", "content": "kept"}]))
    with pytest.raises(shardstore.InvalidInput):
        run(used.add_items(bad))
    assert run(used.get_items()) == [{"role": "user", "content": "kept"}]


@pytest.mark.parametrize("bad", [-1, True, "3", 2.0, 2**40])
def test_bad_limits(store: shardstore.Store, bad: Any) -> None:
    session = ShardstoreSession("limits", store, tenant_id="acme")
    run(session.add_items([{"role": "user", "content": "x"}]))
    with pytest.raises(shardstore.InvalidInput):
        run(session.get_items(bad))


@pytest.mark.parametrize("bad", [{"limit": "many"}, {"nope": 1}, 42])
def test_bad_session_settings(store: shardstore.Store, bad: Any) -> None:
    with pytest.raises(shardstore.InvalidInput):
        ShardstoreSession("s", store, tenant_id="acme", session_settings=bad)


def test_too_large_an_item(store: shardstore.Store, dsn: str) -> None:
    session = ShardstoreSession("big", store, tenant_id="acme")
    with pytest.raises(shardstore.TurnTooLarge):
        run(session.add_items([{"role": "user", "content": "x" * (17 << 20)}]))
    assert _count_sessions(dsn) == 0


# ---------------------------------------------------------------- async parity


def test_async_and_sync_stores_give_the_same_answers(astore: Any, store: shardstore.Store) -> None:
    async def drive(session: ShardstoreSession) -> list[Any]:
        out: list[Any] = []
        await session.add_items(copy.deepcopy(RESPONSES_ITEMS))
        out.append(await session.get_items(limit=3))
        out.append(await session.pop_item())
        out.append(await session.get_items())
        await session.clear_session()
        out.append(await session.get_items())
        await session.add_items([{"role": "user", "content": "again"}])
        out.append(await session.get_items())
        with pytest.raises(shardstore.InvalidInput):
            await session.add_items([{"nope": 1}])
        with pytest.raises(shardstore.InvalidInput):
            await session.get_items(-2)
        return out

    async def with_async() -> list[Any]:
        astore_ = await astore()
        try:
            return await drive(ShardstoreSession("parity-a", astore_, tenant_id="acme"))
        finally:
            await astore_.close()

    sync_answers = run(drive(ShardstoreSession("parity-s", store, tenant_id="acme")))
    assert run(with_async()) == sync_answers
    assert sync_answers[0] == RESPONSES_ITEMS[-3:]
    assert sync_answers[1] == RESPONSES_ITEMS[-1]


@pytest.mark.slow
def test_without_the_extra_the_import_names_the_pip_command() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['agents'] = None\n"  # as if not installed
        "import shardstore\n"
        "try:\n"
        "    import shardstore.integrations.openai_agents\n"
        "except shardstore.MissingDependency as exc:\n"
        "    print(isinstance(exc, ImportError), exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("True ") and "shardstore[openai-agents]" in out.stdout
