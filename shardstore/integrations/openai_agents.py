"""OpenAI Agents SDK sessions stored in shardstore (``pip install 'shardstore[openai-agents]'``).

>>> session = ShardstoreSession("user-42-chat", store, tenant_id="acme")
>>> result = await Runner.run(agent, "hi", session=session)

:class:`ShardstoreSession` implements the SDK's ``agents.memory.Session`` protocol. Each SDK
item (a Responses-API input item: ``message``, ``function_call``, ``function_call_output``,
``reasoning``, ...) is one shardstore turn, stored and given back exactly as it was given.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..errors import InvalidInput, MissingDependency

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # the extra is not installed
    raise MissingDependency(
        "shardstore.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'shardstore[openai-agents]'"
    ) from exc

from ..aio import AsyncStore
from ..store import Store
from ._mapped import MappedSession

FRAMEWORK = "openai-agents"


class ShardstoreSession:
    """An OpenAI Agents SDK session kept in a shardstore session.

    ``session_id`` is the SDK's session id (any non-empty string); it is mapped onto a
    shardstore session id with ``external_session_id("openai-agents", tenant_id,
    session_id)`` (a UUID string is used as it is), exposed as :attr:`shardstore_session_id`.
    The session is created on the first ``add_items`` (with ``subject_id`` / ``agent_id``
    if given, and ``{"framework": "openai-agents", "external_id": session_id}`` as its
    metadata), so reading a session never written returns nothing and creates nothing.

    ``store`` is a :class:`shardstore.AsyncStore` (awaited directly) or a
    :class:`shardstore.Store` (each call runs in a worker thread). ``session_settings``: an
    ``agents.SessionSettings`` (or its dict); its ``limit`` is what ``get_items()`` returns
    when called without one, as in the SDK's SQLite session.

    Guarantees: items come back exactly as they were added (every JSON value, in order,
    including a batch added in one call, whose turns share one timestamp); ``add_items``
    is atomic (all the items or none, one statement); ``pop_item`` removes the newest item
    with ``store.rewind`` and returns it, atomically; ``clear_session`` rewinds the
    session to empty (see its docstring for what that removes and keeps). Bad input
    (non-dict items, an item without ``role`` or ``type``, a bad limit) raises
    ``InvalidInput`` and writes nothing.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: Store | AsyncStore,
        *,
        tenant_id: str,
        subject_id: str | None = None,
        agent_id: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self._mapped = MappedSession(
            FRAMEWORK, "ShardstoreSession", store, session_id, tenant_id, subject_id, agent_id
        )
        self.session_id = session_id
        try:
            self.session_settings = (
                SessionSettings()
                if session_settings is None
                else coerce_session_settings(session_settings)
            )
        except Exception as exc:  # the SDK raises its own UserError / pydantic errors
            raise InvalidInput(f"session_settings: {exc}") from exc

    @property
    def shardstore_session_id(self) -> uuid.UUID:
        """The shardstore session holding this SDK session (for ``store.tail``,
        ``store.purge_session``, checkpoints, ...)."""
        return self._mapped.session_id

    @property
    def store(self) -> Store | AsyncStore:
        """The store this session is kept in."""
        return self._mapped.store

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: all of them, or exactly the ``limit`` newest
        (``limit`` None: ``session_settings.limit``; 0 gives none). Nothing is dropped or
        reordered: a window may open on a ``function_call_output`` whose call is older
        (the SDK compares these items with what it wrote); use ``store.tail`` on
        :attr:`shardstore_session_id` for a window that keeps tool pairs whole."""
        if type(limit) is bool:
            raise InvalidInput(f"limit must be None or an int >= 0, not {limit!r}")
        effective = resolve_session_limit(limit, self.session_settings)
        items = await self._mapped.arun(self._mapped.items_op(effective))
        return items  # type: ignore[return-value]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, atomically: all of them or none. Each must be a dict
        with a string ``role`` or ``type`` made of JSON values; otherwise ``InvalidInput``
        and nothing is written. The first call creates the session. A caller cancelled
        meanwhile still waits until the write is done or failed."""
        if not isinstance(items, list | tuple):
            raise InvalidInput(f"items must be a list of item dicts, not {type(items).__name__}")
        await self._mapped.amutate(self._mapped.add_op(list(items)))  # type: ignore[arg-type]

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; None when the session has none. The read
        and the removal (``store.rewind`` to that item's position) commit together; its
        idempotency key, vectors and any checkpoint positioned at it go with it."""
        item = await self._mapped.amutate(self._mapped.pop_op())
        return item  # type: ignore[return-value]

    async def clear_session(self) -> None:
        """Remove every item: ``store.rewind`` of the mapped session to its first stored
        turn (turn 0, or the first turn a range purge kept). The turns, their idempotency
        keys, vectors, checkpoints and facts sourced at them are removed; the session row
        (tenant, subject, metadata) and its runs stay, and the session takes new items
        afterwards, numbered from the cut, as the SDK expects of a cleared session.

        This is not an erasure: the session's row and metadata remain, and deleted rows
        stay on disk until VACUUM. For GDPR erasure use
        ``store.purge_session(session.shardstore_session_id)``, after which this SDK
        session id cannot be used again (``SessionPurged``)."""
        await self._mapped.amutate(self._mapped.clear_op())
