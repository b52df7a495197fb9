"""Pydantic AI message history stored in shardstore (``pip install 'shardstore[pydantic-ai]'``).

>>> history = ShardstoreMessageHistory("user-42-chat", store, tenant_id="acme", max_tokens=8000)
>>> result = history.run_sync(agent, "hi")  # the history in, the run's new messages stored
>>> result = await history.run(agent, "and now?")

Each ``ModelRequest`` / ``ModelResponse`` is one shardstore turn: the JSON
``pydantic_ai.messages.ModelMessagesTypeAdapter`` dumps for it, as it is, with
``"type": "pydantic-ai"`` added (a turn needs a ``type`` or a ``role``; the key is
dropped again on the way back). Reading validates the turns with the same adapter.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInput, InvalidMessage, MissingDependency

try:
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
    )
except ImportError as exc:  # the extra is not installed
    raise MissingDependency(
        "shardstore.integrations.pydantic_ai needs Pydantic AI: "
        "pip install 'shardstore[pydantic-ai]'"
    ) from exc

from ..aio import AsyncStore
from ..core import validate
from ..core.steps import Op
from ..history.ops import tail_op
from ..history.pairing import PYDANTIC_AI_TYPE
from ..store import Store
from ._mapped import MappedSession

FRAMEWORK = "pydantic-ai"

__all__ = ["ShardstoreMessageHistory", "from_turns", "to_turns"]


def to_turns(messages: Any) -> list[dict[str, Any]]:
    """The stored form of a list of Pydantic AI messages: each message's
    ``ModelMessagesTypeAdapter`` JSON (``mode="json"``) with ``"type": "pydantic-ai"``.

    Each is checked to read back before anything is written: ``InvalidInput`` for a value
    that is not a list of ``ModelRequest`` / ``ModelResponse``, ``InvalidMessage`` for a
    message Pydantic AI cannot serialize or read back, or one holding a NaN or an infinity
    (Pydantic AI's JSON would turn it into ``null``: refused instead of changed)."""
    if isinstance(messages, ModelRequest | ModelResponse) or not isinstance(messages, list | tuple):
        raise InvalidInput(
            "messages must be a list of pydantic_ai ModelRequest / ModelResponse, "
            f"not {type(messages).__name__}"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, ModelRequest | ModelResponse):
            raise InvalidMessage(
                f"message {i} is a {type(message).__name__}, not a pydantic_ai "
                "ModelRequest / ModelResponse"
            )
    if not messages:
        return []
    try:
        dumped = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
        back = ModelMessagesTypeAdapter.validate_python(dumped)
    except Exception as exc:  # pydantic's serialization / validation errors, recursion
        raise InvalidMessage(f"Pydantic AI cannot store these messages: {exc}") from exc
    turns = []
    for i, (message, item, again) in enumerate(zip(messages, dumped, back, strict=True)):
        if again != message:
            # Pydantic AI's own JSON round trip normalizes some values (a BinaryContent
            # image reads back as a BinaryImage, a deprecated RetryPromptPart as the
            # ToolReturnPart it became): stored as Pydantic AI would store it. A NaN, which
            # it writes as null, is refused rather than changed.
            _refuse_non_finite(ModelMessagesTypeAdapter.dump_python([message]), i)
        if "type" in item:  # pragma: no cover - no Pydantic AI message has one today
            raise InvalidMessage(f"message {i} has a 'type' field; this adapter cannot store it")
        turns.append({"type": PYDANTIC_AI_TYPE, **item})
    return turns


def from_turns(items: Sequence[dict[str, Any]]) -> list[ModelMessage]:
    """The Pydantic AI messages of stored turns (the form :func:`to_turns` writes);
    ``InvalidMessage`` for a turn that is not one (a chat dict written by something
    else, say)."""
    plain = []
    for item in items:
        if item.get("type") != PYDANTIC_AI_TYPE:
            kind = item.get("type", item.get("role"))
            raise InvalidMessage(f"a stored turn of kind {kind!r} is not a Pydantic AI message")
        plain.append({k: v for k, v in item.items() if k != "type"})
    try:
        return ModelMessagesTypeAdapter.validate_python(plain)
    except Exception as exc:  # pydantic.ValidationError
        raise InvalidMessage(f"a stored turn is not a Pydantic AI message: {exc}") from exc


def _refuse_non_finite(value: Any, index: int) -> None:
    """``InvalidMessage`` when ``value`` (a python-mode dump) holds a NaN or an infinity;
    walked without recursion, so a deep value cannot overflow the stack here."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidMessage(
                f"message {index} holds {item!r}, which JSON cannot hold (Pydantic AI "
                "would store it as null)"
            )
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


class ShardstoreMessageHistory:
    """A Pydantic AI conversation kept in a shardstore session.

    ``conversation_id`` (any non-empty string) is mapped onto a shardstore session with
    ``external_session_id("pydantic-ai", tenant_id, conversation_id)`` (a UUID string is
    used as it is), exposed as :attr:`shardstore_session_id`; the session is created by the
    first write, with ``{"framework": "pydantic-ai", "external_id": conversation_id}`` as
    its metadata. Reads never create it.

    ``max_messages`` / ``max_tokens`` (None: no limit): :meth:`messages` gives the newest
    messages within them (``store.tail``: tokens are those shardstore counted on each stored
    message's JSON, an overestimate of what a model is sent), and never a window that opens
    on a ``ModelRequest`` holding a ``ToolReturnPart`` (or a tool retry) whose
    ``ToolCallPart`` was cut off; the calls of a step are in one ``ModelResponse`` and their
    returns in the next request, so every call in the window has its returns after it (only
    the newest response may wait for them: a run in flight, or deferred tools). With
    neither, the whole history is read. A window may open on a ``ModelResponse``; give the
    agent ``instructions=`` (sent on every request) rather than a ``system_prompt`` (stored
    in the first request, which a window drops).

    ``store``: a :class:`shardstore.Store` serves the sync methods directly and the async
    ones from a worker thread; a :class:`shardstore.AsyncStore` serves the async ones and
    refuses the sync ones with ``ConfigurationError``.

    Guarantees: messages are stored as ``ModelMessagesTypeAdapter`` dumps them and come
    back as it reads them: equal to what was added whenever Pydantic AI's own JSON round
    trip gives them back equal (everything an ``Agent`` run makes), else exactly what that
    round trip gives (see :func:`to_turns`); in order; ``add_messages`` is atomic (one
    statement: all or none). ``clear`` rewinds the session to empty, keeping it (see
    ``ShardstoreSession.clear_session`` in :mod:`shardstore.integrations.openai_agents`);
    erasure is ``store.purge_session(history.shardstore_session_id)``. Bad input raises
    ``InvalidInput`` (``InvalidMessage``, ``TurnTooLarge``) and writes nothing.
    """

    def __init__(
        self,
        conversation_id: str,
        store: Store | AsyncStore,
        *,
        tenant_id: str,
        subject_id: str | None = None,
        agent_id: str | None = None,
        max_messages: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self._mapped = MappedSession(
            FRAMEWORK,
            "ShardstoreMessageHistory",
            store,
            conversation_id,
            tenant_id,
            subject_id,
            agent_id,
        )
        self.conversation_id = conversation_id
        self.max_messages = validate.optional_count(max_messages, "max_messages")
        self.max_tokens = validate.optional_count(max_tokens, "max_tokens", high=validate.MAX_INT64)

    @property
    def shardstore_session_id(self) -> uuid.UUID:
        """The shardstore session holding this conversation."""
        return self._mapped.session_id

    @property
    def store(self) -> Store | AsyncStore:
        """The store this conversation is kept in."""
        return self._mapped.store

    # ------------------------------------------------------------ operations

    def _read_op(self) -> Op[list[ModelMessage]]:
        mapped = self._mapped
        if self.max_messages is None and self.max_tokens is None:
            items = yield from mapped.items_op(None)
        elif not (yield from mapped._resolve_op(create=False)):
            items = []
        else:
            turns = yield from tail_op(
                mapped.store.ctx, mapped.session_id, self.max_messages, self.max_tokens
            )
            items = [t.message for t in turns]
        return from_turns(items)

    # ------------------------------------------------------------ sync

    def messages(self) -> list[ModelMessage]:
        """The conversation's messages, oldest first: all of them, or the newest within
        ``max_messages`` / ``max_tokens`` with tool call/return pairs whole; ready for
        ``agent.run_sync(..., message_history=...)``."""
        return self._mapped.run(self._read_op())

    def add_messages(self, messages: Sequence[ModelMessage]) -> None:
        """Append ``messages`` (``result.new_messages()``) in order, atomically; the first
        write creates the session."""
        self._mapped.run(self._mapped.add_op(to_turns(messages)))

    def clear(self) -> None:
        """Remove every message (a rewind of the session to its first stored turn)."""
        self._mapped.run(self._mapped.clear_op())

    def run_sync(self, agent: Any, user_prompt: Any = None, **kwargs: Any) -> Any:
        """``agent.run_sync(user_prompt, message_history=self.messages(), **kwargs)``, then
        the run's new messages stored (:meth:`add_messages`): two round trips around the
        run. Returns the run's result. A run that raises stores nothing."""
        self._no_history_argument(kwargs)
        result = agent.run_sync(user_prompt, message_history=self.messages(), **kwargs)
        self.add_messages(result.new_messages())
        return result

    # ------------------------------------------------------------ async

    async def amessages(self) -> list[ModelMessage]:
        """asyncio version of :meth:`messages`."""
        return await self._mapped.arun(self._read_op())

    async def aadd_messages(self, messages: Sequence[ModelMessage]) -> None:
        """asyncio version of :meth:`add_messages` (a cancelled caller still waits for the
        write's outcome)."""
        await self._mapped.amutate(self._mapped.add_op(to_turns(messages)))

    async def aclear(self) -> None:
        """asyncio version of :meth:`clear`."""
        await self._mapped.amutate(self._mapped.clear_op())

    async def run(self, agent: Any, user_prompt: Any = None, **kwargs: Any) -> Any:
        """asyncio version of :meth:`run_sync`: ``await agent.run(...)`` with the history,
        then its new messages stored."""
        self._no_history_argument(kwargs)
        result = await agent.run(user_prompt, message_history=await self.amessages(), **kwargs)
        await self.aadd_messages(result.new_messages())
        return result

    @staticmethod
    def _no_history_argument(kwargs: dict[str, Any]) -> None:
        if "message_history" in kwargs:
            raise InvalidInput(
                "message_history is what this history gives the run; call the agent "
                "yourself to pass another"
            )
