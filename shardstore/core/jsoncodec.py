"""Exact round-trip of caller messages through PostgreSQL JSONB.

JSONB cannot hold ``\\u0000`` or lone surrogates, and JSON has no NaN or Infinity. Messages
are validated here before anything reaches the server. Strings that JSONB cannot hold are
stored in an escaped form that starts with a private-use marker; strings that happen to
start with the marker are escaped too, so decoding is unambiguous. Ordinary strings are
stored unchanged, which keeps the stored JSON readable and searchable.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import msgspec

from ..errors import InvalidMessage

MARK = "\ue000"
_ESC = "\ue001"
# MARK + _FLOAT + repr: a float that JSONB would hand back as an int (abs >= 1e16 is
# written with an exponent, and numeric drops it: 1e16 returns as 10000000000000000).
_FLOAT = "\ue002"
_MARK_BYTES = MARK.encode()
_NEEDS_ESCAPE = re.compile("[\x00\ud800-\udfff\ue001\ue002]")
_BIG_FLOAT = 1e16
_ESCAPED = re.compile(_ESC + "([0-9a-f]{4})")
MAX_DEPTH = 256

# Encoding runs after _check, so the value holds only JSON types with string keys and finite
# floats. msgspec writes it ~9x faster than json (1.5 vs 13 us for a 1.6 kB agent message),
# the same text but for float exponents ("1e-7" for json's "1e-07": the same number in
# JSONB); json is kept for its error messages.
_fast_dumps = msgspec.json.Encoder().encode
_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_fast_parse = msgspec.json.Decoder().decode


def parse(data: bytes | bytearray | str) -> Any:
    """The value of JSON text, the same as ``json.loads(data)`` gives (the same types and
    values; integers of any size stay integers), parsed 2-2.5x faster by msgspec where it
    can. msgspec refuses what JSONB never prints (lone surrogate escapes, numbers beyond a
    float's range, nesting past ~1000 levels) and invalid JSON; those go to ``json.loads``,
    which then gives its own value or error (orjson was not taken: it reads an integer
    beyond 64 bits as a float)."""
    try:
        return _fast_parse(data)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(data)


def _float_needs_tag(value: float) -> bool:
    # JSONB numeric hands back 1e16 as an int and -0.0 as 0.0
    return abs(value) >= _BIG_FLOAT or (value == 0.0 and math.copysign(1.0, value) < 0)


def _needs_escape(s: str) -> bool:
    return s.startswith(MARK) or _NEEDS_ESCAPE.search(s) is not None


def _escape(s: str) -> str:
    return MARK + _NEEDS_ESCAPE.sub(lambda m: f"{_ESC}{ord(m.group()):04x}", s)


def _unescape(s: str) -> str | float:
    if s[1:2] == _FLOAT:
        return float(s[2:])
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), s[1:])


class _Bad(Exception):
    """Internal: a rejected value, with the path to it collected while unwinding."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def where(self) -> str:
        path = "$" + "".join(reversed(self.path))
        return path if len(path) <= 120 else path[:117] + "..."


def _check(value: Any, depth: int) -> bool:
    """Validate one JSON value; return True if some string in it needs escaping."""
    if depth > MAX_DEPTH:
        raise _Bad(f"nests deeper than {MAX_DEPTH} levels (or contains a cycle)")
    t = type(value)
    if t is str:
        return _needs_escape(value)
    if t is dict:
        escape = False
        for key, item in value.items():
            if type(key) is not str:
                raise _Bad(f"has key {key!r} of type {type(key).__name__}; JSON keys are strings")
            try:
                escape |= _needs_escape(key) | _check(item, depth + 1)
            except _Bad as bad:
                bad.path.append(f".{key}")
                raise
        return escape
    if t is list:
        escape = False
        for i, item in enumerate(value):
            try:
                escape |= _check(item, depth + 1)
            except _Bad as bad:
                bad.path.append(f"[{i}]")
                raise
        return escape
    if t is float:
        if not math.isfinite(value):
            raise _Bad(f"is {value!r}, which JSON cannot represent")
        return _float_needs_tag(value)
    if value is None or t is bool or t is int:
        return False
    raise _Bad(
        f"is a {t.__name__}; messages may hold only dict, list, str, int, float, bool and None"
    )


def _escape_tree(value: Any) -> Any:
    if type(value) is str:
        return _escape(value) if _needs_escape(value) else value
    if type(value) is float and _float_needs_tag(value):
        return MARK + _FLOAT + repr(value)
    if type(value) is dict:
        return {(_escape(k) if _needs_escape(k) else k): _escape_tree(v) for k, v in value.items()}
    if type(value) is list:
        return [_escape_tree(v) for v in value]
    return value


def _unescape_tree(value: Any) -> Any:
    if type(value) is str:
        return _unescape(value) if value.startswith(MARK) else value
    if type(value) is dict:
        return {
            (_unescape(k) if k.startswith(MARK) else k): _unescape_tree(v) for k, v in value.items()
        }
    if type(value) is list:
        return [_unescape_tree(v) for v in value]
    return value


def _unescape_key(key: str) -> str:
    restored = _unescape(key)
    return restored if isinstance(restored, str) else key


def _encode(value: Any, needs_escape: bool, what: str) -> str:
    tree = _escape_tree(value) if needs_escape else value
    try:
        return _fast_dumps(tree).decode()
    except (ValueError, msgspec.EncodeError):  # e.g. an int with more digits than Python prints
        pass
    try:
        return _dumps(tree)
    except ValueError as exc:
        raise InvalidMessage(f"{what} cannot be written as JSON: {exc}") from None


def encode_message(message: Any) -> str:
    """Validate a chat message and return the JSON text to store.

    Raises :class:`InvalidMessage` (and writes nothing) unless ``message`` is a dict with a
    non-empty string ``role`` or, without a ``role`` key, a non-empty string ``type``
    (OpenAI Responses items such as ``function_call``, LangChain ``ai`` / ``tool``), made
    only of JSON types, with string keys, finite floats and no cycles.
    """
    if type(message) is not dict:
        raise InvalidMessage(
            f"a message must be a dict (a JSON object), not {type(message).__name__}"
        )
    role = message["role"] if "role" in message else message.get("type")
    if type(role) is not str or not role:
        raise InvalidMessage(
            "a message needs a non-empty string 'role' (e.g. 'user', 'assistant') or, "
            "without a 'role', a non-empty string 'type' (e.g. 'function_call')"
        )
    try:
        needs_escape = _check(message, 0)
    except _Bad as bad:
        raise InvalidMessage(f"message value at {bad.where()} {bad.reason}") from None
    except RecursionError:
        raise InvalidMessage("message nests too deeply or contains a cycle") from None
    return _encode(message, needs_escape, "message")


def decode_value(value: Any) -> Any:
    """Undo :func:`encode_message`'s escaping on a value loaded from JSONB."""
    return _unescape_tree(value)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """JSON loader for psycopg: parses JSONB text and restores escaped strings."""
    if isinstance(data, memoryview):
        data = bytes(data)
    value = parse(data)
    marked = (MARK in data) if isinstance(data, str) else (_MARK_BYTES in data)
    return _unescape_tree(value) if marked else value


def encode_json(value: Any, what: str) -> str:
    """Validate and encode any JSON value (e.g. session metadata) for exact round-trip."""
    try:
        needs_escape = _check(value, 0)
    except _Bad as bad:
        raise InvalidMessage(f"{what} value at {bad.where()} {bad.reason}") from None
    except RecursionError:
        raise InvalidMessage(f"{what} nests too deeply or contains a cycle") from None
    return _encode(value, needs_escape, what)


def loads_window(data: str) -> list[list[Any]]:
    """Parse ``tail_window``'s JSON text (items ``[turn_seq, chunk_seq, tokens,
    created_at_us, key, message]``); restores escaped strings inside each item's message
    only, since the other fields were stored as-is."""
    items: list[list[Any]] = parse(data)
    if MARK in data:
        for item in items:
            item[5] = _unescape_tree(item[5])
    return items


def loads_envelopes(data: str) -> list[dict[str, Any]]:
    """Parse a chunk's JSON text; restores escaped strings inside each envelope's message
    ("m") only, since the other fields were stored as-is."""
    envelopes: list[dict[str, Any]] = parse(data)
    if MARK in data:
        for envelope in envelopes:
            envelope["m"] = _unescape_tree(envelope["m"])
    return envelopes
