"""Pure planning rules shared by the sync and async stores (and by the test model)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..models import Turn

TurnT = TypeVar("TurnT", bound=Turn)

#: LangChain message types (``message_to_dict`` / ``dumpd`` forms): never Responses items.
LANGCHAIN_TYPES = frozenset({"human", "ai", "system", "tool", "function", "chat", "developer"})

#: The ``type`` of a Pydantic AI ``ModelRequest`` / ``ModelResponse`` as
#: ``shardstore.integrations.pydantic_ai`` stores it: ``ModelMessagesTypeAdapter``'s JSON
#: of the message (``kind``, ``parts``, ...) with this ``type`` added. Never a Responses item.
PYDANTIC_AI_TYPE = "pydantic-ai"

#: The ``part_kind`` of the parts of a Pydantic AI ``ModelRequest`` that answer the
#: ``ModelResponse`` right before it: a tool's return (or its retry, ``outcome="retried"``),
#: the deprecated ``RetryPromptPart``, and Pydantic AI's feedback on a response it could not
#: use. All the calls of one model step are parts of one response, and all their returns
#: parts of the next request, so these pairs are matched by position.
PYDANTIC_AI_RESULT_PARTS = frozenset({"tool-return", "retry-prompt", "retry-feedback"})


def is_pydantic_ai_result(message: Mapping[str, Any]) -> bool:
    """True for a stored Pydantic AI ``ModelRequest`` (``type`` :data:`PYDANTIC_AI_TYPE`,
    ``kind: "request"``) holding a part that answers the response before it
    (:data:`PYDANTIC_AI_RESULT_PARTS`: a ``ToolReturnPart`` whose ``ToolCallPart`` is in that
    response, ...). A window must not open on one: its call would be cut off. Responses
    (tool calls, and the provider's built-in tool calls with their returns, which sit in
    the same response) are never results."""
    if message.get("type") != PYDANTIC_AI_TYPE or message.get("kind") != "request":
        return False
    parts = message.get("parts")
    if type(parts) is not list:
        return False
    return any(
        isinstance(part, Mapping) and part.get("part_kind") in PYDANTIC_AI_RESULT_PARTS
        for part in parts
    )


def is_tool_result(message: Mapping[str, Any]) -> bool:
    """True for a message that answers an earlier tool call, in every common format:

    - OpenAI chat: ``role: "tool"`` (or the legacy ``"function"``);
    - OpenAI Responses: a ``*_call_output`` item (``function_call_output``,
      ``computer_call_output``, ``custom_tool_call_output``, ...) and
      ``mcp_approval_response``;
    - Anthropic: a ``role: "user"`` message whose content holds a ``tool_result`` block;
    - LangChain: ``type: "tool"`` (also the ``{"type": "tool", "data": {...}}`` dump and
      the ``dumpd`` constructor form of a ``ToolMessage``);
    - Pydantic AI: a stored ``ModelRequest`` holding a tool return (:func:`is_pydantic_ai_result`);
    - LlamaIndex: a ``ChatMessage`` with ``role: "tool"`` (the OpenAI chat rule above);
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
        if kind == PYDANTIC_AI_TYPE:
            return is_pydantic_ai_result(message)
        if type(kind) is str:
            if kind.endswith("_call_output") or kind in ("tool", "mcp_approval_response"):
                return True
            if kind == "ai":
                return False
            if kind == "constructor":
                ids = message.get("id")
                if type(ids) is list and ids and ids[-1] == "ToolMessage":
                    return True
    if is_adk_function_response(message) or is_agent_framework_result(message):
        return True
    if "tool_call_id" in message:
        return True
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and "tool_call_id" in metadata


def is_adk_function_response(message: Mapping[str, Any]) -> bool:
    """True for a Google ADK event (shardstore.integrations.google_adk: the event's JSON
    with its content's ``role`` on top) whose content holds a ``function_response`` part:
    it answers the ``function_call`` parts of an earlier event (ADK merges the responses
    to parallel calls into one event, so the pair is two turns)."""
    if message.get("role") == "model":
        return False
    content = message.get("content")
    if not isinstance(content, Mapping):
        return False
    parts = content.get("parts")
    if type(parts) is not list:
        return False
    return any(isinstance(p, Mapping) and p.get("function_response") is not None for p in parts)


def is_agent_framework_result(message: Mapping[str, Any]) -> bool:
    """True for a Microsoft Agent Framework message (``Message.to_dict()``: ``type``
    ``"message"``, a ``contents`` list) that carries a ``function_result`` content, whatever
    its role (the framework gives results the ``tool`` role, which the chat rule already
    covers; a result under another role still answers an earlier ``function_call``)."""
    if message.get("type") != "message" or message.get("role") == "assistant":
        return False
    contents = message.get("contents")
    if type(contents) is not list:
        return False
    return any(isinstance(c, Mapping) and c.get("type") == "function_result" for c in contents)


def is_reasoning(message: Mapping[str, Any]) -> bool:
    """True for an OpenAI Responses ``reasoning`` item: it belongs with the item that
    follows it, so a window never starts right after one it cut off."""
    return message.get("type") == "reasoning" and "role" not in message


