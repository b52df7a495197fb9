"""store.context(): a budgeted view of a session (summaries, facts, recalled and recent
turns) that never changes the log. The property test builds random histories of mixed
formats with oversize turns and checks, for random budgets: within the budget, pairs
whole, the newest turn's unit present when it fits alone, order, determinism."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.cli.app import main
from shardstore.context import assembly
from shardstore.history.pairing import (
    is_reasoning,
    is_tool_result,
    responses_call_id,
    responses_result_id,
)
from shardstore.history.tokens import TiktokenCounter, make_counter
from shardstore.models import Turn

SMALL = {"chunk_tokens": 400}


def stub(turns: list[Turn]) -> str:
    return f"summary of turns {turns[0].turn_seq}-{turns[-1].turn_seq}"


def chat_pair(i: int) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"},
    ]


def responses_triple(i: int) -> list[dict[str, Any]]:
    return [
        {"type": "reasoning", "id": f"r{i}", "summary": [{"type": "summary_text", "text": "hm"}]},
        {"type": "function_call", "call_id": f"k{i}", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"k{i}", "output": f"out {i}"},
    ]


def anthropic_pair(i: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"a{i}", "name": "h", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"a{i}", "content": "ok"}],
        },
    ]


def plain(i: int, size: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"turn {i} " + "w " * size}]


def chat_parallel(i: int, size: int) -> list[dict[str, Any]]:
    """One call message with two tool calls, then both results (the second one large)."""
    calls = [
        {"id": f"p{i}{j}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for j in range(2)
    ]
    return [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": f"p{i}0", "content": "first"},
        {"role": "tool", "tool_call_id": f"p{i}1", "content": "w " * size},
    ]


def responses_parallel(i: int, size: int) -> list[dict[str, Any]]:
    """Two parallel Responses calls (separate items), then both outputs (the first one
    large): a unit boundary between the calls would orphan the first output."""
    calls = [
        {"type": "function_call", "call_id": f"q{i}{j}", "name": "g", "arguments": "{}"}
        for j in range(2)
    ]
    return [
        *calls,
        {"type": "function_call_output", "call_id": f"q{i}0", "output": "w " * size},
        {"type": "function_call_output", "call_id": f"q{i}1", "output": "second"},
    ]


def legacy_function_pair(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": f"legacy {i}"},
    ]


def responses_reasoning_message(i: int) -> list[dict[str, Any]]:
    return [
        {"type": "reasoning", "id": f"m{i}", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
    ]


def langchain_pair(i: int) -> list[dict[str, Any]]:
    call = {"name": "f", "args": {}, "id": f"l{i}", "type": "tool_call"}
    return [
        {"type": "ai", "data": {"content": "", "tool_calls": [call]}},
        {"type": "tool", "data": {"content": f"lc {i}", "tool_call_id": f"l{i}"}},
    ]


def seed_pair(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": "calling", "metadata": {"tool_calls": [f"s{i}"]}},
        {"role": "observation", "content": "seen", "metadata": {"tool_call_id": f"s{i}"}},
    ]


SIZES = st.sampled_from([1, 5, 40, 300, 1200])
BLOCK = st.one_of(
    st.builds(plain, st.integers(0, 1000), SIZES),
    st.builds(chat_pair, st.integers(0, 1000)),
    st.builds(responses_triple, st.integers(0, 1000)),
    st.builds(anthropic_pair, st.integers(0, 1000)),
    st.builds(chat_parallel, st.integers(0, 1000), SIZES),
    st.builds(legacy_function_pair, st.integers(0, 1000)),
    st.builds(responses_reasoning_message, st.integers(0, 1000)),
    st.builds(langchain_pair, st.integers(0, 1000)),
    st.builds(seed_pair, st.integers(0, 1000)),
    st.builds(responses_parallel, st.integers(0, 1000), SIZES),
)


def call_of(history: list[Turn], k: int) -> int | None:
    """Where the Responses output at ``k`` has its call: the nearest earlier item with its
    call_id (ids may repeat across a history: some models number their calls per reply)."""
    call_id = responses_result_id(history[k].message)
    if call_id is None:
        return None
    return next(
        (j for j in range(k - 1, -1, -1) if responses_call_id(history[j].message) == call_id),
        None,
    )


def unit_of_newest(history: list[Turn]) -> list[Turn]:
    """The newest turn with what it cannot be sent without (plans' pairing rules)."""
    i = len(history) - 1
    while True:
        while i > 0 and (
            is_tool_result(history[i].message) or is_reasoning(history[i - 1].message)
        ):
            i -= 1
        # back to the call of every Responses output in it (parallel calls are items)
        wanted = [call_of(history, k) for k in range(i, len(history))]
        earliest = min((j for j in wanted if j is not None), default=i)
        if earliest >= i:
            return history[i:]
        i = earliest


def check(
    ctx: shardstore.Context,
    history: list[Turn],
    budget: int,
    size: Any = None,
) -> None:
    """The rules, ``size(turn)`` being a turn's tokens by the counter the context was
    built with (default: the store's stored counts)."""
    tokens_of = size or (lambda t: t.tokens)
    assert ctx.tokens <= budget
    assert ctx.tokens == sum(p.tokens for p in ctx.parts)
    assert len(ctx.messages) == len(ctx.parts)
    kinds = [p.kind for p in ctx.parts]
    order = {"summary": 0, "facts": 0, "recall": 1, "recent": 2}
    assert [order[k] for k in kinds] == sorted(order[k] for k in kinds)
    recent = [p.first_turn_seq for p in ctx.parts if p.kind == "recent"]
    by_seq = {t.turn_seq: t for t in history}
    if recent:
        # contiguous up to the newest turn, never opening on a result or a follower
        assert recent == list(range(recent[0], history[-1].turn_seq + 1))
        first = by_seq[recent[0]]
        assert not is_tool_result(first.message)
        assert recent[0] == 0 or not is_reasoning(by_seq[recent[0] - 1].message)
        # no Responses output without its call (by call_id) when the call is in the history
        index = {t.turn_seq: k for k, t in enumerate(history)}
        for seq in recent:
            call = call_of(history, index[seq])
            assert call is None or history[call].turn_seq >= recent[0], (seq, call)
    for message, part in zip(ctx.messages, ctx.parts, strict=True):
        if part.kind == "recent":
            assert message == by_seq[part.first_turn_seq].message
        else:
            assert message["role"] == "system"
    unit = unit_of_newest(history)
    if sum(tokens_of(t) for t in unit) <= budget and not is_tool_result(unit[0].message):
        assert history[-1].turn_seq in recent
        # the newest turn's unit is there whole: the call its results answer, its reasoning
        assert recent[0] <= unit[0].turn_seq


def reference(
    store: shardstore.Store, sid: uuid.UUID, budget: int, recent_min: int | None
) -> shardstore.Context:
    """The context by the rule alone, from public reads: the tail within the budget, every
    summary (newest first, those before the recent part, at most the read limit), every
    message counted."""
    window = store.tail(sid, max_tokens=budget)
    minimum = budget // 2 if recent_min is None else recent_min
    groups = assembly.units(window)
    sizes = [sum(t.tokens for t in g) for g in groups]
    taken = assembly.first_units(sizes, budget, minimum)
    start = groups[len(groups) - taken][0].turn_seq if taken else store.session(sid).turn_count
    limit = min(assembly.MAX_SUMMARIES, budget // 8 + 1)
    older = [s for s in reversed(store.summaries(sid)) if s.last_turn_seq < start][:limit]
    return assembly.plan(
        window,
        max_tokens=budget,
        recent_min_tokens=minimum,
        turn_tokens=lambda t: t.tokens,
        count=assembly.message_counter(make_counter(None)),
        summaries=older,
    )


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    blocks=st.lists(BLOCK, min_size=1, max_size=14),
    budget=st.integers(1, 4000),
    recent_min=st.one_of(st.none(), st.integers(0, 4000)),
    summarise=st.booleans(),
    recall=st.sampled_from([None, "result", "turn 7 w"]),
)
def test_context_properties(
    store: shardstore.Store,
    blocks: list[list[dict[str, Any]]],
    budget: int,
    recent_min: int | None,
    summarise: bool,
    recall: str | None,
) -> None:
    sid = store.create_session("t1")
    store.append_turns(sid, [m for block in blocks for m in block])
    store.flush(sid)
    if summarise:
        store.summarize(stub, session_id=sid)
    history = list(store.history(sid))
    ctx = store.context(sid, budget, recent_min_tokens=recent_min, recall=recall)
    check(ctx, history, budget)
    assert store.context(sid, budget, recent_min_tokens=recent_min, recall=recall) == ctx
    assert list(store.history(sid)) == history  # the log is never changed
    if recall is None:  # one statement, stored summary counts: the same as the rule alone
        assert ctx == reference(store, sid, budget, recent_min)


class Scaled:
    """A tokenizer of your own: cl100k_base scaled (2x, 1/8x), or one token per message."""

    def __init__(self, factor: float | None) -> None:
        self.base = TiktokenCounter("cl100k_base")
        self.factor = factor
        self.name = f"scaled-{factor}"

    def count(self, text: str) -> int:
        if self.factor is None:
            return 1
        return max(1, int(self.base.count(text) * self.factor))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    blocks=st.lists(BLOCK, min_size=1, max_size=12),
    budget=st.integers(1, 3000),
    factor=st.sampled_from([None, 0.125, 2.0]),
    facts=st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 60)), max_size=6),
    recall=st.sampled_from([None, "result"]),
)
# call ids repeated across replies (the checks pair an output with its nearest call)
@pytest.mark.slow
@example(
    blocks=[responses_parallel(8, 1), responses_parallel(8, 1)],
    budget=8,
    factor=None,
    facts=[],
    recall=None,
)
def test_context_properties_own_tokenizer_and_facts(
    store: shardstore.Store,
    blocks: list[list[dict[str, Any]]],
    budget: int,
    factor: float | None,
    facts: list[tuple[str, int]],
    recall: str | None,
) -> None:
    """The same rules by a tokenizer passed in (one counting far fewer tokens than the
    store's included, so the newest unit may be far over the budget in stored counts),
    with facts in the budget too: every part counted by that tokenizer."""
    sid = store.create_session("t1")
    subject = f"user:{uuid.uuid4()}"
    store.append_turns(sid, [m for block in blocks for m in block])
    for key, words in facts:
        store.remember("t1", subject, key, "v " * words, source=(sid, 0))
    tokenizer = Scaled(factor)
    count = assembly.message_counter(tokenizer)
    history = list(store.history(sid))
    ctx = store.context(sid, budget, facts_subject=subject, recall=recall, tokenizer=tokenizer)
    check(ctx, history, budget, size=lambda t: count(t.message))
    for message, part in zip(ctx.messages, ctx.parts, strict=True):
        assert part.tokens == count(message)  # every part by the tokenizer passed
    current = {f.fact_id for f in store.recall("t1", subject)}
    for part in ctx.parts:
        if part.kind == "facts":
            assert part.fact_ids and set(part.fact_ids) <= current
    again = store.context(sid, budget, facts_subject=subject, recall=recall, tokenizer=tokenizer)
    assert again == ctx


