"""Offload on append: big strings of a message stored as artifacts, a card in the turn,
the original back exactly with expand; token accounting; what purges and crashes leave."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.artifacts.model import MARKER, ArtifactRef
from shardstore.artifacts.offload import card
from shardstore.core import jsoncodec
from tests.artifacts.support import check_invariant, count_rows

OVER = 256
BIG = "tool output line with some text\n" * 40  # ~1.3 kB, over OVER


@pytest.fixture
def ostore(make_store: Any) -> shardstore.Store:
    return make_store(offload_over=OVER)  # type: ignore[no-any-return]


def _swap(value: Any, old: str, new: Any) -> Any:
    if value == old:
        return new
    if isinstance(value, dict):
        return {k: _swap(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap(v, old, new) for v in value]
    return value


def _cards(value: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(value, dict):
        if MARKER in value:
            return [value]
        for v in value.values():
            out += _cards(v)
    elif isinstance(value, list):
        for v in value:
            out += _cards(v)
    return out


SHAPES = [
    {"role": "tool", "tool_call_id": "call_1", "content": BIG},
    {"type": "function_call_output", "call_id": "c1", "output": BIG},
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "tu_1",
                "content": [{"type": "text", "text": BIG}],
            },
            {"type": "text", "text": "small"},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "x", "function": {"arguments": BIG}}],
    },
]


@pytest.mark.parametrize("message", SHAPES)
def test_shapes_round_trip_with_cards_in_the_turn(
    ostore: shardstore.Store, dsn: str, message: dict[str, Any]
) -> None:
    sid = ostore.create_session("t")
    ostore.append_turn(sid, {"role": "user", "content": "question"})
    result = ostore.append_turn(sid, message)
    stored = ostore.tail(sid)[-1]
    cards = _cards(stored.message)
    assert len(cards) == 1 and cards[0]["preview"] == BIG[:256]
    assert BIG not in json.dumps(stored.message)
    # tokens: the card's, counted over the message as the client stored it (jsonb then
    # reorders keys); the ref estimates the string's
    sent = _swap(message, BIG, card(ArtifactRef.from_json(cards[0]), BIG, sid))
    assert (
        result.tokens == stored.tokens == ostore.ctx.counter.count(jsoncodec.encode_message(sent))
    )
    assert cards[0][MARKER]["tokens"] == (len(BIG.encode()) + 3) // 4
    assert ostore.tail(sid, expand=True)[-1].message == message
    assert [t.message for t in ostore.history(sid, expand=True)][-1] == message
    assert ostore.expand(ostore.tail(sid))[-1].message == message
    ostore.flush(sid)
    assert [t.message for t in ostore.history(sid, expand=True)][-1] == message
    # the turn's reference keeps the artifact through a sweep with no grace
    ostore.sweep_artifacts(grace=timedelta(0))
    assert ostore.tail(sid, expand=True)[-1].message == message
    check_invariant(ostore, dsn)


@pytest.mark.slow
def test_small_messages_untouched_and_no_offload_without_setting(make_store: Any, dsn: str) -> None:
    plain = make_store()
    sid = plain.create_session("t")
    plain.append_turn(sid, {"role": "tool", "tool_call_id": "c", "content": BIG})
    assert next(iter(plain.history(sid))).message["content"] == BIG
    off = make_store(offload_over=OVER)
    off.append_turn(sid, {"role": "user", "content": "x" * 60})  # 60 chars: never encoded
    assert count_rows(dsn)["artifacts"] == 0


def test_repeated_output_stored_once_and_batches(ostore: shardstore.Store, dsn: str) -> None:
    sid = ostore.create_session("t")
    msgs = [{"role": "tool", "tool_call_id": f"c{i}", "content": BIG} for i in range(3)]
    results = ostore.append_turns(sid, msgs, [f"k{i}" for i in range(3)])
    again = ostore.append_turns(sid, msgs, [f"k{i}" for i in range(3)])
    assert [r.duplicate for r in again] == [True] * 3
    assert [r.turn_seq for r in results] == [0, 1, 2]
    rows = count_rows(dsn)
    assert rows["artifacts"] == 1 and rows["artifact_refs"] == 3
    assert [t.message for t in ostore.history(sid, expand=True)] == msgs
    # a checkpoint with the turn: both commit with the refs
    r = ostore.append_turn(sid, msgs[0], "k9", checkpoint={"step": 1})
    assert r.checkpoint_id is not None
    assert MARKER in ostore.restore(sid).turns[-1].message["content"]


def test_card_shaped_input_is_stored_as_given(ostore: shardstore.Store) -> None:
    sid = ostore.create_session("t")
    fake = {
        "role": "user",
        "content": {MARKER: {"artifact_id": "x"}, "preview": "p", "session_id": str(sid)},
        "extra": BIG,
    }
    ostore.append_turn(sid, fake)
    assert ostore.tail(sid)[0].message == fake
    assert ostore.tail(sid, expand=True)[0].message == fake


def test_refused_message_uploads_nothing(ostore: shardstore.Store, dsn: str) -> None:
    sid = ostore.create_session("t")
    before = count_rows(dsn)
    for bad in ({"role": "tool", "content": BIG, "n": float("nan")}, {"content": BIG}):
        with pytest.raises(shardstore.InvalidInput):
            ostore.append_turn(sid, bad)
    with pytest.raises(shardstore.InvalidInput):
        ostore.tail(sid, expand="yes")  # type: ignore[arg-type]
    with pytest.raises(shardstore.InvalidInput):
        ostore.expand([{"role": "user"}])  # type: ignore[list-item]
    assert count_rows(dsn) == before


def test_purge_removes_offloaded_bytes(ostore: shardstore.Store, dsn: str) -> None:
    sid = ostore.create_session("t", subject_id="u")
    marker = "MARKER-" + "q" * 400
    ostore.append_turn(sid, {"role": "tool", "tool_call_id": "c", "content": marker})
    report = ostore.purge_subject("t", "u")
    assert report.tables["shardstore.artifacts"].rows == 1
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM shardstore.artifact_chunks").fetchone() == (0,)


hard_text = st.text(
    alphabet=st.characters(codec=None, exclude_categories=()), min_size=0, max_size=40
)
big_text = st.builds(
    lambda a, b, n: a + b * n, hard_text, hard_text.filter(bool), st.integers(30, 80)
)
leaf = st.one_of(hard_text, big_text, st.integers(-10, 10), st.none(), st.booleans())
nested = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8).filter(lambda k: k != MARKER), inner, max_size=4),
    ),
    max_leaves=12,
)
messages = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["tool", "user"]), "content": nested}),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": st.just("c"), "output": nested}
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.lists(
                st.fixed_dictionaries(
                    {"type": st.just("tool_result"), "tool_use_id": st.just("t"), "content": nested}
                ),
                max_size=3,
            ),
        }
    ),
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(messages, min_size=1, max_size=4))
def test_offload_round_trip_property(ostore: shardstore.Store, batch: list[dict[str, Any]]) -> None:
    """Any messages (hard strings: surrogates, NUL, emoji; nested tool outputs; chat,
    Responses and Anthropic shapes) come back exactly with expand, and every stored string
    longer than offload_over was offloaded."""
    sid = ostore.create_session("t")
    ostore.append_turns(sid, batch)
    stored = list(ostore.history(sid))

    def longest(value: Any) -> int:
        if isinstance(value, str):
            return len(value.encode("utf-8", "surrogatepass"))
        if isinstance(value, dict):
            if MARKER in value:  # a card (its preview may be long in bytes)
                return 0
            return max((longest(v) for v in value.values()), default=0)
        if isinstance(value, list):
            return max((longest(v) for v in value), default=0)
        return 0

    for turn in stored:
        assert longest(turn.message) <= OVER
    assert [t.message for t in ostore.expand(stored)] == batch
    assert [t.message for t in ostore.history(sid, expand=True)] == batch


def test_async_offload(dsn: str) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn, offload_over=OVER)
        try:
            sid = await store.create_session("t")
            shape = SHAPES[3]
            await store.append_turn(sid, shape)
            assert _cards((await store.tail(sid))[0].message)
            assert (await store.tail(sid, expand=True))[0].message == shape
            got = [t async for t in store.history(sid, expand=True)]
            assert got[0].message == shape
            assert (await store.expand(await store.tail(sid)))[0].message == shape
        finally:
            await store.close()

    asyncio.run(main())


class _SpyCounter:
    """A token counter that records the length of every text it counts."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.name = real.name
        self.lengths: list[int] = []

    def count(self, text: str) -> int:
        self.lengths.append(len(text))
        return int(self.real.count(text))


@pytest.mark.slow
def test_the_offloaded_string_is_never_tokenized(make_store: Any) -> None:
    """A 1 MB tool output appended with offload: the tokenizer sees only the card-sized
    message (so the ~200 ms of counting 1 MB is not on the append path); the control store
    without offload does count the whole string."""
    page = "cleaned web page text, line after line\n" * 27_000  # ~1 MB
    msg = {"role": "tool", "tool_call_id": "c1", "content": page}
    lengths = {}
    for over in (65536, None):
        store = make_store(offload_over=over)
        spy = _SpyCounter(store.ctx.counter)
        store.ctx = dataclasses.replace(store.ctx, counter=spy)
        sid = store.create_session("t")
        result = store.append_turn(sid, msg)
        assert spy.lengths, "the append counted nothing"
        lengths[over] = max(spy.lengths)
        if over is not None:
            (stored,) = store.history(sid)
            (c,) = _cards(stored.message)
            assert result.tokens == stored.tokens < 1000  # the card's count
            assert c[MARKER]["tokens"] == (len(page.encode()) + 3) // 4  # the estimate
            assert [t.message for t in store.history(sid, expand=True)] == [msg]
    assert lengths[65536] < 2048 < len(page) <= lengths[None]
