"""Message formats (issue 12, section 1): every common format is accepted, round-trips
exactly, and no tail, restore or search window starts with a result whose call it cut off
(or with an item whose Responses ``reasoning`` item it cut off)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.history.pairing import is_reasoning, is_tool_result, trim_tail, whole_window
from shardstore.models import Turn
from shardstore.search.embedding import message_text
from tests.embedders import HashEmbedder

Message = dict[str, Any]
AT = datetime(2024, 1, 1, tzinfo=UTC)


# ------------------------------------------------------------------ one call + result per format


def chat(i: int) -> list[Message]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i}"},
    ]


def responses(i: int) -> list[Message]:
    return [
        {"type": "reasoning", "id": f"rs{i}", "summary": [{"type": "summary_text", "text": "hm"}]},
        {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{i}", "output": f"out {i}"},
    ]


def responses_computer(i: int) -> list[Message]:
    return [
        {"type": "computer_call", "call_id": f"k{i}", "action": {"type": "click", "x": 1}},
        {"type": "computer_call_output", "call_id": f"k{i}", "output": {"type": "input_image"}},
    ]


def anthropic(i: int) -> list[Message]:
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}],
        },
    ]


def langchain(i: int) -> list[Message]:
    return [
        {"type": "ai", "content": "", "tool_calls": [{"name": "f", "args": {}, "id": f"l{i}"}]},
        {"type": "tool", "content": "ok", "tool_call_id": f"l{i}"},
    ]


def langchain_dumped(i: int) -> list[Message]:
    return [
        {
            "type": "ai",
            "data": {"content": "", "tool_calls": [{"name": "f", "args": {}, "id": f"d{i}"}]},
        },
        {"type": "tool", "data": {"content": "ok", "tool_call_id": f"d{i}"}},
    ]


def seed(i: int) -> list[Message]:
    return [
        {"role": "assistant", "content": "calling", "metadata": {"tool_name": "f"}},
        {"role": "tool_output", "content": "ok", "metadata": {"tool_call_id": f"s{i}"}},
    ]


FORMATS: dict[str, Callable[[int], list[Message]]] = {
    "chat": chat,
    "responses": responses,
    "responses_computer": responses_computer,
    "anthropic": anthropic,
    "langchain": langchain,
    "langchain_dumped": langchain_dumped,
    "seed": seed,
}
PLAIN: dict[str, Callable[[int], Message]] = {
    "chat": lambda i: {"role": "user", "content": f"question {i}"},
    "responses": lambda i: {"type": "message", "role": "user", "content": f"question {i}"},
    "responses_computer": lambda i: {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": f"a {i}"}],
    },
    "anthropic": lambda i: {"role": "user", "content": [{"type": "text", "text": f"q {i}"}]},
    "langchain": lambda i: {"type": "human", "content": f"question {i}"},
    "langchain_dumped": lambda i: {"type": "human", "data": {"content": f"question {i}"}},
    "seed": lambda i: {"role": "user", "content": f"question {i}"},
}


def turns_of(messages: list[Message]) -> list[Turn]:
    return [Turn(i, m, 1, AT, 0) for i, m in enumerate(messages)]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_is_tool_result_per_format(fmt: str) -> None:
    pair = FORMATS[fmt](0)
    assert [is_tool_result(m) for m in pair] == [False] * (len(pair) - 1) + [True]
    assert not is_tool_result(PLAIN[fmt](0))


def test_other_responses_pairs_and_kinds() -> None:
    for kind in ("custom_tool_call_output", "local_shell_call_output", "mcp_approval_response"):
        assert is_tool_result({"type": kind, "call_id": "x"})
    for kind in ("message", "reasoning", "file_search_call", "web_search_call", "mcp_call"):
        assert not is_tool_result({"type": kind})
    assert is_reasoning({"type": "reasoning"}) and not is_reasoning({"type": "message"})
    dumpd = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "ToolMessage"],
        "kwargs": {"content": "x", "tool_call_id": "1"},
    }
    assert is_tool_result(dumpd)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_trim_tail_drops_only_orphaned_leading_results(fmt: str) -> None:
    convo = [PLAIN[fmt](0), *FORMATS[fmt](0), PLAIN[fmt](1)]
    turns = turns_of(convo)
    assert trim_tail(turns) == turns  # the call is inside: kept whole
    last = len(convo) - 2  # the result
    assert trim_tail(turns[last:]) == turns[last + 1 :]  # its call cut off: dropped
    assert trim_tail(turns[last + 1 :]) == turns[last + 1 :]


def test_reasoning_stays_with_the_item_after_it() -> None:
    convo = [
        {"role": "user", "content": "q"},
        *responses(0),
        {"type": "message", "role": "assistant", "content": "a"},
    ]
    turns = turns_of(convo)
    # the window starts at the function_call whose reasoning item (turn 1) was cut
    assert trim_tail(turns[2:], before=convo[1]) == turns[4:]  # call, then its output: dropped
    assert trim_tail(turns[2:], before=None) == turns[2:]  # predecessor not reasoning
    assert trim_tail(turns[1:], before=convo[0]) == turns[1:]  # starts at the reasoning: fine
    # a reasoning item at the window's start is kept with its follower
    assert trim_tail(turns[1:]) == turns[1:]
    # a window starting at a reasoning item's follower inside a run: reasoning cut -> drop
    two = [
        {"type": "reasoning", "id": "r"},
        {"type": "message", "role": "assistant", "content": "x"},
    ]
    assert trim_tail(turns_of(two)[1:], before=two[0]) == []


def test_whole_window_widens_back_to_the_call() -> None:
    convo = [{"role": "user", "content": "q"}, *responses(0)]
    turns = turns_of(convo)
    assert whole_window(turns, 3) == turns[1:]  # output -> call -> its reasoning
    assert whole_window(turns[3:], 0) == []  # the call is not in the context
    chat_convo = [{"role": "user", "content": "q"}, *chat(0)]
    assert whole_window(turns_of(chat_convo), 2) == turns_of(chat_convo)[1:]


def test_a_window_between_parallel_responses_calls_drops_their_outputs() -> None:
    """Responses parallel calls are separate items: a window opening at the second call
    would hold the first call's output without its call (the API refuses it), so trim_tail
    drops up to that output and the rest of the group's outputs with it."""
    group = responses_parallel(0, [0, 1], reasoning=True)  # rs, c0, c1, out c0, out c1
    convo = [{"role": "user", "content": "q"}, *group, {"role": "user", "content": "next"}]
    turns = turns_of(convo)
    assert trim_tail(turns) == turns
    assert trim_tail(turns[1:]) == turns[1:]  # from the reasoning item: whole
    assert trim_tail(turns[2:], before=convo[1]) == turns[6:]  # its reasoning cut off
    assert trim_tail(turns[3:], before=convo[2]) == turns[6:]  # between the calls
    assert trim_tail(turns[3:6], before=convo[2]) == []
    # outputs in the other order: the orphan is the second output; still all dropped
    swapped = responses_parallel(0, [1, 0], reasoning=False)  # c0, c1, out c1, out c0
    st_turns = turns_of([*swapped, {"role": "user", "content": "next"}])
    assert trim_tail(st_turns[1:]) == st_turns[4:]
    # an output whose call no item carries is an orphan in the leading run of calls (the
    # window cut there); further on it is data without its call, not a cut: kept
    stray = turns_of(
        [
            {"role": "user", "content": "q"},
            {"type": "function_call_output", "call_id": "nowhere", "output": "x"},
            {"role": "user", "content": "after"},
        ]
    )
    assert trim_tail(stray) == stray
    lead = turns_of([group[1], stray[1].message, convo[-1]])  # call c0, out "nowhere", user
    assert trim_tail(lead) == lead[2:]
    # an output after a plain message whose call this trim dropped is an orphan too
    late = [*group[1:4], {"type": "message", "role": "assistant", "content": "m"}, group[4]]
    late_turns = turns_of(late)  # c0, c1, out c0, message, out c1
    assert trim_tail(late_turns) == late_turns
    assert trim_tail(late_turns[1:]) == []  # a suffix: the message before out c1 goes too
    no_id = turns_of([{"role": "user", "content": "q"}, {"type": "function_call_output"}])
    assert trim_tail(no_id) == no_id
    # MCP approvals pair by approval_request_id
    approval = turns_of(
        [
            {"type": "mcp_approval_request", "id": "a1", "name": "t", "arguments": "{}"},
            {"type": "mcp_approval_request", "id": "a2", "name": "t", "arguments": "{}"},
            {"type": "mcp_approval_response", "approval_request_id": "a1", "approve": True},
            {"type": "mcp_approval_response", "approval_request_id": "a2", "approve": True},
        ]
    )
    assert trim_tail(approval) == approval
    assert trim_tail(approval[1:]) == []
    # chat parallel calls are one message: a window cannot start between them
    chat_turns = turns_of(chat_parallel(0, [1, 0]))
    assert trim_tail(chat_turns) == chat_turns


