"""Pure planning rules shared by the sync and async stores (and by the test model)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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


#: Why a tail window held turns back (:class:`TailWindow` ``reason``).
HELD_ORPHAN_RESULT = "orphan_tool_result"  # leading tool results whose call is outside it
HELD_OVER_MAX_TOKENS = "over_max_tokens"  # the newest turn alone exceeds max_tokens


@dataclass(frozen=True, slots=True)
class TailWindow:
    """A tail window explained: ``turns`` are exactly what ``tail()`` returns for the same
    arguments; ``held_back`` the turns it held back, oldest first (empty when none were),
    and ``reason`` why (:data:`HELD_ORPHAN_RESULT`: tool results at the window's start whose
    call is outside it; :data:`HELD_OVER_MAX_TOKENS`: the newest turn alone is over
    ``max_tokens``, so the window is empty), None when nothing was held back."""

    turns: list[Turn]
    held_back: list[Turn] = field(default_factory=list)
    reason: str | None = None


def explain_tail(window: Sequence[Turn]) -> TailWindow:
    """Split a tail window (oldest first, within its turn and token budget) as
    :func:`trim_tail` does: ``turns`` equals ``trim_tail(window)``, ``held_back`` holds the
    leading tool results it drops (with :data:`HELD_ORPHAN_RESULT` when there are any)."""
    turns = trim_tail(window)
    held = list(window[: len(window) - len(turns)])
    return TailWindow(turns, held, HELD_ORPHAN_RESULT if held else None)
