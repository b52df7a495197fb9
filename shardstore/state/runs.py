"""Runs: a small shadow record of each agent run in flight, beside its session's history.

A run belongs to a live session. It is ``running`` when opened, ``awaiting_human`` while it
waits for an approval (what it waits for and since when are on the row), and ends ``done``
or ``failed``; a closed run never changes again. "What is waiting on a human?" is one
indexed query: ``runs(status="awaiting_human", tenant_id=t)``.

The table (``shardstore.runs``; docs/runs.md, "How it works") is a registered session table:
purges and retention remove a session's runs with it, and Row-Level Security scopes them to
the connection's tenant. Every write is one call of a SQL function (``run_open_v1`` /
``run_update_v1``) that takes the session's purge guard, so a run is never written into a
purged session.

Each public function below whose first parameter is ``store`` is a store method, bound once
into :class:`shardstore.Store` and once into :class:`shardstore.AsyncStore`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core import jsoncodec, validate
from ..core.rows import record
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q
from ..errors import InvalidInput, RunClosed, RunConflict, RunNotFound

RUNNING = "running"
AWAITING_HUMAN = "awaiting_human"
DONE = "done"
FAILED = "failed"
STATUSES = (RUNNING, AWAITING_HUMAN, DONE, FAILED)
CLOSED_STATUSES = (DONE, FAILED)

MAX_THREAD_KEY_CHARS = validate.MAX_KEY_CHARS
MAX_ERROR_CHARS = 65_536
MAX_STEPS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Run:
    """A run as stored. ``awaiting``: what it waits for (the dict given to
    :func:`mark_awaiting`) while ``status`` is ``awaiting_human``, else None;
    ``awaiting_since``: when it started waiting. ``steps`` and ``usd_cost``: the sums of
    what :func:`record_step` recorded. ``error``: the failure text of a failed run.
    ``closed_at``: when it was closed (done or failed), else None."""

    run_id: uuid.UUID
    session_id: uuid.UUID
    tenant_id: str
    framework: str
    thread_key: str
    status: str
    awaiting: dict[str, Any] | None
    awaiting_since: datetime | None
    steps: int
    usd_cost: float
    error: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None

    @property
    def closed(self) -> bool:
        """Whether the run is done or failed (it can no longer change)."""
        return self.status in CLOSED_STATUSES


def _run(row: Mapping[str, Any]) -> Run:
    awaiting = row["awaiting"]
    return record(
        Run,
        row,
        awaiting=None if awaiting is None else jsoncodec.loads(awaiting),
        metadata=jsoncodec.loads(row["metadata"]),
    )


def _named(name: str, params: Any, fetch: Any = "one", prepare: bool | None = None) -> Q:
    return Q(query(name), params, fetch=fetch, named=True, prepare=prepare)


def _update_op(run_id: uuid.UUID, action: str, *params: Any) -> Op[Run]:
    row = yield _named("run_update", (run_id, action, *params))
    outcome = row["outcome"]
    if outcome == "not_found":
        raise RunNotFound(f"run {run_id} does not exist")
    if outcome == "closed":
        raise RunClosed(f"run {run_id} is closed ({row['status']}); it cannot change any more")
    return _run(row)


def open_run(
    store: StoreState,
    session_id: uuid.UUID | str,
    *,
    framework: str,
    thread_key: str,
    run_id: uuid.UUID | str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Op[Run]:
    """Open a run of ``framework`` (e.g. ``"langgraph"``) in a live session, status
    ``running``. ``thread_key`` is the framework's resume handle (a thread id). With
    ``run_id`` given the call is idempotent: opening the same id again in the same session
    with the same framework and thread_key returns the run as it is now; with anything
    else it raises ``RunConflict``. ``metadata``: a JSON-ready dict stored with the run.
    ``SessionNotFound`` / ``SessionPurged`` for a session that is unknown / purged."""
    sid = validate.session_id(session_id)
    fw = validate.text(framework, "framework")
    thread = validate.text(thread_key, "thread_key", limit=MAX_THREAD_KEY_CHARS)
    rid = uuid.uuid4() if run_id is None else validate.uuid_value(run_id, "run_id")
    meta = validate.json_object({} if metadata is None else metadata, "metadata")
    row = yield _named("run_open", (rid, sid, fw, thread, meta))
    if row["outcome"] == "conflict":
        raise RunConflict(
            f"run {rid} already exists in session {row['session_id']} with framework "
            f"{row['framework']!r:.80} and thread_key {row['thread_key']!r:.80}"
        )
    return _run(row)


def mark_awaiting(store: StoreState, run_id: uuid.UUID | str, awaiting: dict[str, Any]) -> Op[Run]:
    """Mark a run as waiting on a human: status ``awaiting_human``, ``awaiting`` the dict
    given (what approval it waits for, JSON-ready), ``awaiting_since`` now (marking a
    waiting run again replaces both). ``RunNotFound`` for an unknown run, ``RunClosed``
    for a closed one."""
    rid = validate.uuid_value(run_id, "run_id")
    text = validate.json_object(awaiting, "awaiting")
    return (yield from _update_op(rid, "await", text, None, None, None, None))


def resume_run(store: StoreState, run_id: uuid.UUID | str) -> Op[Run]:
    """Put a waiting run back to ``running`` (``awaiting`` and ``awaiting_since`` are
    cleared); a running run is returned unchanged, so a repeated call is harmless.
    ``RunNotFound`` for an unknown run, ``RunClosed`` for a closed one."""
    rid = validate.uuid_value(run_id, "run_id")
    return (yield from _update_op(rid, "resume", None, None, None, None, None))


def record_step(
    store: StoreState, run_id: uuid.UUID | str, *, steps: int = 1, usd_cost: float | None = None
) -> Op[Run]:
    """Add ``steps`` (an int >= 0, default 1) to a run's step count and ``usd_cost`` (a
    finite number >= 0, default nothing) to its cost, in one atomic update; returns the run
    with the new sums. A repeated call counts again. ``RunNotFound`` for an unknown run,
    ``RunClosed`` for a closed one."""
    rid = validate.uuid_value(run_id, "run_id")
    n = validate.count(steps, "steps", low=0, high=MAX_STEPS)
    cost = 0.0 if usd_cost is None else validate.amount(usd_cost, "usd_cost")
    return (yield from _update_op(rid, "step", None, n, cost, None, None))


def close_run(
    store: StoreState, run_id: uuid.UUID | str, status: str, *, error: str | None = None
) -> Op[Run]:
    """Close a run as ``"done"`` or ``"failed"`` (``error``: the failure text, for
    ``"failed"`` only); ``closed_at`` is now and the run never changes again. Closing a
    closed run raises ``RunClosed``; an unknown run ``RunNotFound``; another status
    ``InvalidInput``."""
    rid = validate.uuid_value(run_id, "run_id")
    final = validate.choice(status, "status", CLOSED_STATUSES)
    message = validate.optional_text(error, "error", limit=MAX_ERROR_CHARS)
    if message is not None and final != FAILED:
        raise InvalidInput("error is only recorded for a failed run (status='failed')")
    return (yield from _update_op(rid, "close", None, None, None, final, message))


def get_run(store: StoreState, run_id: uuid.UUID | str) -> Op[Run]:
    """The run with this id; ``RunNotFound`` if there is none (or it belongs to another
    tenant)."""
    rid = validate.uuid_value(run_id, "run_id")
    row = yield _named("run_get", (rid,))
    if row is None:
        raise RunNotFound(f"run {rid} does not exist")
    return _run(row)


def runs(
    store: StoreState,
    *,
    tenant_id: str | None = None,
    session_id: uuid.UUID | str | None = None,
    status: str | None = None,
    framework: str | None = None,
    limit: int | None = None,
) -> Op[list[Run]]:
    """Runs matching every filter given: runs waiting on a human first, the longest wait
    first, then the others newest first; at most ``limit``. ``runs(tenant_id=t,
    status="awaiting_human")`` is one range scan of an index. ``status``: ``running``,
    ``awaiting_human``, ``done`` or ``failed``."""
    tenant = validate.optional_text(tenant_id, "tenant_id")
    sid = validate.optional_session_id(session_id)
    wanted = None if status is None else validate.choice(status, "status", STATUSES)
    fw = validate.optional_text(framework, "framework")
    lim = validate.optional_count(limit, "limit")
    params = {
        "tenant": tenant,
        "session": sid,
        "status": wanted,
        "framework": fw,
        "limit": lim,
    }
    if tenant is not None and wanted == AWAITING_HUMAN:
        rows = yield _named("run_list_awaiting", params, fetch="all")
    else:
        rows = yield _named("run_list", params, fetch="all", prepare=False)
    return [_run(r) for r in rows]
