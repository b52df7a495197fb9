"""store.export_sessions / store.import_jsonl (``shardstore export``, ``shardstore import
jsonl``): an exact round trip into a fresh database under hypothesis (mixed message
formats, hard strings and numbers, keys, several chunks), streaming of a long session,
existing sessions refused or skipped, hostile files naming their line and writing nothing
of that session, and asyncio parity."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.errors import ImportRejected, InvalidInput, SessionExists

from .test_message_formats import FORMATS, PLAIN

SMALL = {"chunk_tokens": 120, "background_fold": False}

HARD_STRINGS = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "\ue000lead", "\ue001\ue002",
                     '\\"\\n', "\u2028\u2029", "𝄞", "\t\r\n"]),
)
HARD_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([1e308, -1e308, -0.0, 0.0, 5e-324, 1e16, 2.5e-10, 10**40, -(10**30)]),
    st.floats(allow_nan=False, allow_infinity=False),
)


@st.composite
def messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 14))):
        pick = draw(st.integers(0, 3))
        if pick == 0:
            out.extend(FORMATS[draw(st.sampled_from(sorted(FORMATS)))](i))
        elif pick == 1:
            out.append(PLAIN[draw(st.sampled_from(sorted(PLAIN)))](i))
        else:
            out.append({
                "role": draw(st.sampled_from(["user", "assistant", "x\ud800"])),
                "content": draw(HARD_STRINGS),
                "n": draw(HARD_NUMBERS),
                "nested": {draw(HARD_STRINGS): [draw(HARD_NUMBERS), None, True]},
                "pad": "word " * draw(st.integers(0, 60)),
            })
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> list[dict[str, Any]]:
    sessions = []
    for s in range(draw(st.integers(1, 3))):
        msgs = draw(messages())
        keyed = draw(st.booleans())
        keys = [f"k{s}-{i}-{draw(HARD_STRINGS)}".replace("\x00", "0") for i in range(len(msgs))]
        sessions.append({
            "subject": draw(st.one_of(st.none(), st.just(f"user:{s}"))),
            "agent": draw(st.one_of(st.none(), st.just("agent é"))),
            "metadata": {"k": draw(HARD_STRINGS), "n": draw(HARD_NUMBERS), "l": [1, {"a": None}]},
            "messages": msgs,
            "keys": [k if keyed and "\ud800" not in k and "\udfff" not in k else None
                     for k in keys],
            "batches": draw(st.integers(1, 4)),
            "flush": draw(st.booleans()),
        })
    return sessions


def fill(store: shardstore.Store, scenario: list[dict[str, Any]]) -> list[uuid.UUID]:
    ids = []
    for spec in scenario:
        sid = store.create_session("acme", spec["subject"], spec["agent"],
                                   metadata=spec["metadata"])
        msgs, keys = spec["messages"], spec["keys"]
        step = max(1, len(msgs) // spec["batches"])
        for at in range(0, len(msgs), step):
            store.append_turns(sid, msgs[at:at + step], keys[at:at + step])
        if spec["flush"]:
            store.flush(sid)
        ids.append(sid)
    return ids


def records(store: shardstore.Store, sid: uuid.UUID) -> tuple[Any, ...]:
    info = store.session(sid)
    # a chunk's partition is None while it sits in the buffer: whether the source had
    # flushed its open chunk is not part of the history
    chunks = [dataclasses.replace(c, partition=None) for c in store.chunks(sid)]
    return (info, list(store.history(sid)), chunks)


def export_text(store: shardstore.Store, ids: list[uuid.UUID]) -> str:
    out = io.StringIO()
    store.export_sessions(ids, out=out)
    return out.getvalue()


@pytest.mark.slow
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scenario=scenarios())
def test_round_trip_into_a_fresh_database(
    new_database: Callable[[], str], scenario: list[dict[str, Any]]
) -> None:
    with shardstore.connect(new_database(), **SMALL) as a, \
            shardstore.connect(new_database(), **SMALL) as b:
        ids = fill(a, scenario)
        text = export_text(a, ids)
        report = b.import_jsonl(io.StringIO(text))
        assert report.sessions == len(ids) and report.skipped == ()
        assert report.turns == sum(len(s["messages"]) for s in scenario)
        for sid in ids:
            assert records(b, sid) == records(a, sid)
        assert export_text(b, ids) == text


def test_round_trip_of_the_hard_values(new_database: Callable[[], str], tmp_path: Path) -> None:
    """The quick, not-slow version of the property above, with every hard value at once."""
    hard = {"role": "user", "content": "a\x00b\ud800 \ue000 é 𝄞 \\\"\n",
            "floats": [1e308, -0.0, 5e-324, 1e16, -1e308, 0.1], "ints": [10**40, -(2**63)],
            "\ud800k": {"\x00": None}}
    msgs = [hard, *FORMATS["responses"](1), *FORMATS["langchain"](2), PLAIN["chat"](3)] * 8
    scenario = [{"subject": "s", "agent": None, "metadata": {"m": hard["content"], "f": -0.0},
                 "messages": msgs, "keys": [f"key-{i}" for i in range(len(msgs))],
                 "batches": 3, "flush": True}]
    path = tmp_path / "out.jsonl"
    with shardstore.connect(new_database(), **SMALL) as a, \
            shardstore.connect(new_database(), **SMALL) as b:
        (sid,) = fill(a, scenario)
        assert len(a.chunks(sid)) > 2
        exported = a.export_sessions([sid], out=path)
        assert (exported.sessions, exported.turns) == (1, len(msgs))
        assert exported.bytes == path.stat().st_size
        path.read_text("utf-8").encode("ascii")  # pure ASCII
        b.import_jsonl(path)
        assert records(b, sid) == records(a, sid)
        assert b.history(sid).__next__().message == hard
        # keys came along: a retry of an exported append is a duplicate in the new home
        again = b.append_turn(sid, {"role": "user", "content": "x"}, "key-3")
        assert again.duplicate and again.turn_seq == 3