def test_whole_window_widens_back_over_parallel_calls() -> None:
    group = responses_parallel(0, [0, 1, 2], reasoning=True)
    turns = turns_of([{"role": "user", "content": "q"}, *group])
    # a hit on the last output: back over the outputs and all three calls to the reasoning
    assert whole_window(turns, len(turns) - 1) == turns[1:]
    # the first call is outside the fetched context: nothing of the group is shown
    assert whole_window(turns[3:], 3) == []


def test_message_text_of_the_new_formats() -> None:
    assert (
        message_text({"type": "function_call", "name": "lookup", "arguments": '{"q": "refund"}'})
        == 'function_call lookup: {"q": "refund"}'
    )
    assert (
        message_text({"type": "function_call_output", "call_id": "c", "output": "42"})
        == "function_call_output: 42"
    )
    assert message_text(responses(0)[0]) == "reasoning: hm"
    assert "click" in message_text(responses_computer(0)[0])
    use = anthropic(0)[0]
    use["content"][0]["input"] = {"city": "Oslo"}
    assert message_text(use) == 'assistant: f({"city": "Oslo"})'
    assert message_text(anthropic(0)[1]) == "user: ok"
    assert (
        message_text({"role": "assistant", "content": [{"type": "thinking", "thinking": "why"}]})
        == "assistant: why"
    )
    assert message_text(langchain(0)[0]) == "ai: f({})"
    assert message_text(langchain_dumped(0)[1]) == "tool: ok"
    assert (
        message_text(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        )
        == "user: hi"
    )


