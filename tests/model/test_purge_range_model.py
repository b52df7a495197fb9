"""purge_range at random cuts, held to the in-memory model: afterwards the history is the
model's turns from the cut, chunks and tail agree, and later appends chunk as the model
says (the open chunk's counters were recomputed)."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import shardstore
from shardstore.core.jsoncodec import encode_message
from shardstore.history.pairing import trim_tail
from tests.session_model import SessionModel

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

CHUNK_TOKENS = 240

message_st = st.builds(
    lambda role, words, tag: {
        "role": role,
        "content": " ".join(["word"] * words) + f" #{tag}",
        **({"tool_call_id": "c"} if role == "tool" else {}),
    },
    st.sampled_from(["user", "assistant", "tool"]),
    st.one_of(st.integers(0, 20), st.integers(20, 120), st.integers(200, 400)),
    st.integers(0, 10**6),
)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    first = draw(st.lists(message_st, min_size=1, max_size=40))
    return {
        "first": first,
        "flush_at": draw(st.none() | st.integers(0, len(first))),
        "keyed": draw(st.booleans()),
        "cut": draw(st.integers(0, len(first) + 2)),
        "second_cut": draw(st.none() | st.integers(0, len(first) + 2)),
        "more": draw(st.lists(message_st, max_size=15)),
    }


def _model_cut(model: SessionModel, cut: int) -> None:
    """What a range purge does to the model's open chunk: its purged turns leave it."""
    kept = [
        t for seq, t in enumerate(model.turns) if seq >= cut and t.chunk_seq == model.open_chunk
    ]
    model.open_turns = len(kept)
    model.open_tokens = sum(t.tokens for t in kept)
    model.open_bytes = sum(t.size for t in kept)
    model.keys = {k: seq for k, seq in model.keys.items() if seq >= cut}


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_purge_range_matches_the_model(dsn: str, scenario: dict[str, Any]) -> None:
    with shardstore.connect(dsn, chunk_tokens=CHUNK_TOKENS, background_fold=False) as store:
        _check(store, scenario)


def _check(store: shardstore.Store, scenario: dict[str, Any]) -> None:
    model = SessionModel(store.settings.budget_tokens, store.settings.chunk_max_bytes)
    sid = store.create_session("acme", "user:model")

    def append(i: int, message: dict[str, Any]) -> None:
        k = f"k{i}" if scenario["keyed"] else None
        r = store.append_turn(sid, message, k)
        size = len(encode_message(message).encode("utf-8"))
        assert (r.turn_seq, r.chunk_seq, r.tokens, r.duplicate) == model.append(
            message, r.tokens, size, k
        )

    for i, message in enumerate(scenario["first"]):
        if i == scenario["flush_at"]:
            store.flush(sid)
        append(i, message)
    total = len(model.turns)
    floor = 0
    for cut in (scenario["cut"], scenario["second_cut"]):
        if cut is None:
            continue
        report = store.purge_range(sid, before_turn_seq=cut)
        effective = min(cut, total)
        floor = max(floor, effective)
        # where the history starts now: never before an earlier cut
        assert report.cut_turn_seq == floor
        assert store.session(sid).first_turn_seq == floor
        _model_cut(model, floor)

    history = list(store.history(sid))
    expected = [(seq, t.message, t.tokens, t.chunk_seq) for seq, t in enumerate(model.turns)]
    assert [(t.turn_seq, t.message, t.tokens, t.chunk_seq) for t in history] == expected[floor:]
    chunks = store.chunks(sid)
    assert sum(c.turn_count for c in chunks) == total - floor
    for c in chunks:
        mine = [e for e in expected[floor:] if e[3] == c.chunk_seq]
        assert c.first_turn_seq == mine[0][0] and c.turn_count == len(mine)
        assert c.token_count == sum(e[2] for e in mine)
    tail = store.tail(sid, n=1000)
    assert [t.turn_seq for t in tail] == [t.turn_seq for t in trim_tail(history)]

    for i, message in enumerate(scenario["more"], start=len(scenario["first"])):
        append(i, message)
    after = [(t.turn_seq, t.chunk_seq, t.tokens) for t in store.history(sid)]
    assert after == [(seq, t.chunk_seq, t.tokens) for seq, t in enumerate(model.turns)][floor:]
