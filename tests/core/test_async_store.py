"""The asyncio API runs the same operations as the sync one and gives the same answers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import shardstore

SCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "find the refund policy " * 40},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "policy text " * 400},
    {"role": "assistant", "content": "Refunds within 30 days."},
    {"role": "user", "content": "thanks\x00 \ud800"},
]


def _strip(turns: list[shardstore.Turn]) -> list[tuple[Any, ...]]:
    return [(t.turn_seq, t.chunk_seq, t.tokens, t.message, t.idempotency_key) for t in turns]


def _chunks(chunks: list[shardstore.Chunk]) -> list[tuple[Any, ...]]:
    return [
        (c.chunk_seq, c.first_turn_seq, c.turn_count, c.token_count, c.byte_count, c.is_open)
        for c in chunks
    ]


@pytest.mark.slow
def test_async_matches_sync(new_database: Callable[[], str]) -> None:
    settings = {"chunk_tokens": 600}
    sync_store = shardstore.connect(new_database(), **settings)
    sid = uuid.uuid4()
    try:
        sync_store.create_session("acme", "u", session_id=sid)
        sync_results = [
            sync_store.append_turn(sid, m, idempotency_key=f"k{i}") for i, m in enumerate(SCRIPT)
        ]
        sync_results += sync_store.append_turns(sid, SCRIPT[:2], ["k0", "new"])
        expected = (
            sync_results,
            _strip(sync_store.tail(sid, n=4)),
            _strip(sync_store.tail(sid, max_tokens=700)),
            _strip(list(sync_store.history(sid, from_seq=1))),
            _chunks(sync_store.chunks(sid)),
            sync_store.session(sid).turn_count,
        )
    finally:
        sync_store.close()

    async def run() -> tuple[Any, ...]:
        store = await shardstore.connect_async(new_database(), **settings)
        async with store:
            await store.create_session("acme", "u", session_id=sid)
            results = [
                await store.append_turn(sid, m, idempotency_key=f"k{i}")
                for i, m in enumerate(SCRIPT)
            ]
            results += await store.append_turns(sid, SCRIPT[:2], ["k0", "new"])
            with pytest.raises(shardstore.SessionNotFound):
                await store.tail(uuid.uuid4())
            with pytest.raises(shardstore.InvalidMessage):
                await store.append_turn(sid, {"no": "role"})
            return (
                results,
                _strip(await store.tail(sid, n=4)),
                _strip(await store.tail(sid, max_tokens=700)),
                _strip([t async for t in store.history(sid, from_seq=1)]),
                _chunks(await store.chunks(sid)),
                (await store.session(sid)).turn_count,
            )

    got = asyncio.run(run())
    assert got == expected
    assert len(expected[4]) >= 2, "the script must span more than one chunk"


@pytest.mark.slow
def test_async_concurrent_appends(new_database: Callable[[], str]) -> None:
    async def run() -> list[int]:
        store = await shardstore.connect_async(new_database(), pool_max_size=4)
        async with store:
            sid = await store.create_session("acme")

            async def writer(w: int) -> None:
                for i in range(20):
                    await store.append_turn(sid, {"role": "user", "content": f"{w}:{i}"})

            await asyncio.gather(*(writer(w) for w in range(4)))
            return [t.turn_seq async for t in store.history(sid)]

    assert asyncio.run(run()) == list(range(80))
