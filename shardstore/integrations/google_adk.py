"""Google ADK sessions stored in shardstore (``pip install 'shardstore[adk]'``).

>>> service = ShardstoreSessionService(store, tenant_id="acme")
>>> runner = Runner(agent=agent, app_name="helper", session_service=service)

:class:`ShardstoreSessionService` is an ADK ``BaseSessionService``. An ADK session (app,
user, id) is one shardstore session of the tenant (subject = the ADK user, agent = the ADK
app); each event is one turn holding the event's own JSON (``Event.model_dump(mode="json",
exclude_none=True)``) plus ``role``, the role of its content, which shardstore's message
contract asks for and which is removed again on read. State follows ADK's scopes: session
keys live in a shardstore checkpoint written in the same statement as the event that
changed them; ``app:`` and ``user:`` keys are facts (``store.remember``) of the subjects
``google-adk-app:<app>`` and ``<user>``, shared by every session of that app or user;
``temp:`` keys are never stored.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ..errors import (
    InvalidInput,
    MissingDependency,
    SessionConflict,
    SessionExists,
    SessionNotFound,
    SessionPurged,
)

try:
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.sessions import _session_util
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
except ImportError as exc:  # the extra is not installed
    raise MissingDependency(
        "shardstore.integrations.google_adk needs Google ADK: pip install 'shardstore[adk]'"
    ) from exc

try:  # ADK releases before the stale-session check have no such error
    from google.adk.errors._stale_session_error import StaleSessionError
except ImportError:  # pragma: no cover - older ADK

    class StaleSessionError(ValueError):  # type: ignore[no-redef]
        """Stands in for ADK's own where it has none."""


from ..aio import AsyncStore
from ..core import jsoncodec, validate
from ..core.sql import query
from ..core.steps import Op, Q, Tx, collect
from ..history.ops import append_turn, history, window_op
from ..history.ops import sessions as list_sessions_op
from ..lifecycle import purge as purge_ops
from ..models import Turn
from ..state import checkpoints as checkpoint_ops
from ..state import facts as fact_ops
from ..store import Store
from ._mapped import check_store, create_session_row_op, finish_despite_cancel
from .ids import FRAMEWORK_KEY, external_metadata, external_session_id

FRAMEWORK = "google-adk"
#: the subject of an app's ``app:`` state facts (user state uses the ADK user id itself)
APP_SUBJECT_PREFIX = "google-adk-app:"
_APP_KEY_PREFIX = "adk-app:"
_STATE_KEY = "state"  # the checkpoint's field holding the session-scoped state
_FIRST_WINDOW = 64  # turns read first when only after_timestamp bounds the events


class StaleAdkSession(SessionConflict, StaleSessionError):
    """The session object given to ``append_event`` is older than what is stored: another
    writer appended since it was read. Read it again with ``get_session``."""


class AdkSessionExists(SessionExists, AlreadyExistsError):
    """``create_session`` with an id the (app, user) already has."""


class AdkSessionNotFound(SessionNotFound, SessionNotFoundError):
    """``append_event`` on a session that does not exist (or was deleted)."""


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, not {type(value).__name__}")
    return validate.text(value, what, limit=validate.MAX_KEY_CHARS)


def _state_dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidInput(f"{what} must be a dict with string keys")
    return dict(value)


def _user_key(app_name: str, key: str) -> str:
    # length-prefixed: app names and keys may both hold ':'
    return f"adk:{len(app_name)}:{app_name}:{key}"


def _event_message(event: Event) -> dict[str, Any]:
    """The turn stored for ``event``: its JSON, with the role of its content on top."""
    try:
        body = event.model_dump(mode="json", exclude_none=True)
    except (ValueError, TypeError, RecursionError) as exc:  # pydantic's depth limit
        raise InvalidInput(f"the event cannot be stored as JSON: {exc}") from exc
    content = body.get("content")
    role = content.get("role") if isinstance(content, dict) else None
    if not isinstance(role, str) or not role:
        role = "user" if event.author == "user" else "model"
    return {"role": role, **body}


def event_from_turn(message: Mapping[str, Any]) -> Event:
    """The ADK ``Event`` a stored turn holds (its JSON without the added ``role``)."""
    body = {k: v for k, v in message.items() if k != "role"}
    return Event.model_validate(body)


def _timestamp(turn: Turn) -> float:
    stamp = turn.message.get("timestamp")
    return float(stamp) if isinstance(stamp, int | float) else turn.created_at.timestamp()