def test_own_tokenizer_newest_turn_over_the_store_fetch(store: shardstore.Store) -> None:
    """A tokenizer counting far fewer tokens than the store's: the newest turn (and a
    tool pair whose result is huge) is there when it fits by that tokenizer, though it is
    far over the budget (and the 4x fetch) in the store's counts."""
    one = Scaled(None)
    sid = store.create_session("t1")
    store.append_turns(sid, [*plain(0, 5), *plain(1, 3000)])
    ctx = store.context(sid, 10, tokenizer=one)
    assert [p.first_turn_seq for p in ctx.parts] == [0, 1] and ctx.tokens == 2
    assert store.context(sid, 1, tokenizer=one).parts[0].first_turn_seq == 1
    pair = store.create_session("t1")
    store.append_turns(pair, [*plain(0, 5), *chat_parallel(1, 3000)])
    ctx = store.context(pair, 3, tokenizer=one)
    assert [p.first_turn_seq for p in ctx.parts] == [1, 2, 3]  # the call and both results
    assert store.context(pair, 2, tokenizer=one).parts == []  # the unit does not fit: none
    assert store.context(pair, 3).parts == []  # by the store's counts it does not fit


@pytest.fixture
def long_session(make_store: Any) -> tuple[shardstore.Store, uuid.UUID]:
    store = make_store(**SMALL)
    sid = store.create_session("t1", subject_id="user:1")
    turns = [m for i in range(40) for m in plain(i, 20)]
    turns[9] = {"role": "user", "content": "my order id is QX-4471, please track it"}
    store.append_turns(sid, turns)
    store.drain_folds()
    return store, sid


