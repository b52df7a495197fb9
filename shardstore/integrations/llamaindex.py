"""LlamaIndex chat store kept in shardstore (``pip install 'shardstore[llamaindex]'``).

>>> chat_store = ShardstoreChatStore(store, tenant_id="acme")
>>> memory = ChatMemoryBuffer.from_defaults(chat_store=chat_store, chat_store_key="user-42")

:class:`ShardstoreChatStore` implements llama-index-core's ``BaseChatStore`` (what
``ChatMemoryBuffer`` and the chat engines keep their history in). Each key is one shardstore
session; each ``ChatMessage`` is one turn, stored as ``message.model_dump(mode="json")``
gives it (``{"role": ..., "additional_kwargs": {...}, "blocks": [...]}``) and read back
with ``ChatMessage.model_validate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from typing import Any, TypeVar

from ..errors import (
    ConfigurationError,
    Conflict,
    InvalidInput,
    InvalidMessage,
    MissingDependency,
)

try:
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.llms import ChatMessage
    from llama_index.core.storage.chat_store.base import BaseChatStore
except ImportError as exc:  # the extra is not installed
    raise MissingDependency(
        "shardstore.integrations.llamaindex needs llama-index-core: "
        "pip install 'shardstore[llamaindex]'"
    ) from exc

from ..aio import AsyncStore
from ..core import validate
from ..core.sql import query
from ..core.steps import Op, Q, Tx, collect
from ..encryption.turns import open_turns_op
from ..history.ops import append_turns, history, window_op
from ..history.ops import sessions as sessions_op
from ..models import Turn
from ..store import Store
from ._mapped import MappedSession, MappedSessions
from .ids import EXTERNAL_ID_KEY, FRAMEWORK_KEY

FRAMEWORK = "llamaindex"

__all__ = ["ShardstoreChatStore", "from_item", "to_item"]

T = TypeVar("T")

# keys whose owner check is remembered (one statement saved per call); the oldest is
# forgotten past this many, so a process serving many users keeps a bounded map
_KNOWN_KEYS = 1024


def to_item(message: Any) -> dict[str, Any]:
    """The stored form of a LlamaIndex ``ChatMessage``: ``message.model_dump(mode="json")``
    (pydantic objects in ``additional_kwargs`` become their dicts, as ``SimpleChatStore``
    persists them). ``InvalidMessage`` for anything else, for a message pydantic cannot
    serialize or read back, and for one holding a NaN or an infinity (its JSON would hold
    ``null``: refused rather than changed)."""
    if not isinstance(message, ChatMessage):
        raise InvalidMessage(
            f"a LlamaIndex chat store stores ChatMessage objects, not {type(message).__name__}"
        )
    try:
        item: dict[str, Any] = message.model_dump(mode="json")
        again = ChatMessage.model_validate(item)
    except Exception as exc:  # pydantic's serialization / validation errors, recursion
        raise InvalidMessage(f"this ChatMessage cannot be stored: {exc}") from exc
    if again != message:  # a pydantic object read back as its dict; or a NaN, refused
        _refuse_non_finite(message.model_dump())
    return item


def from_item(item: dict[str, Any]) -> ChatMessage:
    """The ``ChatMessage`` of a stored turn (the form :func:`to_item` writes, or a chat
    dict ``{"role": "user", "content": "hi"}`` written by something else);
    ``InvalidMessage`` for a turn LlamaIndex has no message for (a Responses item, a role
    it does not know)."""
    if "role" not in item:
        raise InvalidMessage(
            f"a stored turn of type {item.get('type')!r} is not a LlamaIndex ChatMessage"
        )
    try:
        return ChatMessage.model_validate(item)
    except Exception as exc:  # pydantic.ValidationError
        raise InvalidMessage(
            f"a stored turn with role {item.get('role')!r} is not a LlamaIndex ChatMessage: {exc}"
        ) from exc


def _refuse_non_finite(value: Any) -> None:
    """``InvalidMessage`` when ``value`` (a python-mode dump) holds a NaN or an infinity;
    walked without recursion, so a deep value cannot overflow the stack here."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidMessage(f"the message holds {item!r}, which JSON cannot hold")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _items(messages: Any) -> list[dict[str, Any]]:
    if isinstance(messages, ChatMessage) or not isinstance(messages, list | tuple):
        raise InvalidInput(f"messages must be a list of ChatMessage, not {type(messages).__name__}")
    return [to_item(m) for m in messages]