def may_follow_reasoning(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a Responses item (a string ``type`` that is not a LangChain
    type), the only kind a ``reasoning`` item precedes: for other messages the stores do
    not look up the turn before a window (chat-format tails cost no extra query)."""
    kind = message.get("type")
    return (
        type(kind) is str
        and kind not in LANGCHAIN_TYPES
        and kind != "constructor"
        and kind != PYDANTIC_AI_TYPE
    )


def responses_call_id(message: Mapping[str, Any]) -> str | None:
    """The id a later Responses result names this item by: a ``*_call`` item's
    ``call_id`` (``function_call``, ``computer_call``, ``custom_tool_call``,
    ``local_shell_call``, ...) or an ``mcp_approval_request``'s ``id``; None for any other
    message. Parallel calls are separate items in the Responses API, so a window can
    start between two of them; this is what :func:`trim_tail` matches results against."""
    return _responses_id(message, "_call", "mcp_approval_request", "id")


def responses_result_id(message: Mapping[str, Any]) -> str | None:
    """The call a Responses result answers: a ``*_call_output`` item's ``call_id`` or an
    ``mcp_approval_response``'s ``approval_request_id``; None for any other message (and
    for a result without a string id: those are paired by position only)."""
    return _responses_id(message, "_call_output", "mcp_approval_response", "approval_request_id")


def _responses_id(
    message: Mapping[str, Any], call_suffix: str, mcp_kind: str, mcp_key: str
) -> str | None:
    """The string id of a Responses item whose type ends with ``call_suffix`` (its
    ``call_id``) or is ``mcp_kind`` (its ``mcp_key``); None otherwise."""
    if "role" in message:
        return None
    kind = message.get("type")
    if type(kind) is not str:
        return None
    if kind.endswith(call_suffix):
        ident = message.get("call_id")
    elif kind == mcp_kind:
        ident = message.get(mcp_key)
    else:
        return None
    return ident if type(ident) is str else None


def _leading_start(turns: Sequence[TurnT], start: int) -> int:
    """The first index at or after ``start`` a window may begin at, by position: past
    tool results and past an item whose ``reasoning`` predecessor is cut off (index
    ``start - 1`` is outside the window, so a reasoning item there is cut off too)."""
    count = len(turns)
    while start < count and (
        is_tool_result(turns[start].message)
        or (start > 0 and is_reasoning(turns[start - 1].message))
    ):
        start += 1
    return start


def _orphan_at(turns: Sequence[TurnT], start: int) -> int | None:
    """The index of the first Responses result in ``turns[start:]`` whose call (by id) is
    known to be outside ``turns[start:]``, None when there is none. Known: its call is in
    ``turns[:start]`` (cut off by this trim, or outside a hit's window), or the result is
    in the window's leading run of call and result items (the window opened between
    parallel calls) and no call before it in the window carries its id. A result further
    on with an id no item carries is left alone (data without its call: not a cut)."""
    cut = {c for c in map(responses_call_id, (t.message for t in turns[:start])) if c}
    calls: set[str] = set()
    in_run = True
    for index in range(start, len(turns)):
        message = turns[index].message
        answered = responses_result_id(message)
        if answered is not None:
            if answered in cut or (in_run and answered not in calls):
                return index
            continue
        call = responses_call_id(message)
        if call is not None:
            calls.add(call)
        else:
            in_run = False
    return None


def trim_tail(turns: Sequence[TurnT], before: Mapping[str, Any] | None = None) -> list[TurnT]:
    """Drop the leading turns a window must not start with (models reject such a
    context): tool results (:func:`is_tool_result`), since a result is answered by a call
    that precedes it, so a result at the window's start has lost its call; an item right
    after a Responses ``reasoning`` item that is outside the window (the reasoning item and
    the item that follows it are one unit, and the API refuses either alone); and, for the
    Responses API, whose parallel calls are separate items, everything up to and
    including a ``*_call_output`` whose call the window cut off: one in the window's
    leading run of call and output items whose ``call_id`` no call before it carries (the
    window opened between two parallel calls), or one answering a call this trim
    dropped. ``before`` is the message of the turn just before ``turns[0]`` (None: none,
    or not looked up); a dropped turn is the predecessor of the next, so a run of results,
    or a reasoning item and what follows it, is dropped whole. The result is a suffix of
    ``turns``."""
    count = len(turns)
    start = 1 if before is not None and count and is_reasoning(before) else 0
    start = _leading_start(turns, start)
    while start < count:
        orphan = _orphan_at(turns, start)
        if orphan is None:
            break
        start = _leading_start(turns, orphan + 1)
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
    widened back over leading tool results to the call they answer, over an item to the
    ``reasoning`` item before it, and over parallel Responses calls until every
    ``*_call_output`` in it has its call, so a hit shows the pair whole; what still has its
    call (or reasoning item) outside ``context`` is dropped as :func:`trim_tail` does."""
    start = max(0, min(first, len(context)))
    while (
        start > 0
        and start < len(context)
        and (
            is_tool_result(context[start].message)
            or is_reasoning(context[start - 1].message)
            or _orphan_at(context, start) is not None
        )
    ):
        start -= 1
    return trim_tail(context[start:])
