"""The store against an in-memory model: appends, batches, retries, folds, rewinds and every
read, with turn sizes from one token to several chunks."""

from __future__ import annotations

import string
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import shardstore
from shardstore.core.jsoncodec import encode_message
from tests.session_model import SessionModel

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

CHUNK_TOKENS = 240
CHUNK_BYTES = 4096
WORDS = [
    "alpha",
    "refund",
    "kernel",
    "ticket",
    "ocean",
    "pixel",
    "quartz",
    "lemon",
    "zebra",
    "42",
    "€",
    "日本",
    "naïve",
    "\n",
    "{",
    "}",
    '"',
    "\\",
]

roles = st.sampled_from(["user", "assistant", "tool", "system"])
odd_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(roles)
    seed = draw(st.integers(0, 10_000))
    if draw(st.integers(0, 4)) == 0:
        # many bytes per token: exercises the byte cap rather than the token budget
        content = "-" * draw(st.integers(500, 3000))
    else:
        n_words = draw(st.one_of(st.integers(0, 4), st.integers(5, 150), st.integers(300, 600)))
        content = " ".join(WORDS[(seed + i * 7) % len(WORDS)] for i in range(n_words))
    message: dict[str, Any] = {"role": role, "content": content}
    if role == "tool":
        message["tool_call_id"] = f"call_{seed}"
    if role == "assistant" and draw(st.booleans()):
        message["tool_calls"] = [
            {
                "id": f"call_{seed}",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": 1}'},
            }
        ]
    if draw(st.integers(0, 5)) == 0:
        message["extra"] = draw(odd_text)  # NUL, lone surrogates, the escape marker...
    return message


keys = st.one_of(st.none(), st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=3))


class SessionMachine(RuleBasedStateMachine):
    store: shardstore.Store

    @initialize()
    def start(self) -> None:
        self.sid = self.store.create_session("tenant-model", "subject")
        self.model = SessionModel(self.store.settings.budget_tokens, CHUNK_BYTES)

    def _expect(self, message: dict[str, Any], key: str | None) -> tuple[int, int, int, bool]:
        text = encode_message(message)
        tokens = self.store.ctx.counter.count(text)
        return self.model.append(message, tokens, len(text.encode()), key)

    @rule(message=messages(), key=keys)
    def append_turn(self, message: dict[str, Any], key: str | None) -> None:
        got = self.store.append_turn(self.sid, message, idempotency_key=key)
        assert (got.turn_seq, got.chunk_seq, got.tokens, got.duplicate) == self._expect(
            message, key
        )

    @rule(batch=st.lists(st.tuples(messages(), keys), min_size=1, max_size=6))
    def append_turns(self, batch: list[tuple[dict[str, Any], str | None]]) -> None:
        got = self.store.append_turns(self.sid, [m for m, _ in batch], [k for _, k in batch])
        expected = [self._expect(m, k) for m, k in batch]
        assert [(r.turn_seq, r.chunk_seq, r.tokens, r.duplicate) for r in got] == expected

    @rule(extra=st.integers(1, 100))
    def oversize_turn_is_refused(self, extra: int) -> None:
        message = {"role": "tool", "tool_call_id": "c", "content": "x" * (CHUNK_BYTES + extra)}
        before = self.store.session(self.sid).turn_count
        with pytest.raises(shardstore.TurnTooLarge):
            self.store.append_turns(self.sid, [{"role": "user", "content": "ok"}, message])
        assert self.store.session(self.sid).turn_count == before

    @precondition(lambda self: self.model.open_turns > 0)
    @rule()
    def flush(self) -> None:
        moved = self.store.flush(self.sid)
        assert moved >= 0

    @rule()
    def drain_folds(self) -> None:
        self.store.drain_folds()

    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        total = len(self.model.turns)
        to = data.draw(st.integers(max(0, total - 12), total))
        assert self.store.rewind(self.sid, to) == self.model.rewind(to)
        assert self.store.session(self.sid).turn_count == to
        assert [t.turn_seq for t in self.store.history(self.sid)] == list(range(to))

    @rule(n=st.integers(1, 40))
    def tail_n(self, n: int) -> None:
        turns = self.store.tail(self.sid, n=n)
        assert [t.turn_seq for t in turns] == self.model.tail(n, None)
        assert [t.message for t in turns] == [self.model.turns[t.turn_seq].message for t in turns]

    @rule(max_tokens=st.integers(1, 3 * CHUNK_TOKENS), n=st.one_of(st.none(), st.integers(1, 30)))
    def tail_tokens(self, max_tokens: int, n: int | None) -> None:
        turns = self.store.tail(self.sid, n=n, max_tokens=max_tokens)
        assert [t.turn_seq for t in turns] == self.model.tail(n, max_tokens)
        assert sum(t.tokens for t in turns) <= max_tokens

    @rule(data=st.data())
    def history_range(self, data: st.DataObject) -> None:
        total = len(self.model.turns)
        lo = data.draw(st.integers(0, total + 1))
        hi = data.draw(st.one_of(st.none(), st.integers(lo, total + 2)))
        turns = list(self.store.history(self.sid, from_seq=lo, to_seq=hi))
        end = total if hi is None else min(hi, total)
        assert [t.turn_seq for t in turns] == list(range(lo, max(lo, end)))
        for t in turns:
            m = self.model.turns[t.turn_seq]
            assert (t.message, t.tokens, t.chunk_seq, t.idempotency_key) == (
                m.message,
                m.tokens,
                m.chunk_seq,
                m.key,
            )

    @invariant()
    def chunks_obey_the_rules(self) -> None:
        if not hasattr(self, "sid"):
            return
        chunks = self.store.chunks(self.sid)
        assert [c.chunk_seq for c in chunks] == list(range(len(chunks)))
        next_first = 0
        for c in chunks:
            assert c.turn_count >= 1, "never an empty chunk"
            assert c.first_turn_seq == next_first, "turn_seq gap-free across chunks"
            next_first += c.turn_count
            members = self.model.turns[c.first_turn_seq : c.first_turn_seq + c.turn_count]
            assert all(m.chunk_seq == c.chunk_seq for m in members)
            assert c.token_count == sum(m.tokens for m in members)
            assert c.byte_count == sum(m.size for m in members)
            assert c.turn_count == 1 or c.token_count <= self.store.settings.budget_tokens
            assert c.token_count <= CHUNK_TOKENS or c.turn_count == 1
            assert c.byte_count <= CHUNK_BYTES
            assert c.chunk_start <= c.chunk_end
        assert next_first == len(self.model.turns)
        assert [c.is_open for c in chunks].count(True) <= 1
        assert not any(c.is_open for c in chunks[:-1])


@pytest.mark.slow
def test_store_matches_model(make_store: Callable[..., shardstore.Store]) -> None:
    # a partition interval of ten years keeps partition rollover out of this test
    # (tests/history/test_partitions.py covers it with a one-second interval)
    SessionMachine.store = make_store(
        chunk_tokens=CHUNK_TOKENS,
        chunk_max_bytes=CHUNK_BYTES,
        partition_interval=timedelta(days=3650),
        premake=0,
    )
    run_state_machine_as_test(
        SessionMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