def test_parts_summaries_facts_recall_recent(long_session: Any) -> None:
    store, sid = long_session
    store.summarize(stub)
    fact = store.remember("t1", "user:1", "plan", "pro", source=(sid, 3))
    ctx = store.context(sid, 1500, recall="QX-4471", facts_subject="user:1")
    kinds = [p.kind for p in ctx.parts]
    assert {"summary", "facts", "recall", "recent"} <= set(kinds)
    facts = next(p for p in ctx.parts if p.kind == "facts")
    assert facts.fact_ids == (fact.fact_id,)
    recalled = [p for p in ctx.parts if p.kind == "recall"]
    assert any(p.first_turn_seq <= 9 <= p.last_turn_seq for p in recalled)
    message = ctx.messages[kinds.index("recall")]
    assert "Recalled" in message["content"] and "QX-4471" in message["content"]
    for p in ctx.parts:
        if p.kind == "summary":
            assert p.last_turn_seq is not None and p.first_turn_seq is not None
            assert p.last_turn_seq < min(q.first_turn_seq for q in ctx.parts if q.kind == "recent")
    check(ctx, list(store.history(sid)), 1500)


def test_degrades_without_summaries(long_session: Any) -> None:
    store, sid = long_session
    ctx = store.context(sid, 800, recall="QX-4471")
    assert {p.kind for p in ctx.parts} <= {"recent", "recall"} and ctx.tokens <= 800
    store.summarize(stub)
    off = store.context(sid, 800, recall="QX-4471", summaries=False)
    assert "summary" not in {p.kind for p in off.parts}
    assert "summary" in {p.kind for p in store.context(sid, 800).parts}


