"""Microbenchmarks of shardstore's hot paths (pytest-benchmark; run on demand).

Each benchmark times one call of the public API on a real embedded Postgres, with the
conversation-like synthetic messages of ``shardstore.demo.synthetic`` (tool calls, tool
outputs, prose; all distinct). Compare runs with ``--benchmark-save`` /
``--benchmark-compare``; quote medians with their IQR, never one run's mean. The
side-by-side peer comparison is the compare suite; these isolate one path each.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.demo.synthetic import messages
from shardstore.history.tokens import make_counter

pytest.importorskip("pytest_benchmark")

Bench = Any  # pytest-benchmark's fixture
MakeStore = Callable[..., shardstore.Store]


def _cycle(seed: int, n: int = 2_000) -> Iterator[dict[str, Any]]:
    return itertools.cycle(messages(seed, n))


def _session(store: shardstore.Store, dsn: str, turns: int = 0, seed: int = 1) -> Any:
    """A session with ``turns`` folded turns, vacuumed as autovacuum would have: right
    after a bulk load the write buffer's index still holds every folded turn's dead entry,
    and a tail read then costs 3-4x more at 20,000 turns until a vacuum (measured)."""
    sid = store.create_session("bench", "user:1", "agent")
    batch = messages(seed, turns)
    for i in range(0, len(batch), 500):
        store.append_turns(sid, batch[i : i + 500])
    store.flush(sid)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return sid


def test_append_turn(benchmark: Bench, make_store: MakeStore, dsn: str) -> None:
    """One append that does not seal a chunk (the common case); folds run in the
    background as they would in production."""
    store = make_store()
    sid = _session(store, dsn)
    source = _cycle(2)
    benchmark.pedantic(lambda: store.append_turn(sid, next(source)), rounds=500, warmup_rounds=20)


def test_append_turn_with_key(benchmark: Bench, make_store: MakeStore, dsn: str) -> None:
    """An append with an idempotency key (one more row, in turn_keys)."""
    store = make_store()
    sid = _session(store, dsn)
    source = _cycle(3)
    keys = (f"k{i}" for i in itertools.count())
    benchmark.pedantic(
        lambda: store.append_turn(sid, next(source), idempotency_key=next(keys)),
        rounds=500,
        warmup_rounds=20,
    )


def test_append_turn_sealing(benchmark: Bench, make_store: MakeStore, dsn: str) -> None:
    """Appends into small chunks (chunk_tokens=2000) folded inline: about every fifth
    append seals and folds, so this is the append-with-seal path including the fold."""
    store = make_store(chunk_tokens=2_000, background_fold=False)
    sid = _session(store, dsn)
    source = _cycle(4)
    benchmark.pedantic(lambda: store.append_turn(sid, next(source)), rounds=300, warmup_rounds=10)


def test_fold(benchmark: Bench, make_store: MakeStore, dsn: str) -> None:
    """flush(): fold a full write buffer (about one 10k-token chunk) into agent_history."""
    store = make_store(background_fold=False)
    batch = messages(5, 24)

    def setup() -> tuple[tuple[Any], dict[str, Any]]:
        sid = store.create_session("bench", "user:1", "agent")
        store.append_turns(sid, batch)
        return (sid,), {}

    benchmark.pedantic(store.flush, setup=setup, rounds=60)


@pytest.mark.parametrize("turns", [1_000, 20_000])
def test_tail_by_turns(benchmark: Bench, make_store: MakeStore, dsn: str, turns: int) -> None:
    """tail(n=20) at two history lengths: flat is the goal."""
    store = make_store()
    sid = _session(store, dsn, turns)
    store.append_turns(sid, messages(6, 8))  # a few turns in the write buffer, as live
    benchmark.pedantic(lambda: store.tail(sid, n=20), rounds=300, warmup_rounds=20)


@pytest.mark.parametrize("turns", [1_000, 20_000])
def test_tail_by_tokens(benchmark: Bench, make_store: MakeStore, dsn: str, turns: int) -> None:
    """tail(max_tokens=8000): the newest turns that fit, tool pairs kept whole."""
    store = make_store()
    sid = _session(store, dsn, turns)
    store.append_turns(sid, messages(7, 8))
    benchmark.pedantic(lambda: store.tail(sid, max_tokens=8_000), rounds=300, warmup_rounds=20)


def test_token_counting(benchmark: Bench) -> None:
    """The default tokenizer on one serialised message (what every append pays)."""
    counter = make_counter(None)
    texts = itertools.cycle([json.dumps(m) for m in messages(8, 500)])
    benchmark(lambda: counter.count(next(texts)))


def test_token_counting_tool_outputs(benchmark: Bench) -> None:
    """The default tokenizer on tool outputs of 16-64 k characters (round 12: splintr counts
    them up to 65,536 characters; tiktoken took ~1.8 ms for 20 k)."""
    counter = make_counter(None)
    synthetic = [m for m in messages(9, 5_000) if 16_384 < len(json.dumps(m)) <= 65_536]
    pasted = " ".join(str(m.get("content") or "") for m in messages(10, 400))[:40_000]
    texts = itertools.cycle([json.dumps(m) for m in synthetic] + [pasted])
    benchmark(lambda: counter.count(next(texts)))


def test_history_decode(benchmark: Bench, make_store: MakeStore, dsn: str) -> None:
    """history(): stream and decode a 2,000-turn conversation (all chunks)."""
    store = make_store()
    sid = _session(store, dsn, 2_000)
    benchmark.pedantic(lambda: sum(1 for _ in store.history(sid)), rounds=20, warmup_rounds=2)
