"""LangChain chat message history stored in shardstore (``pip install 'shardstore[langchain]'``).

>>> history = ShardstoreChatMessageHistory("user-42-chat", store, tenant_id="acme")
>>> history.add_messages([HumanMessage("hi"), AIMessage("hello")])
>>> history.messages
[HumanMessage(content='hi', ...), AIMessage(content='hello', ...)]

Each message is one shardstore turn, stored as ``langchain_core.messages.message_to_dict``
gives it (``{"type": "ai", "data": {...}}``: tool calls, ids, usage and metadata kept),
read back with ``messages_from_dict``. Chat-format turns written by something else
(``{"role": "user", "content": ...}``, e.g. by the CLI) are read with
``convert_to_messages``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInput, InvalidMessage, MissingDependency

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        BaseMessage,
        convert_to_messages,
        message_to_dict,
        messages_from_dict,
    )
except ImportError as exc:  # the extra is not installed
    raise MissingDependency(
        "shardstore.integrations.langchain needs langchain-core: "
        "pip install 'shardstore[langchain]'"
    ) from exc

from ..aio import AsyncStore
from ..core import validate
from ..store import Store
from ._mapped import MappedSession

FRAMEWORK = "langchain"


def to_item(message: Any) -> dict[str, Any]:
    """The stored form of a LangChain message (``InvalidMessage`` for anything else)."""
    if not isinstance(message, BaseMessage):
        raise InvalidMessage(
            f"a LangChain chat history stores BaseMessage objects, not {type(message).__name__}"
        )
    return message_to_dict(message)


def from_item(item: dict[str, Any]) -> BaseMessage:
    """The LangChain message of a stored turn: the ``message_to_dict`` form, or a chat
    message dict; ``InvalidMessage`` for a turn LangChain has no message for (a Responses
    ``function_call`` item, say)."""
    try:
        if isinstance(item.get("data"), dict) and isinstance(item.get("type"), str):
            return messages_from_dict([item])[0]
        return convert_to_messages([item])[0]
    except Exception as exc:  # LangChain raises ValueError, KeyError, pydantic errors
        kind = item.get("type", item.get("role"))
        raise InvalidMessage(
            f"a stored turn of kind {kind!r} is not a LangChain message: {exc}"
        ) from exc


class ShardstoreChatMessageHistory(BaseChatMessageHistory):
    """A LangChain ``BaseChatMessageHistory`` kept in a shardstore session.

    ``session_id`` (any non-empty string) is mapped onto a shardstore session with
    ``external_session_id("langchain", tenant_id, session_id)`` (a UUID string is used as
    it is), exposed as :attr:`shardstore_session_id`; the session is created by the first
    write, with ``{"framework": "langchain", "external_id": session_id}`` as metadata.

    ``store``: a :class:`shardstore.Store` serves the sync methods directly and the async
    ones from a worker thread; a :class:`shardstore.AsyncStore` serves the async methods
    (``aget_messages``, ``aadd_messages``, ``aclear``) and refuses the sync ones with
    ``ConfigurationError``.

    ``max_messages``: None (default) reads the whole history; N reads the newest turns
    within N, never opening on a ``ToolMessage`` whose tool call was cut off
    (:meth:`shardstore.Store.tail`), so a long conversation is not loaded whole on every
    call of a ``RunnableWithMessageHistory``.

    Guarantees: messages come back equal to what was added (type, content, tool calls,
    ids, metadata), in order; ``add_messages`` is atomic (one statement); ``clear`` removes
    every message by rewinding the session to its first stored turn, keeping the session
    for more (see ``ShardstoreSession.clear_session`` in
    :mod:`shardstore.integrations.openai_agents` for what a rewind removes; for erasure use
    ``store.purge_session``). Non-message input raises ``InvalidInput`` and writes nothing.
    """

    def __init__(
        self,
        session_id: str,
        store: Store | AsyncStore,
        *,
        tenant_id: str,
        subject_id: str | None = None,
        agent_id: str | None = None,
        max_messages: int | None = None,
    ) -> None:
        self._mapped = MappedSession(
            FRAMEWORK,
            "ShardstoreChatMessageHistory",
            store,
            session_id,
            tenant_id,
            subject_id,
            agent_id,
        )
        self.session_id = session_id
        self.max_messages = validate.optional_count(max_messages, "max_messages")

    @property
    def shardstore_session_id(self) -> uuid.UUID:
        """The shardstore session holding this history."""
        return self._mapped.session_id

    def _read_op(self) -> Any:
        if self.max_messages is None:
            return self._mapped.items_op(None)
        return self._mapped.window_op(self.max_messages)

    @staticmethod
    def _items(messages: Any) -> list[dict[str, Any]]:
        if isinstance(messages, BaseMessage) or not isinstance(messages, Sequence):
            raise InvalidInput(
                f"messages must be a sequence of BaseMessage, not {type(messages).__name__}"
            )
        return [to_item(m) for m in messages]

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The messages, oldest first (all, or the newest within ``max_messages``)."""
        return [from_item(i) for i in self._mapped.run(self._read_op())]

    async def aget_messages(self) -> list[BaseMessage]:
        """asyncio version of :attr:`messages`."""
        return [from_item(i) for i in await self._mapped.arun(self._read_op())]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in order, atomically; the first write creates the session."""
        self._mapped.run(self._mapped.add_op(self._items(messages)))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """asyncio version of :meth:`add_messages` (a cancelled caller still waits for
        the write's outcome)."""
        await self._mapped.amutate(self._mapped.add_op(self._items(messages)))

    def clear(self) -> None:
        """Remove every message (a rewind of the session to its first stored turn)."""
        self._mapped.run(self._mapped.clear_op())

    async def aclear(self) -> None:
        """asyncio version of :meth:`clear`."""
        await self._mapped.amutate(self._mapped.clear_op())