def test_parallel_responses_calls_stay_one_unit(store: shardstore.Store) -> None:
    """[call c1][call c2, output c1, output c2]: a budget that holds the second group but
    not both gets no recent part (the newest turn's unit does not fit), never output c1
    without call c1; a budget that holds both gets all four."""
    sid = store.create_session("acme")
    store.append_turns(sid, [m for i in range(3) for m in plain(i, 5)])
    store.append_turns(sid, responses_parallel(7, 300))
    turns = store.tail(sid, n=4)
    assert [t.message.get("type") for t in turns] == ["function_call"] * 2 + [
        "function_call_output"
    ] * 2
    parted = sum(t.tokens for t in turns[1:])  # c2, o1, o2
    ctx = store.context(sid, parted, summaries=False)
    assert [p for p in ctx.parts if p.kind == "recent"] == []
    whole = store.context(sid, parted + turns[0].tokens, summaries=False)
    recent = [p.first_turn_seq for p in whole.parts if p.kind == "recent"]
    assert recent[-4:] == [t.turn_seq for t in turns]
    # the grouping itself: one unit, whatever the budget split would prefer
    assert [[t.turn_seq for t in u] for u in assembly.units(turns)] == [[t.turn_seq for t in turns]]
    reasoned = [
        Turn(i, m, 1, turns[0].created_at, 0, None)
        for i, m in enumerate(
            [{"type": "reasoning", "id": "r", "summary": []}, *responses_parallel(8, 1)]
        )
    ]
    assert len(assembly.units(reasoned)) == 1


