"""What the session adapters share: one framework session mapped onto one shardstore
session, its four operations (read, append, pop, clear) and how they run on a
:class:`~shardstore.Store` or an :class:`~shardstore.AsyncStore`.

The operations are written once, as step-protocol operations composed of the stores' own
(``append_turns``, ``history``, ``rewind``) and named statements, and run through the
store's executor: the same code under both stores. Every read opens what it returns as the
store's own reads do (a store connected with ``encryption=``: sealed turns are opened, or
refused with a typed error; without it: a sealed turn is refused, never returned sealed).
A sync store runs them in a worker thread when a framework calls from asyncio.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from typing import Any, NamedTuple, TypeVar

from ..aio import AsyncStore
from ..core import validate
from ..core.sql import query
from ..core.steps import Op, Q, Tx, collect
from ..encryption.turns import open_turns_op
from ..errors import ConfigurationError, Conflict, InvalidInput, SessionConflict, SessionPurged
from ..history.ops import (
    append_turns,
    create_session_op,
    history,
    prepare_turns,
    tail_op,
    window_op,
)
from ..models import Turn
from ..state import rewind as rewind_ops
from ..store import Store
from .ids import external_metadata, external_session_id

T = TypeVar("T")


def check_store(store: Any, adapter: str) -> Store | AsyncStore:
    """``store`` if it is a shardstore store; ``ConfigurationError`` otherwise."""
    if not isinstance(store, Store | AsyncStore):
        raise ConfigurationError(
            f"{adapter} needs a shardstore.Store or shardstore.AsyncStore (from "
            f"shardstore.connect() / connect_async()), not {type(store).__name__}"
        )
    return store


class Owners(NamedTuple):
    """The store an adapter writes to and the owners of every session it makes there."""

    store: Store | AsyncStore
    tenant_id: str
    subject_id: str | None
    agent_id: str | None


def check_owners(
    adapter: str, store: Any, tenant_id: Any, subject_id: Any = None, agent_id: Any = None
) -> Owners:
    """The adapter's store and owners, checked in that order: a store that is not a
    shardstore store raises ``ConfigurationError``, an owner that is not a (non-empty, for
    the tenant) string ``InvalidInput``, before anything is read or written."""
    return Owners(
        check_store(store, adapter),
        validate.text(tenant_id, "tenant_id"),
        validate.optional_text(subject_id, "subject_id"),
        validate.optional_text(agent_id, "agent_id"),
    )


class MappedSession:
    """One framework session id in one tenant, as a shardstore session.

    The id is mapped with :func:`~shardstore.integrations.ids.external_session_id`; the
    session is created on the first write, with the framework and the original id in its
    metadata, and is never created by a read. A session that exists under another tenant
    (possible only when the framework id is itself a UUID) is refused with
    ``SessionConflict``; a purged one with ``SessionPurged``. Its owner check costs one
    statement, once per instance.
    """

    def __init__(
        self,
        framework: str,
        adapter: str,
        store: Any,
        external_id: Any,
        tenant_id: Any,
        subject_id: Any = None,
        agent_id: Any = None,
    ) -> None:
        self.store, self.tenant_id, self.subject_id, self.agent_id = check_owners(
            adapter, store, tenant_id, subject_id, agent_id
        )
        if not isinstance(external_id, str):
            raise InvalidInput(
                f"a {framework} session id must be a string, not {type(external_id).__name__}"
            )
        validate.text(external_id, "session_id", limit=validate.MAX_KEY_CHARS)
        self.external_id = external_id
        self.framework = framework
        self.adapter = adapter
        self.session_id: uuid.UUID = external_session_id(framework, self.tenant_id, external_id)
        self._known = False  # the session exists, is live and is this tenant's

    # ------------------------------------------------------------ operations

    def _resolve_op(self, create: bool) -> Op[bool]:
        """Whether the session exists (checked once); created first when ``create``."""
        if self._known:
            return True
        owners = yield Q(query("session_owners"), (self.session_id,), fetch="one", named=True)
        if owners is None:
            if not create:
                return False
            yield from create_session_op(
                self.tenant_id,
                self.subject_id,
                self.agent_id,
                self.session_id,
                external_metadata(self.framework, self.external_id),
            )
        elif owners["purged"]:
            raise SessionPurged(
                f"{self.framework} session {self.external_id!r} (shardstore session "
                f"{self.session_id}) was purged; its id cannot be used again"
            )
        elif owners["tenant_id"] != self.tenant_id:
            raise SessionConflict(
                f"session {self.session_id} belongs to another tenant, not {self.tenant_id!r}"
            )
        self._known = True
        return True

    def items_op(self, limit: int | None) -> Op[list[dict[str, Any]]]:
        """The stored items oldest first: all of them, or exactly the ``limit`` newest
        (no window rule applied: what was stored, as it was stored)."""
        if limit is not None:
            limit = validate.count(limit, "limit", low=0)
        if limit == 0 or not (yield from self._resolve_op(create=False)):
            return []
        if limit is None:
            turns: list[Turn] = yield from collect(history(self.store, self.session_id))
            return [t.message for t in turns]
        newest = yield from window_op(self.session_id, limit, None)
        newest = yield from open_turns_op(self.store.ctx.sealer, self.session_id, newest)
        return [t.message for t in newest]

    def window_op(self, n: int) -> Op[list[dict[str, Any]]]:
        """The newest turns within ``n``, never opening on a tool result whose call was
        cut off (:meth:`~shardstore.Store.tail`)."""
        if not (yield from self._resolve_op(create=False)):
            return []
        turns = yield from tail_op(self.store.ctx, self.session_id, n)
        return [t.message for t in turns]

    def add_op(self, items: Sequence[dict[str, Any]]) -> Op[None]:
        """Append ``items`` in order, atomically (one statement): all or none. Creates the
        session first if it does not exist."""
        if not items:
            return
        if not self._known:
            # the whole batch is checked (shape, JSON, size) before the session is made:
            # bad input writes nothing, not even the session; later appends check it
            # themselves before their one statement
            prepare_turns(self.store.ctx, items, [None] * len(items))
        yield from self._resolve_op(create=True)
        yield from append_turns(self.store, self.session_id, list(items))

    def pop_op(self) -> Op[dict[str, Any] | None]:
        """Remove the newest item and return it (None when there is none), in one
        transaction holding the session row: no append or other pop can land between the
        read and the rewind, so the item returned is exactly the one removed."""
        if not (yield from self._resolve_op(create=False)):
            return None
        yield Tx.BEGIN
        yield Q(query("adapter_lock_session"), (self.session_id,), fetch="one")
        window = yield from window_op(self.session_id, 1, None)
        if not window:
            yield Tx.COMMIT
            return None
        # opened before the rewind: an item that cannot be read is not removed either
        (newest,) = yield from open_turns_op(self.store.ctx.sealer, self.session_id, window)
        removed = yield from rewind_ops.rewind(self.store, self.session_id, newest.turn_seq)
        if removed != 1:  # pragma: no cover - the lock rules it out
            raise Conflict(f"the newest turn of session {self.session_id} moved; retry")
        yield Tx.COMMIT
        return newest.message

    def clear_op(self) -> Op[int]:
        """Rewind the session to its first stored turn (0, or where a range purge cut it):
        no items left, the session row kept for more. Returns how many turns went."""
        if not (yield from self._resolve_op(create=False)):
            return 0
        row = yield Q(query("rewind"), (self.session_id, 0), fetch="one", named=True)
        if row["status"] == "purged_below":  # a range purge removed the oldest turns
            row = yield Q(query("rewind"), (self.session_id, row["first"]), fetch="one", named=True)
        if row["status"] != "ok":  # pragma: no cover - 0 and the first kept turn are valid
            raise InvalidInput(f"cannot clear session {self.session_id}: {row['status']}")
        return int(row["removed"])

    # ------------------------------------------------------------ running them

    def run(self, op: Op[T]) -> T:
        """Run ``op`` now (a sync store only: an AsyncStore needs the async methods)."""
        if isinstance(self.store, AsyncStore):
            op.close()
            raise ConfigurationError(
                f"{self.adapter} was given an AsyncStore: use its async methods, or give it "
                "a sync Store (shardstore.connect())"
            )
        return self.store._run(op)

    async def arun(self, op: Op[T]) -> T:
        """Run ``op`` from asyncio: awaited on an AsyncStore, in a worker thread on a
        Store."""
        if isinstance(self.store, AsyncStore):
            return await self.store._run(op)
        return await asyncio.to_thread(self.store._run, op)

    async def amutate(self, op: Op[T]) -> T:
        """:meth:`arun` for a write: a cancelled caller still waits for the write's outcome
        (stored or not) before the cancellation propagates, so it never stops knowing
        whether it happened."""
        return await finish_despite_cancel(self.arun(op))


class MappedSessions:
    """The :class:`MappedSession` of each framework session id that one adapter instance
    serves, all in one store and tenant and written with the same owners (checked here,
    by :func:`check_owners`, before any session is mapped). The newest ``keep`` are kept
    (each knows its owner check: a kept one costs no statement)."""

    def __init__(
        self,
        framework: str,
        adapter: str,
        store: Any,
        tenant_id: Any,
        subject_id: Any,
        agent_id: Any,
        keep: int = 1024,
    ) -> None:
        self.owners = check_owners(adapter, store, tenant_id, subject_id, agent_id)
        self._framework = framework
        self._adapter = adapter
        self._keep = keep
        self._sessions: OrderedDict[str, MappedSession] = OrderedDict()

    def get(self, external_id: Any) -> MappedSession:
        """The mapped session of ``external_id`` (checked as :class:`MappedSession`
        checks it)."""
        known = self._sessions.get(external_id) if isinstance(external_id, str) else None
        if known is not None:
            self._sessions.move_to_end(external_id)
            return known
        store, tenant_id, subject_id, agent_id = self.owners
        mapped = MappedSession(
            self._framework, self._adapter, store, external_id, tenant_id, subject_id, agent_id
        )
        self._sessions[external_id] = mapped
        if len(self._sessions) > self._keep:
            self._sessions.popitem(last=False)
        return mapped


def create_session_row_op(
    session_id: uuid.UUID,
    tenant_id: str,
    subject_id: str | None,
    agent_id: str | None,
    metadata_json: str,
    purged: str,
) -> Op[bool]:
    """Create the session row (inside the caller's transaction); False where a row with
    that id exists already, ``SessionPurged(purged)`` where that one was purged."""
    row = yield Q(
        query("session_create"),
        (session_id, tenant_id, subject_id, agent_id, metadata_json),
        fetch="one",
    )
    if row is not None:
        return True
    owners = yield Q(query("session_owners"), (session_id,), fetch="one", named=True)
    if owners is not None and owners["purged"]:
        raise SessionPurged(purged)
    return False


async def finish_despite_cancel(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even if the caller is cancelled meanwhile (once or
    more); then re-raise the first cancellation, or return its result."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller sees
        raise cancelled
    return task.result()
