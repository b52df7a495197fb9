"""Pure planning rules shared by the sync and async stores (and by the test model)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .models import Turn

TurnT = TypeVar("TurnT", bound=Turn)

#: LangChain message types (``message_to_dict`` / ``dumpd`` forms): never Responses items.
LANGCHAIN_TYPES = frozenset({"human", "ai", "system", "tool", "function", "chat", "developer"})


def is_tool_result(message: Mapping[str, Any]) -> bool:
    """True for a message that answers an earlier tool call, in every common format:

    - OpenAI chat: ``role: "tool"`` (or the legacy ``"function"``);
    - OpenAI Responses: a ``*_call_output`` item (``function_call_output``,
      ``computer_call_output``, ``custom_tool_call_output``, ...) and
      ``mcp_approval_response``;
    - Anthropic: a ``role: "user"`` message whose content holds a ``tool_result`` block;
    - LangChain: ``type: "tool"`` (also the ``{"type": "tool", "data": {...}}`` dump and
      the ``dumpd`` constructor form of a ``ToolMessage``);
    - any message carrying ``tool_call_id`` at top level or in ``metadata`` (the seed
      format), unless its role is ``assistant``."""
    role = message.get("role")
    if role is not None:
        if role in ("tool", "function"):
            return True
        if role == "assistant":
            return False
        if role == "user":
            content = message.get("content")
            if type(content) is list:
                for block in content:
                    if isinstance(block, Mapping) and block.get("type") == "tool_result":
                        return True
    else:
        kind = message.get("type")
        if type(kind) is str:
            if kind.endswith("_call_output") or kind in ("tool", "mcp_approval_response"):
                return True
            if kind == "ai":
                return False
            if kind == "constructor":
                ids = message.get("id")
                if type(ids) is list and ids and ids[-1] == "ToolMessage":
                    return True
    if "tool_call_id" in message:
        return True
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and "tool_call_id" in metadata


def is_reasoning(message: Mapping[str, Any]) -> bool:
    """True for an OpenAI Responses ``reasoning`` item: it belongs with the item that
    follows it, so a window never starts right after one it cut off."""
    return message.get("type") == "reasoning" and "role" not in message


def may_follow_reasoning(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a Responses item (a string ``type`` that is not a LangChain
    type), the only kind a ``reasoning`` item precedes: for other messages the stores do
    not look up the turn before a window (chat-format tails cost no extra query)."""
    kind = message.get("type")
    return type(kind) is str and kind not in LANGCHAIN_TYPES and kind != "constructor"


def trim_tail(turns: Sequence[TurnT], before: Mapping[str, Any] | None = None) -> list[TurnT]:
    """Drop the leading turns a window must not start with (models reject such a
    context): tool results (:func:`is_tool_result`), since a result is answered by a call
    that precedes it, so a result at the window's start has lost its call; and an item
    right after a Responses ``reasoning`` item that is outside the window (the reasoning
    item and the item that follows it are one unit, and the API refuses either alone).
    ``before`` is the message of the turn just before ``turns[0]`` (None: none, or not
    looked up); a dropped turn is the predecessor of the next, so a run of results, or a
    reasoning item and what follows it, is dropped whole."""
    start = 0
    count = len(turns)
    if before is not None and count and is_reasoning(before):
        start = 1
    while start < count and (
        is_tool_result(turns[start].message)
        or (start > 0 and is_reasoning(turns[start - 1].message))
    ):
        start += 1
    return list(turns[start:]) if start else list(turns)


#: Why a tail window held turns back (:class:`TailWindow` ``reason``).
HELD_ORPHAN_RESULT = "orphan_tool_result"  # leading results (or reasoning followers) cut off
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


def explain_tail(window: Sequence[Turn], before: Mapping[str, Any] | None = None) -> TailWindow:
    """Split a tail window (oldest first, within its turn and token budget) as
    :func:`trim_tail` does: ``turns`` equals ``trim_tail(window, before)``, ``held_back``
    holds the leading turns it drops (tool results whose call is outside the window, and
    items whose ``reasoning`` item is outside it), with :data:`HELD_ORPHAN_RESULT` when
    there are any."""
    turns = trim_tail(window, before)
    held = list(window[: len(window) - len(turns)])
    return TailWindow(turns, held, HELD_ORPHAN_RESULT if held else None)


#: How many turns before a search hit's window are fetched to find the calls (and
#: reasoning items) its leading results (and items) belong to.
HIT_CONTEXT_TURNS = 32


def whole_window(context: Sequence[TurnT], first: int) -> list[TurnT]:
    """A search hit's turns: ``context[first:]`` is the best-matching window, ``context``
    before it the turns fetched ahead of it (same chunk, oldest first). The window is
    widened back over leading tool results to the call they answer, and over an item to
    the ``reasoning`` item before it, so a hit shows the pair whole; what still has its
    call (or reasoning item) outside ``context`` is dropped as :func:`trim_tail` does."""
    start = max(0, min(first, len(context)))
    while (
        start > 0
        and start < len(context)
        and (is_tool_result(context[start].message) or is_reasoning(context[start - 1].message))
    ):
        start -= 1
    return trim_tail(context[start:])