def test_custom_tokenizer_budget(long_session: Any) -> None:
    store, sid = long_session
    counter = TiktokenCounter("cl100k_base")

    class Double:
        name = "double"

        def count(self, text: str) -> int:
            return 2 * counter.count(text)

    ctx = store.context(sid, 500, tokenizer=Double())
    plain_ctx = store.context(sid, 500)
    assert ctx.tokens <= 500
    assert len(ctx.messages) < len(plain_ctx.messages)


def test_newest_turn_too_big(store: shardstore.Store) -> None:
    sid = store.create_session("t1")
    store.append_turns(sid, [*plain(0, 5), *plain(1, 2000)])
    ctx = store.context(sid, 100)
    assert ctx.messages == [] and ctx.tokens == 0
    empty = store.create_session("t1")
    assert store.context(empty, 100) == shardstore.Context([], [], 0)


def test_hostile_input(long_session: Any) -> None:
    store, sid = long_session
    before = list(store.history(sid))
    bad: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("nope", 100), {}),
        ((sid, 0), {}),
        ((sid, -5), {}),
        ((sid, "100"), {}),
        ((sid, True), {}),
        ((sid, 2**64), {}),
        ((sid, 100), {"recent_min_tokens": -1}),
        ((sid, 100), {"recall": ""}),
        ((sid, 100), {"recall": "a\x00b"}),
        ((sid, 100), {"recall": 5}),
        ((sid, 100), {"k": 0}),
        ((sid, 100), {"k": 10_000}),
        ((sid, 100), {"facts_subject": ""}),
        ((sid, 100), {"summaries": "yes"}),
    ]
    for args, kwargs in bad:
        with pytest.raises(shardstore.InvalidInput):
            store.context(*args, **kwargs)
    with pytest.raises(shardstore.ConfigurationError):
        store.context(sid, 100, tokenizer=42)
    with pytest.raises(shardstore.SessionNotFound):
        store.context(uuid.uuid4(), 100)
    store.purge_session(sid)
    with pytest.raises(shardstore.SessionPurged):
        store.context(sid, 100)
    assert before  # the session had turns; context() wrote nothing (read-only snapshot)


@pytest.mark.slow
def test_async_parity(dsn: str) -> None:
    store = shardstore.connect(dsn, **SMALL)
    sid = store.create_session("t1")
    store.append_turns(sid, [m for i in range(30) for m in plain(i, 20)])
    store.drain_folds()
    store.summarize(stub)
    want = store.context(sid, 700, recall="turn 3")
    store.close()

    async def go() -> shardstore.Context:
        astore = await shardstore.connect_async(dsn, **SMALL)
        try:
            return await astore.context(sid, 700, recall="turn 3")
        finally:
            await astore.close()

    assert asyncio.run(go()) == want and want.parts


@pytest.mark.slow
def test_cli_context(long_session: Any, capsys: Any) -> None:
    store, sid = long_session
    args = ["--dsn", store.dsn or "", "context", str(sid), "--max-tokens", "600"]
    assert main([*args, "--recall", "QX-4471"]) == 0
    out = capsys.readouterr().out
    assert "recent" in out and "recall" in out and "of 600 tokens" in out
    assert main(["--json", *args]) == 0
    assert '"tokens"' in capsys.readouterr().out
    assert main([*args[:-1], "0"]) == 2
    fact = store.remember("t1", "user:1", "plan", "pro", source=(sid, 3))
    assert main(["--json", *args, "--facts", "user:1", "--recall", "QX-4471"]) == 0
    shown = json.loads(capsys.readouterr().out)
    kinds = [m["kind"] for m in shown["messages"]]
    assert "facts" in kinds and "recall" in kinds and shown["tokens"] <= 600
    facts = shown["messages"][kinds.index("facts")]
    assert facts["fact_ids"] == [str(fact.fact_id)] and "plan" in facts["message"]["content"]
    assert main([*args, "--facts", "user:1"]) == 0
    assert "1 facts" in capsys.readouterr().out
    assert main([*args, "--facts", ""]) == 2  # an empty subject: refused, like the API
