"""The benchmarks' real-text corpus (benchmarks/lib/realtext.py): deterministic by seed,
well-formed conversations, bounded sizes, and a clear error where too little text is
installed. No database, no timing."""

from __future__ import annotations

import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.lib import corpus, realtext

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def fresh_files() -> Iterator[None]:
    realtext.find_files.cache_clear()
    yield
    realtext.find_files.cache_clear()


def installed() -> None:
    try:
        realtext.find_files()
    except realtext.RealTextError as e:  # the bench extra is not installed here
        pytest.skip(str(e))


def test_same_seed_same_messages_other_seed_others() -> None:
    installed()
    a = realtext.messages(300, seed=5)
    assert a == realtext.messages(300, seed=5)
    assert a != realtext.messages(300, seed=6)
    assert corpus.messages("real", 300, 5) == a


def test_conversations_are_well_formed() -> None:
    installed()
    msgs = realtext.messages(2000, seed=1)
    assert len(msgs) == 2000
    pending: list[str] = []
    kinds = set()
    for m in msgs:
        text = corpus.encode(m)
        assert "\\u0000" not in text
        text.encode("utf-8")  # no lone surrogates
        if m["role"] == "tool":
            assert m["tool_call_id"] == pending.pop(0)
        else:
            assert not pending, "every tool call is answered before the next message"
        if m.get("tool_calls"):
            assert m["role"] == "assistant" and m["content"] is None
            for call in m["tool_calls"]:
                json.loads(call["function"]["arguments"])
                pending.append(call["id"])
                kinds.add(call["function"]["name"])
        else:
            assert isinstance(m["content"], str) and m["content"]
            assert len(m["content"]) <= realtext.MAX_CHARS
    assert len(kinds) >= 6
    sizes = sorted(len(corpus.encode(m)) for m in msgs)
    assert sizes[0] < 200 and sizes[-1] > 10_000  # a few words to tens of kB


def test_too_little_text_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(realtext, "BENCH_DISTRIBUTIONS", ())
    paths = sysconfig.get_paths() | {"stdlib": str(tmp_path)}
    monkeypatch.setattr(realtext.sysconfig, "get_paths", lambda: paths)
    with pytest.raises(realtext.RealTextError, match=r"prose: 0 files .*\[bench\]"):
        realtext.messages(10)
