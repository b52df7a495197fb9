"""The read path's JSON parser (``jsoncodec.parse``, msgspec with a json fallback) gives what
``json.loads`` gives, value and type, for any JSON text; and ``models.new_turn`` builds the
same frozen ``Turn`` as its constructor. No database: both are pure functions."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstore.core import jsoncodec
from shardstore.models import Turn, new_turn


def _same(a: Any, b: Any) -> bool:
    """Equality that also tells int from float, 0.0 from -0.0, and list/dict types apart."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: orjson would turn those into floats
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # lone surrogates included: written as \ud800 escapes with ensure_ascii
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(value=values, ascii_only=st.booleans())
def test_parse_is_json_loads(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert _same(jsoncodec.parse(text), json.loads(text))
    assert _same(jsoncodec.parse(text.encode("utf-8", "surrogatepass")), json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        "[18446744073709551616]",  # 2**64: orjson reads 1.8446744073709552e+19
        "[-9223372036854775809]",
        "[1" + "0" * 400 + "]",  # numeric prints big values in full
        "[0." + "0" * 323 + "5]",  # 5e-324 as numeric prints it
        "[1" + "0" * 310 + ".5]",  # beyond a float: msgspec refuses, json gives inf
        "[1.0000000000000000000000001]",
        '"\\ud800"',  # a lone surrogate escape (JSONB never prints one)
        '"\\udc00\\ud800"',
        "NaN",  # not JSON; json.loads takes it, so parse does too
        '{"a":1,"a":2}',
        "-0.0",
        " [1] ",
        "[" * 1500 + "]" * 1500,  # deeper than msgspec goes
    ],
)
def test_parse_edge_cases(text: str) -> None:
    try:
        expected = json.loads(text)
    except RecursionError:
        with pytest.raises(RecursionError):
            jsoncodec.parse(text)
        return
    assert _same(jsoncodec.parse(text), expected)


@pytest.mark.parametrize("text", ["[1,]", '"\x01"', "", "{'a': 1}", "[1] x"])
def test_parse_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        jsoncodec.parse(text)


def test_loads_restores_escaped_strings_after_the_fast_parse() -> None:
    message = {"role": "user", "content": "a\x00b", "n": 2**70, "f": 1e300, "z": -0.0}
    text = jsoncodec.encode_message(message)
    assert _same(jsoncodec.loads(text), message)
    chunk = json.dumps([{"s": 0, "m": json.loads(text)}], ensure_ascii=False)
    envelopes = jsoncodec.loads_envelopes(chunk)
    assert _same(envelopes[0]["m"], message)


@settings(max_examples=100, deadline=None)
@given(
    seq=st.integers(min_value=0, max_value=2**62),
    tokens=st.integers(min_value=0, max_value=2**31),
    chunk=st.integers(min_value=0, max_value=2**62),
    key=st.none() | st.text(max_size=10),
    content=st.text(max_size=20),
)
def test_new_turn_is_the_dataclass(
    seq: int, tokens: int, chunk: int, key: str | None, content: str
) -> None:
    at = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
    message = {"role": "user", "content": content}
    fast = new_turn(seq, message, tokens, at, chunk, key)
    slow = Turn(
        turn_seq=seq,
        message=message,
        tokens=tokens,
        created_at=at,
        chunk_seq=chunk,
        idempotency_key=key,
    )
    assert type(fast) is Turn
    assert fast == slow
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
    assert repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.tokens = 1  # type: ignore[misc]


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(value=values)
def test_the_write_encoder_writes_what_json_would(value: Any) -> None:
    """``encode_json`` (msgspec, json as its fallback) gives text that reads back as the
    value json's own text does: the same escaping of strings JSONB cannot hold, the same
    tags on floats it would change, the same values; only a float's exponent may be
    spelled differently ("1e-7" for "1e-07")."""
    ours = jsoncodec.encode_json(value, "value")
    needs_escape = jsoncodec._check(value, 0)
    reference = jsoncodec._dumps(jsoncodec._escape_tree(value) if needs_escape else value)
    assert _same(json.loads(ours), json.loads(reference))
    assert _same(jsoncodec.loads(ours), jsoncodec.loads(reference))
    if not _holds_float(value):  # nothing to spell differently: the very same text
        assert ours == reference


def _holds_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, list):
        return any(_holds_float(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_float(v) for v in value.values())
    return False