# ------------------------------------------------------------------ against the store


def test_type_only_message_accepted_neither_refused(store: shardstore.Store) -> None:
    sid = store.create_session("acme")
    with pytest.raises(shardstore.InvalidMessage):
        store.append_turn(sid, {"content": "neither role nor type"})
    for bad in ({"type": ""}, {"type": 3}, {"role": None, "type": "message"}):
        with pytest.raises(shardstore.InvalidMessage):
            store.append_turn(sid, bad)
    assert store.tail(sid) == []


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_round_trips(store: shardstore.Store, fmt: str) -> None:
    sid = store.create_session("acme")
    convo = [PLAIN[fmt](0), *FORMATS[fmt](0), PLAIN[fmt](1)]
    convo[0]["odd"] = "\x00\ud800 nan-free"
    store.append_turns(sid, convo)
    assert [t.message for t in store.tail(sid, n=100)] == convo
    store.flush(sid)
    assert [t.message for t in store.tail(sid, n=100)] == convo
    assert [t.message for t in store.history(sid)] == convo


FORMAT_NAMES = sorted(FORMATS)


def responses_parallel(i: int, outputs: list[int], reasoning: bool) -> list[Message]:
    """Parallel Responses calls: separate ``function_call`` items (after an optional
    ``reasoning`` item), then their outputs in the order ``outputs`` gives."""
    head = [{"type": "reasoning", "id": f"prs{i}", "summary": []}] if reasoning else []
    calls = [
        {"type": "function_call", "call_id": f"p{i}.{j}", "name": "f", "arguments": "{}"}
        for j in range(len(outputs))
    ]
    outs = [
        {"type": "function_call_output", "call_id": f"p{i}.{j}", "output": f"out {i}.{j}"}
        for j in outputs
    ]
    return [*head, *calls, *outs]


