"""Microsoft Agent Framework history and workflow checkpoints in shardstore
(``pip install 'shardstore[agent-framework]'``).

>>> history = ShardstoreHistoryProvider(store, tenant_id="acme")
>>> agent = Agent(client=client, context_providers=[history])
>>> storage = ShardstoreCheckpointStorage(store, tenant_id="acme")
>>> workflow = WorkflowBuilder(start_executor=first, checkpoint_storage=storage).build()

:class:`ShardstoreHistoryProvider` is the framework's ``HistoryProvider``: an agent session
(``AgentSession.session_id``) is one shardstore session and each ``Message`` one turn, its
``Message.to_dict()`` JSON as it is. :class:`ShardstoreCheckpointStorage` is a workflow
``CheckpointStorage``: each ``WorkflowCheckpoint`` is one shardstore checkpoint (the
framework's own ``encode_checkpoint_value`` form) in a session of its own, so that loading or
deleting one by id needs no other key.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..errors import CheckpointNotFound, InvalidInput, MissingDependency

try:
    from agent_framework import HistoryProvider, Message
    from agent_framework._workflows._checkpoint import CheckpointID, WorkflowCheckpoint
    from agent_framework._workflows._checkpoint_encoding import (
        decode_checkpoint_value,
        encode_checkpoint_value,
    )
    from agent_framework.exceptions import WorkflowCheckpointException
except ImportError as exc:  # the extra is not installed
    raise MissingDependency(
        "shardstore.integrations.agent_framework needs Microsoft Agent Framework: "
        "pip install 'shardstore[agent-framework]'"
    ) from exc

from ..aio import AsyncStore
from ..core import jsoncodec, validate
from ..core.sql import query
from ..core.steps import Op, Q, Tx
from ..history.ops import sessions as list_sessions_op
from ..history.ops import window_op
from ..history.pairing import trim_tail
from ..lifecycle import purge as purge_ops
from ..state import checkpoints as checkpoint_ops
from ..state.checkpoints import opened_column
from ..store import Store
from ._mapped import (
    MappedSession,
    MappedSessions,
    check_store,
    create_session_row_op,
    finish_despite_cancel,
)
from .ids import EXTERNAL_ID_KEY, FRAMEWORK_KEY, external_metadata, external_session_id

FRAMEWORK = "agent-framework"
WORKFLOW_FRAMEWORK = "agent-framework-workflow"
_CHECKPOINT_KEY = "checkpoint"  # the shardstore checkpoint's field holding the encoded one
_SESSIONS_CACHED = 1024  # mapped sessions one provider keeps (each knows its owner check)


class WorkflowCheckpointNotFound(CheckpointNotFound, WorkflowCheckpointException):
    """``load`` of a checkpoint id this tenant has not stored (or deleted)."""


async def _run(store: Store | AsyncStore, op: Op[Any]) -> Any:
    if isinstance(store, AsyncStore):
        return await store._run(op)
    return await asyncio.to_thread(store._run, op)


class ShardstoreHistoryProvider(HistoryProvider):
    """An Agent Framework history provider keeping each agent session in shardstore.

    ``store`` is a :class:`shardstore.AsyncStore` (awaited directly) or a
    :class:`shardstore.Store` (each call runs in a worker thread). The framework's
    session id is mapped with ``external_session_id("agent-framework", tenant_id, id)``
    (:meth:`shardstore_session_id`); the session is created by the first save, never by a
    read. ``max_messages``: give the model only the newest messages, never opening on a
    tool result whose call was cut off (``store.tail``'s rule); None loads them all.

    Guarantees: messages come back equal to what was saved (``Message.to_dict()`` as the
    turn, ``Message.from_dict`` on read), oldest first; a save is atomic (one statement:
    all the messages or none); bad input (not a ``Message``, a message JSON cannot hold, a
    missing session id) raises ``InvalidInput`` and writes nothing; another tenant's
    session is never read or written (the tenant is part of the id; a UUID session id of
    another tenant is ``SessionConflict``).
    """

    DEFAULT_SOURCE_ID = "shardstore"

    def __init__(
        self,
        store: Store | AsyncStore,
        *,
        tenant_id: str,
        source_id: str | None = None,
        max_messages: int | None = None,
        subject_id: str | None = None,
        agent_id: str | None = None,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
    ) -> None:
        super().__init__(
            source_id=source_id or self.DEFAULT_SOURCE_ID,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self._sessions = MappedSessions(
            FRAMEWORK,
            "ShardstoreHistoryProvider",
            store,
            tenant_id,
            subject_id,
            agent_id,
            keep=_SESSIONS_CACHED,
        )
        self.store, self.tenant_id, self.subject_id, self.agent_id = self._sessions.owners
        self.max_messages = validate.optional_count(max_messages, "max_messages")

    def _mapped(self, session_id: Any) -> MappedSession:
        if session_id is None:
            raise InvalidInput(
                "ShardstoreHistoryProvider needs the agent session's id (run the agent with "
                "a session: agent.create_session())"
            )
        return self._sessions.get(session_id)

    def shardstore_session_id(self, session_id: str) -> uuid.UUID:
        """The shardstore session holding the agent session ``session_id``."""
        return self._mapped(session_id).session_id

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The session's messages, oldest first (the newest ``max_messages`` if set); none
        for a session never saved to."""
        mapped = self._mapped(session_id)
        if self.max_messages is None:
            items = await mapped.arun(mapped.items_op(None))
        else:
            items = await mapped.arun(self._window_op(mapped, self.max_messages))
        return [Message.from_dict(item) for item in items]

    @staticmethod
    def _window_op(mapped: MappedSession, n: int) -> Op[list[dict[str, Any]]]:
        # the newest n, trimmed by the pairing rules; the framework's messages never follow
        # a Responses reasoning item, so the turn before the window is not looked up
        if not (yield from mapped._resolve_op(create=False)):
            return []
        turns = yield from window_op(mapped.session_id, n, None)
        return [t.message for t in trim_tail(turns)]

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Append ``messages`` in order, atomically. A caller cancelled meanwhile still
        waits until the write is done or failed."""
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise InvalidInput(f"messages must be a list of Message, not {type(messages).__name__}")
        items = []
        for message in messages:
            if not isinstance(message, Message):
                raise InvalidInput(
                    f"messages must be Message objects, not {type(message).__name__}"
                )
            items.append(message.to_dict())
        mapped = self._mapped(session_id)
        await finish_despite_cancel(mapped.arun(mapped.add_op(items)))


class ShardstoreCheckpointStorage:
    """A workflow ``CheckpointStorage`` in shardstore, for one tenant.

    Each checkpoint is a shardstore session of its own
    (``external_session_id("agent-framework-workflow", tenant_id, checkpoint_id)``, agent
    ``workflow_name``) holding one shardstore checkpoint: the framework's
    ``encode_checkpoint_value`` form of ``WorkflowCheckpoint.to_dict()`` (JSON values as
    they are, other Python objects pickled by the framework). ``allowed_checkpoint_types``:
    the ``"module:qualname"`` types beyond the framework's safe set that ``load`` may
    unpickle, as ``FileCheckpointStorage`` takes them.

    Guarantees: ``load`` returns a checkpoint equal to the one saved, or raises
    :class:`WorkflowCheckpointNotFound` (a ``WorkflowCheckpointException``); ``save`` of
    an id saved before replaces it, as the framework's storages do; ``delete`` erases the
    checkpoint (``store.purge_session``) and its id cannot be saved again
    (``SessionPurged``); ``list_*`` and ``get_latest`` see this tenant's checkpoints of
    that workflow only; bad input raises ``InvalidInput`` and writes nothing.
    """

    def __init__(
        self,
        store: Store | AsyncStore,
        *,
        tenant_id: str,
        allowed_checkpoint_types: list[str] | None = None,
    ) -> None:
        self.store = check_store(store, "ShardstoreCheckpointStorage")
        self.tenant_id = validate.text(tenant_id, "tenant_id")
        self._allowed = frozenset(allowed_checkpoint_types or [])

    def shardstore_session_id(self, checkpoint_id: CheckpointID) -> uuid.UUID:
        """The shardstore session holding the checkpoint ``checkpoint_id``."""
        if not isinstance(checkpoint_id, str):
            raise InvalidInput(
                f"checkpoint_id must be a string, not {type(checkpoint_id).__name__}"
            )
        validate.text(checkpoint_id, "checkpoint_id", limit=validate.MAX_KEY_CHARS)
        return external_session_id(WORKFLOW_FRAMEWORK, self.tenant_id, checkpoint_id)

    def _decode(self, row: Any) -> WorkflowCheckpoint:
        """A ``checkpoint_newest`` row's workflow checkpoint (its state opened as the store's
        checkpoint reads open it, with encryption on)."""
        state = opened_column(self.store.ctx.sealer, row, "state", row["session_id"])
        encoded = state[_CHECKPOINT_KEY]
        return WorkflowCheckpoint.from_dict(
            decode_checkpoint_value(encoded, allowed_types=self._allowed)
        )

    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        """Store ``checkpoint`` (session and checkpoint in one transaction) and return
        its id."""
        if not isinstance(checkpoint, WorkflowCheckpoint):
            raise InvalidInput(
                f"checkpoint must be a WorkflowCheckpoint, not {type(checkpoint).__name__}"
            )
        cid = checkpoint.checkpoint_id
        sid = self.shardstore_session_id(cid)
        workflow = validate.text(checkpoint.workflow_name, "workflow_name")
        encoded = encode_checkpoint_value(checkpoint.to_dict())
        state = {_CHECKPOINT_KEY: encoded}
        jsoncodec.encode_json(state, "checkpoint")  # checked before anything is sent
        metadata = {
            **external_metadata(WORKFLOW_FRAMEWORK, cid),
            "workflow_name": workflow,
            "timestamp": checkpoint.timestamp,
        }
        meta_text = jsoncodec.encode_json(metadata, "metadata")

        def op() -> Op[None]:
            yield Tx.BEGIN
            yield from create_session_row_op(
                sid,
                self.tenant_id,
                None,
                workflow,
                meta_text,
                purged=f"workflow checkpoint {cid!r} was deleted; its id cannot be saved again",
            )
            yield from checkpoint_ops.checkpoint(self.store, sid, state)
            yield Tx.COMMIT

        await finish_despite_cancel(_run(self.store, op()))
        return cid

    async def load(self, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
        """The checkpoint saved under ``checkpoint_id`` (one statement)."""
        sid = self.shardstore_session_id(checkpoint_id)

        def op() -> Op[Any]:
            row = yield Q(query("checkpoint_newest"), (sid,), fetch="one", named=True)
            return row

        row = await _run(self.store, op())
        if row is None:
            raise WorkflowCheckpointNotFound(f"No checkpoint found with ID {checkpoint_id}")
        return self._decode(row)

    def _listed_op(self, workflow_name: str) -> Op[list[tuple[str, str, uuid.UUID]]]:
        """(checkpoint id, timestamp, session) of the workflow's checkpoints."""
        infos = yield from list_sessions_op(
            self.store, tenant_id=self.tenant_id, agent_id=workflow_name
        )
        return [
            (str(i.metadata.get(EXTERNAL_ID_KEY)), str(i.metadata.get("timestamp")), i.session_id)
            for i in infos
            if i.metadata.get(FRAMEWORK_KEY) == WORKFLOW_FRAMEWORK
            and i.metadata.get("workflow_name") == workflow_name
        ]

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """The workflow's checkpoints, oldest first (one snapshot)."""
        name = validate.text(workflow_name, "workflow_name")

        def op() -> Op[list[Any]]:
            yield Tx.BEGIN_SNAPSHOT
            listed = yield from self._listed_op(name)
            rows = []
            for _cid, _stamp, sid in reversed(listed):
                row = yield Q(query("checkpoint_newest"), (sid,), fetch="one", named=True)
                if row is not None:
                    rows.append(row)
            yield Tx.COMMIT
            return rows

        return [self._decode(row) for row in await _run(self.store, op())]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        """The ids of the workflow's checkpoints, oldest first (one statement)."""
        name = validate.text(workflow_name, "workflow_name")
        listed = await _run(self.store, self._listed_op(name))
        return [cid for cid, _stamp, _sid in reversed(listed)]

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The workflow's checkpoint with the newest ``timestamp``; None if it has none."""
        name = validate.text(workflow_name, "workflow_name")
        listed = await _run(self.store, self._listed_op(name))
        if not listed:
            return None

        def when(entry: tuple[str, str, uuid.UUID]) -> tuple[int, float]:
            try:
                return (1, datetime.fromisoformat(entry[1]).timestamp())
            except ValueError:  # not ISO 8601: older than any that is
                return (0, 0.0)

        newest = max(listed, key=when)
        try:
            return await self.load(newest[0])
        except WorkflowCheckpointNotFound:  # deleted meanwhile
            return None

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Erase the checkpoint; False if there was none."""
        sid = self.shardstore_session_id(checkpoint_id)

        def op() -> Op[bool]:
            owners = yield Q(query("session_owners"), (sid,), fetch="one", named=True)
            if owners is None or owners["purged"]:
                return False
            yield from purge_ops.purge_session(self.store, sid)
            return True

        deleted: bool = await finish_despite_cancel(_run(self.store, op()))
        return deleted