class ShardstoreSessionService(BaseSessionService):
    """ADK sessions, events and state in shardstore, for one tenant.

    ``store`` is a :class:`shardstore.AsyncStore` (awaited directly) or a
    :class:`shardstore.Store` (each call runs in a worker thread). An ADK session
    ``(app_name, user_id, session_id)`` is the shardstore session
    ``external_session_id("google-adk", tenant_id, json.dumps([app, user, id]))``
    (:meth:`shardstore_session_id`), created by ``create_session`` with subject
    ``user_id`` and agent ``app_name``.

    Guarantees: events come back exactly as ADK's ``Event`` they were (their JSON round
    trip), oldest first; ``get_session`` honours ``GetSessionConfig`` by reading only the
    newest turns (``num_recent_events`` exactly that many, as ADK's own services do: the
    window may open on a function response; ``store.tail`` keeps pairs whole), so its cost
    does not grow with the session; ``append_event`` is one statement for an event without
    state changes, and one transaction (event, session state, app and user state, all or
    nothing) for one with them, refused with :class:`StaleAdkSession` when the session
    object is older than the stored session; an event id seen before in the session is
    stored once. ``temp:`` state is applied to the session object and never stored.
    ``delete_session`` is ``store.purge_session`` (an erasure): the id cannot be used
    again (``SessionPurged``). Bad input raises ``InvalidInput`` and writes nothing.
    Another tenant's sessions are never reached: the tenant is part of every id.
    """

    def __init__(self, store: Store | AsyncStore, *, tenant_id: str) -> None:
        self.store = check_store(store, "ShardstoreSessionService")
        self.tenant_id = validate.text(tenant_id, "tenant_id")

    def shardstore_session_id(self, app_name: str, user_id: str, session_id: str) -> uuid.UUID:
        """The shardstore session holding this ADK session (for ``store.tail``,
        ``store.purge_session``, ``store.search``...)."""
        name = json.dumps(
            [
                _text(app_name, "app_name"),
                _text(user_id, "user_id"),
                _text(session_id, "session_id"),
            ],
            ensure_ascii=False,
        )
        return external_session_id(FRAMEWORK, self.tenant_id, name)

    # ------------------------------------------------------------ running

    async def _run(self, op: Op[Any]) -> Any:
        if isinstance(self.store, AsyncStore):
            return await self.store._run(op)
        return await _to_thread(self.store._run, op)

    # ------------------------------------------------------------ state

    def _scoped_state_op(
        self, app_name: str, user_id: str
    ) -> Op[tuple[dict[str, Any], dict[str, Any]]]:
        """The app's and the user's stored state (keys without their prefix)."""
        app_facts = yield from fact_ops.recall(
            self.store, self.tenant_id, APP_SUBJECT_PREFIX + app_name
        )
        user_facts = yield from fact_ops.recall(self.store, self.tenant_id, user_id)
        app = {
            f.key[len(_APP_KEY_PREFIX) :]: f.value
            for f in app_facts
            if f.key.startswith(_APP_KEY_PREFIX)
        }
        prefix = _user_key(app_name, "")
        user = {f.key[len(prefix) :]: f.value for f in user_facts if f.key.startswith(prefix)}
        return app, user

    def _remember_op(
        self, app_name: str, user_id: str, deltas: Mapping[str, Mapping[str, Any]]
    ) -> Op[None]:
        for key, value in deltas["app"].items():
            yield from fact_ops.remember(
                self.store,
                self.tenant_id,
                APP_SUBJECT_PREFIX + app_name,
                _APP_KEY_PREFIX + key,
                value,
                source=None,
            )
        for key, value in deltas["user"].items():
            yield from fact_ops.remember(
                self.store, self.tenant_id, user_id, _user_key(app_name, key), value, source=None
            )

    @staticmethod
    def _merged(
        app: Mapping[str, Any], user: Mapping[str, Any], session: Mapping[str, Any]
    ) -> dict[str, Any]:
        merged = dict(session)
        merged.update({State.APP_PREFIX + k: v for k, v in app.items()})
        merged.update({State.USER_PREFIX + k: v for k, v in user.items()})
        return merged

    @staticmethod
    def _deltas(state: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """ADK's split of a state dict into app, user and session parts (``temp:`` keys
        dropped), made JSON-safe as ADK's database service makes it, then checked as
        shardstore checks every stored value (before anything is written)."""
        try:
            deltas = _session_util.extract_json_safe_state_delta(dict(state))
        except (ValueError, TypeError, RecursionError) as exc:  # pydantic's depth limit
            raise InvalidInput(f"state cannot be stored as JSON: {exc}") from exc
        for scope, part in deltas.items():
            for key, value in part.items():
                _text(key, f"{scope} state key")
                jsoncodec.encode_json(value, f"{scope} state {key!r}")
        return deltas

    # ------------------------------------------------------------ the service

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (``AdkSessionExists`` if the id is taken, ``SessionPurged``
        if it was deleted). ``state``'s ``app:`` and ``user:`` keys update the shared
        state, the others are the session's own; all of it commits together."""
        ext = str(uuid.uuid4()) if session_id is None else _text(session_id, "session_id").strip()
        sid = self.shardstore_session_id(app_name, user_id, ext)
        deltas = self._deltas(_state_dict(state, "state"))
        metadata = {**external_metadata(FRAMEWORK, ext), "app_name": app_name, "user_id": user_id}
        meta_text = jsoncodec.encode_json(metadata, "metadata")

        def op() -> Op[Session]:
            yield Tx.BEGIN
            created = yield from create_session_row_op(
                sid,
                self.tenant_id,
                user_id,
                app_name,
                meta_text,
                purged=f"ADK session {ext!r} was deleted; its id cannot be used again",
            )
            if not created:
                raise AdkSessionExists(f"Session with id {ext} already exists.")
            if deltas["session"]:
                yield from checkpoint_ops.checkpoint(
                    self.store, sid, {_STATE_KEY: deltas["session"]}
                )
            yield from self._remember_op(app_name, user_id, deltas)
            app, user = yield from self._scoped_state_op(app_name, user_id)
            yield Tx.COMMIT
            session = Session(
                id=ext,
                app_name=app_name,
                user_id=user_id,
                state=self._merged(app, user, deltas["session"]),
                last_update_time=time.time(),
            )
            session._storage_update_marker = "0"
            return session

        result: Session = await finish_despite_cancel(self._run(op()))
        return result

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its events (all, or as ``config`` bounds them: the newest
        ``num_recent_events``, those with ``timestamp >= after_timestamp``) and its merged
        state; None when it does not exist or was deleted. One snapshot; with a bound, only
        the newest turns are read."""
        ext = _text(session_id, "session_id").strip()
        sid = self.shardstore_session_id(app_name, user_id, ext)
        if config is not None and not isinstance(config, GetSessionConfig):
            raise InvalidInput(f"config must be a GetSessionConfig, not {type(config).__name__}")
        recent = None if config is None else config.num_recent_events
        after = None if config is None else config.after_timestamp
        if recent is not None:
            recent = validate.count(recent, "num_recent_events", low=0)

        def op() -> Op[Session | None]:
            yield Tx.BEGIN_SNAPSHOT
            try:
                newest = yield from checkpoint_ops.checkpoints(self.store, sid, limit=1)
            except (SessionNotFound, SessionPurged):
                yield Tx.COMMIT
                return None
            turns = yield from self._events_op(sid, recent, after)
            head = turns if turns else (yield from window_op(sid, 1, None))
            app, user = yield from self._scoped_state_op(app_name, user_id)
            yield Tx.COMMIT
            own = newest[0].state.get(_STATE_KEY, {}) if newest else {}
            if recent == 0:
                turns = []
            session = Session(
                id=ext,
                app_name=app_name,
                user_id=user_id,
                state=self._merged(app, user, own),
                events=[event_from_turn(t.message) for t in turns],
                last_update_time=_timestamp(head[-1]) if head else 0.0,
            )
            session._storage_update_marker = str(head[-1].turn_seq + 1 if head else 0)
            return session

        result: Session | None = await self._run(op())
        return result

    def _events_op(self, sid: uuid.UUID, recent: int | None, after: float | None) -> Op[list[Turn]]:
        """The turns ``get_session`` returns, read from the newest end when bounded."""
        if recent is None and after is None:
            return (yield from collect(history(self.store, sid)))
        if recent is not None:
            turns = yield from window_op(sid, max(recent, 1), None)
            turns = turns[-recent:] if recent else []
        else:
            want = _FIRST_WINDOW
            while True:
                turns = yield from window_op(sid, want, None)
                if len(turns) < want or (turns and _timestamp(turns[0]) < float(after or 0)):
                    break
                want *= 4
        if after is not None:
            # as ADK's in-memory service: the events after the newest one older than `after`
            cut = len(turns)
            while cut > 0 and _timestamp(turns[cut - 1]) >= after:
                cut -= 1
            turns = turns[cut:]
        return turns

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (one user's, or every user's), without events, each with
        its merged state, oldest activity first (as ADK orders them)."""
        app = _text(app_name, "app_name")
        user = None if user_id is None else _text(user_id, "user_id")

        def op() -> Op[ListSessionsResponse]:
            yield Tx.BEGIN_SNAPSHOT
            infos = yield from list_sessions_op(
                self.store, tenant_id=self.tenant_id, subject_id=user, agent_id=app
            )
            found = []
            scoped: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
            for info in infos:
                meta = info.metadata
                if meta.get(FRAMEWORK_KEY) != FRAMEWORK or meta.get("app_name") != app:
                    continue
                owner = str(meta.get("user_id"))
                if owner not in scoped:
                    scoped[owner] = yield from self._scoped_state_op(app, owner)
                row = yield Q(
                    query("checkpoint_newest"), (info.session_id,), fetch="one", named=True
                )
                own = {} if row is None else jsoncodec.loads(row["state"]).get(_STATE_KEY, {})
                updated = info.last_turn_at or info.created_at
                found.append(
                    Session(
                        id=str(meta.get("external_id")),
                        app_name=app,
                        user_id=owner,
                        state=self._merged(*scoped[owner], own),
                        last_update_time=updated.timestamp(),
                    )
                )
            yield Tx.COMMIT
            found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
            return ListSessionsResponse(sessions=found)

        result: ListSessionsResponse = await self._run(op())
        return result

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Erase the session (``store.purge_session``: its events, checkpoints and every
        derived row); nothing happens for an unknown or already deleted one. Shared app
        and user state stay (``store.purge_subject(tenant, user_id)`` erases a user's)."""
        sid = self.shardstore_session_id(app_name, user_id, _text(session_id, "session_id").strip())

        def op() -> Op[None]:
            owners = yield Q(query("session_owners"), (sid,), fetch="one", named=True)
            if owners is None or owners["purged"]:
                return
            yield from purge_ops.purge_session(self.store, sid)

        await finish_despite_cancel(self._run(op()))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state in this app, keys without ``user:`` (one statement)."""
        app = _text(app_name, "app_name")
        user = _text(user_id, "user_id")

        def op() -> Op[dict[str, Any]]:
            facts = yield from fact_ops.recall(self.store, self.tenant_id, user)
            prefix = _user_key(app, "")
            return {f.key[len(prefix) :]: f.value for f in facts if f.key.startswith(prefix)}

        result: dict[str, Any] = await self._run(op())
        return result

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` as the session's next turn and apply it to ``session``.

        Partial (streaming) events are returned untouched, as ADK's services do. ``temp:``
        state is applied to ``session`` only. An event without state changes is one
        statement; one with them is one transaction that first checks ``session`` is not
        stale (:class:`StaleAdkSession`). ``AdkSessionNotFound`` for a session that does
        not exist (or was deleted). An event id the session already stored is not stored
        again, and ``session`` is left as it is."""
        if not isinstance(session, Session):
            raise InvalidInput(f"session must be an ADK Session, not {type(session).__name__}")
        if not isinstance(event, Event):
            raise InvalidInput(f"event must be an ADK Event, not {type(event).__name__}")
        if event.partial:
            return event
        sid = self.shardstore_session_id(session.app_name, session.user_id, session.id)
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        deltas = self._deltas(event.actions.state_delta if event.actions else {})
        message = _event_message(event)
        key = event.id if isinstance(event.id, str) and event.id else None
        if key is not None:
            key = validate.text(key, "event.id", limit=validate.MAX_KEY_CHARS)
        stateful = any(deltas.values())
        own = None
        if deltas["session"]:
            own = {
                k: v
                for k, v in session.state.items()
                if not k.startswith((State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX))
            }
            own = self._deltas({**own, **deltas["session"]})["session"]
        marker = session._storage_update_marker

        def op() -> Op[tuple[int, bool]]:
            try:
                if not stateful:
                    result = yield from append_turn(self.store, sid, message, key)
                    return result.turn_seq, result.duplicate
                yield Tx.BEGIN
                (stored,) = yield Q(query("adapter_lock_session"), (sid,), fetch="one")
                if marker is not None and marker != str(stored):
                    raise StaleAdkSession(
                        f"ADK session {session.id!r} changed since it was read "
                        f"({stored} events stored, the session object knew {marker}); get it again"
                    )
                checkpoint = None if own is None else {_STATE_KEY: own}
                result = yield from append_turn(
                    self.store, sid, message, key, checkpoint=checkpoint
                )
                if not result.duplicate:
                    yield from self._remember_op(session.app_name, session.user_id, deltas)
                yield Tx.COMMIT
                return result.turn_seq, result.duplicate
            except (SessionNotFound, SessionPurged) as exc:
                if isinstance(exc, AdkSessionNotFound):
                    raise
                raise AdkSessionNotFound(f"Session {session.id} not found.") from exc

        seq, duplicate = await finish_despite_cancel(self._run(op()))
        if duplicate:
            return event
        session._storage_update_marker = str(seq + 1)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)


async def _to_thread(fn: Any, *args: Any) -> Any:
    import asyncio

    return await asyncio.to_thread(fn, *args)