def chat_parallel(i: int, outputs: list[int]) -> list[Message]:
    """Parallel chat calls: one assistant message with several ``tool_calls``."""
    calls = [
        {"id": f"q{i}.{j}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for j in range(len(outputs))
    ]
    return [
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"q{i}.{j}", "content": f"out {j}"} for j in outputs),
    ]


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[Message], dict[int, int], set[int]]:
    """A mixed conversation and its oracle, built with it (not derived by the rules under
    test): ``answers`` maps each result's index to its call's index, ``reasoning`` holds
    the indices of reasoning items (each belongs with the item after it)."""
    fmt_of = st.sampled_from([*FORMAT_NAMES, "responses_parallel", "chat_parallel"])
    out: list[Message] = []
    answers: dict[int, int] = {}
    reasoning: set[int] = set()
    for i in range(draw(st.integers(1, 10))):
        fmt = draw(fmt_of)
        base = len(out)
        if fmt in ("responses_parallel", "chat_parallel"):
            k = draw(st.integers(2, 3))
            order = draw(st.permutations(list(range(k))))
            if fmt == "chat_parallel":
                out.extend(chat_parallel(i, order))
                answers.update({base + 1 + j: base for j in range(k)})
            else:
                head = int(draw(st.booleans()))
                out.extend(responses_parallel(i, order, bool(head)))
                if head:
                    reasoning.add(base)
                for j, call in enumerate(order):
                    answers[base + head + k + j] = base + head + call
        elif draw(st.booleans()):
            out.append(PLAIN[fmt if fmt in PLAIN else "chat"](i))
        else:
            pair = FORMATS[fmt](i)
            # repeated results: several results after one call
            out.extend(pair[:-1])
            call = len(out) - 1
            for _ in range(draw(st.integers(1, 2))):
                answers[len(out)] = call
                out.append(pair[-1])
            if fmt == "responses":
                reasoning.add(base)
    return out, answers, reasoning


def assert_valid(
    window: list[Turn], full: list[Turn], answers: dict[int, int], reasoning: set[int]
) -> None:
    """No result in ``window`` lacks its call (by the oracle), the window does not open
    right after a reasoning item, and it is contiguous."""
    if not window:
        return
    first = window[0]
    seqs = [t.turn_seq for t in window]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert [t.message for t in window] == [t.message for t in full[seqs[0] : seqs[-1] + 1]]
    for seq in seqs:
        if seq in answers:
            assert answers[seq] >= first.turn_seq, (seq, answers[seq], window)
    assert first.turn_seq - 1 not in reasoning, (first, window)
    assert not is_tool_result(first.message), (first, window)


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=conversations(), n=st.integers(1, 8), budget=st.integers(1, 60), data=st.data())
def test_no_window_starts_with_an_orphaned_result(
    make_store: Callable[..., shardstore.Store],
    drawn: tuple[list[Message], dict[int, int], set[int]],
    n: int,
    budget: int,
    data: st.DataObject,
) -> None:
    convo, answers, reasoning = drawn
    store = _shared_store(make_store)
    sid = store.create_session("acme", session_id=uuid.uuid4())
    cut = data.draw(st.integers(1, len(convo)))
    store.append_turns(sid, convo[:cut])
    store.checkpoint(sid, {"at": cut})
    if cut < len(convo):
        store.append_turns(sid, convo[cut:])
    full = list(store.history(sid))
    assert [t.message for t in full] == convo
    oracle = (full, answers, reasoning)
    assert_valid(store.tail(sid, n=n), *oracle)
    assert_valid(store.tail(sid, max_tokens=budget), *oracle)
    assert_valid(store.restore(sid, n=n).turns, *oracle)
    assert_valid(store.restore(sid, max_tokens=budget).turns, *oracle)
    # every suffix of the whole history, through the pure rule the stores use
    for start in range(len(full)):
        assert_valid(trim_tail(full[start:], full[start - 1].message if start else None), *oracle)
    _assert_tail_is_the_rule(store, sid, full, n)
    store.flush(sid)
    store.drain_folds()
    # the turn before the window may be in a folded chunk now (before_window_op reads it there)
    _assert_tail_is_the_rule(store, sid, full, n)
    assert_valid(store.tail(sid, max_tokens=budget), *oracle)
    store.embed(session_id=sid)
    hits = store.search("out question ok hm f", session_id=sid, k=20)
    assert hits
    for hit in hits:
        assert_valid(hit.turns, *oracle)


def _assert_tail_is_the_rule(
    store: shardstore.Store, sid: uuid.UUID, full: list[shardstore.Turn], n: int
) -> None:
    """tail(n) is the pure rule applied to the newest n turns and the turn before them."""
    start = max(0, len(full) - n)
    expected = trim_tail(full[start:], full[start - 1].message if start else None)
    got = store.tail(sid, n=n)
    assert [(t.turn_seq, t.message) for t in got] == [(t.turn_seq, t.message) for t in expected]
    assert store.tail_explained(sid, n=n).turns == got


_STORES: dict[int, shardstore.Store] = {}


def _shared_store(make_store: Callable[..., shardstore.Store]) -> shardstore.Store:
    key = id(make_store)
    if key not in _STORES:
        _STORES.clear()
        _STORES[key] = make_store(embedding_model=HashEmbedder())
    return _STORES[key]
