"""Pure planning rules shared by the sync and async stores (and by the test model)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from .models import Turn

TurnT = TypeVar("TurnT", bound=Turn)


def is_tool_result(message: Mapping[str, Any]) -> bool:
    """True for a message that answers a tool call: OpenAI-style ``role: "tool"`` (or the
    legacy ``"function"``) or any message carrying ``tool_call_id``, at top level or in
    ``metadata`` (the seed format)."""
    role = message.get("role")
    if role in ("tool", "function"):
        return True
    if role == "assistant":
        return False
    if "tool_call_id" in message:
        return True
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and "tool_call_id" in metadata


def trim_tail(turns: Sequence[TurnT]) -> list[TurnT]:
    """Drop leading tool results: a tail window must not start with a tool result whose
    tool call was cut off (models reject such a context). Tool results are answered by a
    call that precedes them, so a result at the window's start has lost its call."""
    start = 0
    while start < len(turns) and is_tool_result(turns[start].message):
        start += 1
    return list(turns[start:])