def _index(idx: Any) -> int:
    if type(idx) is not int or idx < 0:
        raise InvalidInput(f"idx must be an int >= 0, not {idx!r}")
    return idx


def _rewind_locked_op(session_id: uuid.UUID, to_turn_seq: int) -> Op[None]:
    """``store.rewind``'s statement, in a transaction that holds the session row and has
    read its turns (so ``to_turn_seq`` is a stored turn: nothing to retry, and no
    savepoint's two round trips around it)."""
    row = yield Q(query("rewind"), (session_id, to_turn_seq), fetch="one", named=True)
    if row["status"] != "ok":  # pragma: no cover - the lock and the read rule it out
        raise Conflict(f"session {session_id} changed under its lock ({row['status']}); retry")


class ShardstoreChatStore(BaseChatStore):
    """A LlamaIndex ``BaseChatStore`` whose keys are shardstore sessions of one tenant.

    A key (any non-empty string) is mapped onto a shardstore session with
    ``external_session_id("llamaindex", tenant_id, key)`` (a UUID string is used as it is;
    :meth:`session_id` gives it); the session is created by the first write, with
    ``{"framework": "llamaindex", "external_id": key}`` as its metadata (and ``subject_id``
    / ``agent_id`` if given). Reads never create one. One store per tenant: ``get_keys``
    lists that tenant's keys.

    ``store``: a :class:`shardstore.Store` serves the sync methods directly and the async
    ones from a worker thread; a :class:`shardstore.AsyncStore` serves the async ones, and
    the sync ones only when they are called from a worker thread while its event loop runs
    (``ChatMemoryBuffer.aget`` / ``aset`` / ``areset`` call them so): they are run on that
    loop. Elsewhere (no loop, or on the loop's own thread, which would block it) they raise
    ``ConfigurationError``.

    ``max_messages``: None (default) makes ``get_messages`` read the whole history; N reads
    the newest turns within N, never opening on a ``role="tool"`` message whose tool call
    was cut off (``store.tail``), so ``ChatMemoryBuffer.get()`` does not load a long
    conversation whole on every call. Indexes (``delete_message``) always count from the
    first stored message.

    Guarantees: messages come back equal to what was stored (role, blocks,
    ``additional_kwargs`` of JSON values; pydantic objects there come back as their dicts),
    in order. Every method is atomic: ``add_message`` is one statement; ``set_messages``,
    ``delete_messages``, ``delete_message`` and ``delete_last_message`` each run in one
    transaction holding the session row, so no append lands halfway. ``set_messages`` keeps
    the stored messages that already match the new list from the start and rewinds and
    appends the rest only (a list equal to the stored one costs one read and writes
    nothing). ``delete_message(key, idx)`` rewinds to ``idx`` and appends the
    later messages again (new positions and times; checkpoints, vectors and facts at them
    go, as with ``store.rewind``). ``delete_messages`` empties the session and keeps it:
    erasure is ``store.purge_session(chat_store.session_id(key))``. Bad input raises
    ``InvalidInput`` (``InvalidMessage``, ``TurnTooLarge``) and writes nothing.

    Not serializable into a ``ChatMemoryBuffer.to_dict()`` and back: the dict holds the
    tenant, not the store.
    """

    tenant_id: str
    subject_id: str | None = None
    agent_id: str | None = None
    max_messages: int | None = None

    _store: Store | AsyncStore = PrivateAttr()
    _sessions: MappedSessions = PrivateAttr()
    _loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)

    def __init__(
        self,
        store: Store | AsyncStore,
        *,
        tenant_id: str,
        subject_id: str | None = None,
        agent_id: str | None = None,
        max_messages: int | None = None,
    ) -> None:
        sessions = MappedSessions(
            FRAMEWORK,
            "ShardstoreChatStore",
            store,
            tenant_id,
            subject_id,
            agent_id,
            keep=_KNOWN_KEYS,
        )
        owners = sessions.owners
        super().__init__(  # type: ignore[call-arg]
            tenant_id=owners.tenant_id,
            subject_id=owners.subject_id,
            agent_id=owners.agent_id,
            max_messages=validate.optional_count(max_messages, "max_messages"),
        )
        self._store = owners.store
        self._sessions = sessions
        self._note_loop()

    def _note_loop(self) -> None:
        """Remember the running event loop of an AsyncStore's caller (see :meth:`_call`)."""
        if isinstance(self._store, AsyncStore):
            with contextlib.suppress(RuntimeError):  # called outside a loop
                self._loop = asyncio.get_running_loop()

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name of this chat store class (used when it is serialized)."""
        return "ShardstoreChatStore"

    @property
    def store(self) -> Store | AsyncStore:
        """The store the keys are kept in."""
        return self._store

    def session_id(self, key: str) -> uuid.UUID:
        """The shardstore session holding ``key`` (for ``store.tail``, ``store.search``,
        ``store.purge_session``, ...)."""
        return self._session(key).session_id

    def _session(self, key: Any) -> MappedSession:
        return self._sessions.get(key)

    # ------------------------------------------------------------ operations

    def _get_op(self, mapped: MappedSession) -> Op[list[ChatMessage]]:
        if self.max_messages is None:
            items = yield from mapped.items_op(None)
        else:
            items = yield from mapped.window_op(self.max_messages)
        return [from_item(i) for i in items]

    def _locked_turns_op(self, mapped: MappedSession) -> Op[list[Turn]]:
        """In the caller's transaction: lock the session row, then read all its turns."""
        yield Q(query("adapter_lock_session"), (mapped.session_id,), fetch="one")
        turns: list[Turn] = yield from collect(history(self._store, mapped.session_id))
        return turns

    def _set_op(self, mapped: MappedSession, items: list[dict[str, Any]]) -> Op[None]:
        if not (yield from mapped._resolve_op(create=False)):
            # a new session: the batch is checked whole before the session is made
            yield from mapped.add_op(items)
            return
        # chat engines and agents call set() with the history they were given, most often
        # the one stored: one read settles that without the locking transaction
        stored = yield from mapped.items_op(None)
        if stored == items:
            return
        yield Tx.BEGIN
        turns = yield from self._locked_turns_op(mapped)
        keep = 0
        while keep < min(len(turns), len(items)) and turns[keep].message == items[keep]:
            keep += 1
        if keep < len(turns):
            yield from _rewind_locked_op(mapped.session_id, turns[keep].turn_seq)
        if keep < len(items):
            yield from append_turns(self._store, mapped.session_id, items[keep:])
        yield Tx.COMMIT

    def _delete_all_op(self, mapped: MappedSession) -> Op[list[ChatMessage] | None]:
        if not (yield from mapped._resolve_op(create=False)):
            return None
        yield Tx.BEGIN
        turns = yield from self._locked_turns_op(mapped)
        if turns:
            yield from _rewind_locked_op(mapped.session_id, turns[0].turn_seq)
        yield Tx.COMMIT
        return [from_item(t.message) for t in turns]

    def _delete_at_op(self, mapped: MappedSession, idx: int) -> Op[ChatMessage | None]:
        if not (yield from mapped._resolve_op(create=False)):
            return None
        yield Tx.BEGIN
        turns = yield from self._locked_turns_op(mapped)
        if idx >= len(turns):
            yield Tx.COMMIT
            return None
        yield from _rewind_locked_op(mapped.session_id, turns[idx].turn_seq)
        later = [t.message for t in turns[idx + 1 :]]
        if later:
            yield from append_turns(self._store, mapped.session_id, later)
        yield Tx.COMMIT
        return from_item(turns[idx].message)

    def _pop_op(self, mapped: MappedSession) -> Op[ChatMessage | None]:
        if not (yield from mapped._resolve_op(create=False)):
            return None
        yield Tx.BEGIN
        yield Q(query("adapter_lock_session"), (mapped.session_id,), fetch="one")
        newest = yield from window_op(mapped.session_id, 1, None)
        # opened before the rewind: a turn that cannot be read is not removed either
        newest = yield from open_turns_op(self._store.ctx.sealer, mapped.session_id, newest)
        if newest:
            yield from _rewind_locked_op(mapped.session_id, newest[0].turn_seq)
        yield Tx.COMMIT
        return from_item(newest[0].message) if newest else None

    def _keys_op(self) -> Op[list[str]]:
        listed = yield from sessions_op(self._store, tenant_id=self.tenant_id)
        return [
            str(s.metadata[EXTERNAL_ID_KEY])
            for s in reversed(listed)  # oldest first, as keys were first written
            if s.metadata.get(FRAMEWORK_KEY) == FRAMEWORK
            and isinstance(s.metadata.get(EXTERNAL_ID_KEY), str)
            and s.stored_turns > 0
        ]

    def _call(self, op: Op[T]) -> T:
        """Run ``op`` for a sync method. On an AsyncStore that works only from a thread
        other than its event loop's (``ChatMemoryBuffer.aget`` and ``aset`` call the sync
        methods in a worker thread): the operation is handed to that loop, which the
        awaiting caller leaves free, and waited for here."""
        if not isinstance(self._store, AsyncStore):
            return self._store._run(op)
        loop = self._loop
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if loop is None or loop.is_closed() or not loop.is_running() or here is loop:
            op.close()
            raise ConfigurationError(
                "ShardstoreChatStore was given an AsyncStore: use its async methods (a "
                "sync one works only from a worker thread while the store's event loop "
                "runs), or give it a sync Store (shardstore.connect())"
            )
        return asyncio.run_coroutine_threadsafe(self._store._run(op), loop).result()

    async def _arun(self, op: Op[T]) -> T:
        if isinstance(self._store, AsyncStore):
            return await self._store._run(op)
        return await asyncio.to_thread(self._store._run, op)

    # ------------------------------------------------------------ BaseChatStore, sync

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Make ``messages`` the key's whole history, atomically (see the class
        docstring: the matching prefix stays, the rest is rewound and appended)."""
        mapped, items = self._session(key), _items(messages)
        self._call(self._set_op(mapped, items))

    def get_messages(self, key: str) -> list[ChatMessage]:
        """The key's messages, oldest first (all, or the newest within
        ``max_messages``); none for a key never written."""
        mapped = self._session(key)
        return self._call(self._get_op(mapped))

    def add_message(self, key: str, message: ChatMessage) -> None:
        """Append one message (one statement); the first write creates the session."""
        mapped, items = self._session(key), [to_item(message)]
        self._call(mapped.add_op(items))

    def add_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Append ``messages`` in order, atomically, in one statement (not part of
        ``BaseChatStore``)."""
        mapped, items = self._session(key), _items(messages)
        self._call(mapped.add_op(items))

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Remove every message of the key and return them (None for a key never
        written); the session stays, empty, for more."""
        mapped = self._session(key)
        return self._call(self._delete_all_op(mapped))

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Remove the message at ``idx`` (0: the first stored) and return it; None when
        there is none (``InvalidInput`` for a negative or non-int ``idx``)."""
        mapped, at = self._session(key), _index(idx)
        return self._call(self._delete_at_op(mapped, at))

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Remove the newest message and return it (None when there is none)."""
        mapped = self._session(key)
        return self._call(self._pop_op(mapped))

    def get_keys(self) -> list[str]:
        """The tenant's keys holding at least one message, oldest session first."""
        return self._call(self._keys_op())

    # ------------------------------------------------------------ BaseChatStore, async

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """asyncio version of :meth:`set_messages`."""
        self._note_loop()
        mapped, items = self._session(key), _items(messages)
        await mapped.amutate(self._set_op(mapped, items))

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        """asyncio version of :meth:`get_messages`."""
        self._note_loop()
        mapped = self._session(key)
        return await mapped.arun(self._get_op(mapped))

    async def async_add_message(self, key: str, message: ChatMessage) -> None:
        """asyncio version of :meth:`add_message` (a cancelled caller still waits for the
        write's outcome, as for every write here)."""
        self._note_loop()
        mapped, items = self._session(key), [to_item(message)]
        await mapped.amutate(mapped.add_op(items))

    async def aadd_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """asyncio version of :meth:`add_messages`."""
        self._note_loop()
        mapped, items = self._session(key), _items(messages)
        await mapped.amutate(mapped.add_op(items))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        """asyncio version of :meth:`delete_messages`."""
        self._note_loop()
        mapped = self._session(key)
        return await mapped.amutate(self._delete_all_op(mapped))

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        """asyncio version of :meth:`delete_message`."""
        self._note_loop()
        mapped, at = self._session(key), _index(idx)
        return await mapped.amutate(self._delete_at_op(mapped, at))

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        """asyncio version of :meth:`delete_last_message`."""
        self._note_loop()
        mapped = self._session(key)
        return await mapped.amutate(self._pop_op(mapped))

    async def aget_keys(self) -> list[str]:
        """asyncio version of :meth:`get_keys`."""
        self._note_loop()
        return await self._arun(self._keys_op())
