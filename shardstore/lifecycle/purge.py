"""GDPR purge: remove a session, a data subject, a tenant, a session's oldest turns, or
everything older than a point in time, from every shardstore table.

Guarantees (docs/purge.md explains them at length):

* **Atomic per session.** Each session is purged by one SQL function call
  (``purge_session_v2`` / ``purge_range_v2`` / ``purge_expired_v1``, around
  ``purge_session_data`` / ``purge_range_data``); a batch of sessions is one transaction. A
  crash or an error leaves every session either untouched or fully purged, and running the
  same purge again finishes the job (the plan is recomputed from what is left: purged
  sessions are tombstoned, range-purged ones no longer have older turns).
* **Complete.** A purge clears the write buffer, the chunks (by exact partition key; the
  chunk holding a range cut is rewritten without the purged turns), chunk locations,
  idempotency keys, detached partitions waiting for archive, and every table registered in
  ``shardstore.purge_targets`` (later tables register there). It is safe against
  concurrent appends (they wait or get ``SessionPurged``) and background folds (docs/purge.md,
  "Guarantees").
* **Tombstone.** A purged session keeps its sessions row with ``purged_at`` set, its
  ``tenant_id``, ``created_at`` and turn count; ``subject_id``, ``agent_id`` and
  ``metadata`` are cleared. Appending, reading or re-creating it raises ``SessionPurged``.
* **Dry run.** ``dry_run=True`` does the same work and rolls it back, so its report is
  exactly what a real purge would remove at that moment.
* **Old row versions.** Deleted rows stay on disk as dead tuples until VACUUM; ``vacuum=True``
  vacuums every table and partition the purge touched. Backups and WAL archives are outside
  shardstore's reach.

The planning and the batching are operations (:mod:`shardstore.core.steps`); the public
functions taking ``store`` first are the store methods, bound into ``Store`` and
``AsyncStore`` alike.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..artifacts import sweep as artifact_sweep
from ..artifacts.config import config_of
from ..core import validate
from ..core.rerun import retrying
from ..core.rows import json_fields
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q, Tx
from ..encryption.shred import shred_session_op, shred_subject_op, shred_tenant_op
from ..errors import Conflict, InvalidInput, SessionPurged
from ..history.ops import parse_bound

AGENT_HISTORY = "shardstore.agent_history"
ARTIFACTS = "shardstore.artifacts"
SESSIONS = "shardstore.sessions"
_PARTITION_PREFIX = "shardstore.agent_history_"
_ZERO_UUID = uuid.UUID(int=0)

DEFAULT_BATCH_SIZE = 100
# a purge that meets a deadlock or a lock timeout continues from where it stopped
_RETRIES = 5
# how long purge_before waits for a partition's lock before deleting its rows one by one
TRUNCATE_LOCK_TIMEOUT_S = 2.0

ProgressHook = Callable[[int, int], None]
"""Called after each committed batch with (sessions done so far, sessions planned)."""


# ---------------------------------------------------------------- report


@dataclass(frozen=True, slots=True)
class TableRemoval:
    """What a purge removed from one table.

    ``rows``: rows deleted. ``rewritten``: rows changed in place (the chunk holding a
    range cut, a chunk location moved to the cut, a session row turned into a tombstone).
    ``bytes``: ``pg_column_size`` of the deleted rows (their values as stored, TOAST
    compressed, without indexes or tuple headers) plus the bytes rewritten rows lost; for
    a partition emptied by TRUNCATE, its size on disk (table, TOAST and indexes)."""

    rows: int = 0
    rewritten: int = 0
    bytes: int = 0

    def __add__(self, other: TableRemoval) -> TableRemoval:
        return TableRemoval(
            self.rows + other.rows, self.rewritten + other.rewritten, self.bytes + other.bytes
        )

    def to_dict(self) -> dict[str, int]:
        """A JSON-ready form."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """The result of a purge (or of its dry run).

    ``tables`` has an entry for every table the purge clears (every registered table, with
    zeros where nothing was found, and ``shardstore.sessions`` for tombstones);
    ``shardstore.agent_history`` sums its partitions, which ``partitions`` lists one by one
    (detached partitions too). ``session_ids``: the sessions in which something was removed
    or that were tombstoned. ``cut_turn_seq``: for ``purge_range``, the first turn kept.
    ``seconds``: wall time of the whole purge, retries included."""

    kind: str
    dry_run: bool
    tables: dict[str, TableRemoval]
    partitions: dict[str, TableRemoval] = field(default_factory=dict)
    partitions_truncated: tuple[str, ...] = ()
    session_ids: tuple[uuid.UUID, ...] = ()
    tombstoned: int = 0
    cut_turn_seq: int | None = None
    vacuumed: tuple[str, ...] = ()
    batches: int = 0
    seconds: float = 0.0
    shredded_keys: tuple[str, ...] = ()

    @property
    def sessions_affected(self) -> int:
        """The number of sessions purged (or, in a dry run, that would be)."""
        return len(self.session_ids)

    @property
    def rows(self) -> int:
        """Rows deleted, all tables together."""
        return sum(t.rows for t in self.tables.values())

    @property
    def bytes(self) -> int:
        """Bytes removed, all tables together (see :class:`TableRemoval`)."""
        return sum(t.bytes for t in self.tables.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (the CLI's ``--json`` output)."""
        return json_fields(
            self,
            tables={name: t.to_dict() for name, t in self.tables.items()},
            partitions={name: t.to_dict() for name, t in self.partitions.items()},
            partitions_truncated=list(self.partitions_truncated),
            session_ids=[str(s) for s in self.session_ids],
            vacuumed=list(self.vacuumed),
            sessions_affected=self.sessions_affected,
            rows=self.rows,
            bytes=self.bytes,
        )


@dataclass
class _Acc:
    """What a purge has done so far. Lives outside the operation so that a retry after a
    deadlock continues the same report (only committed batches are merged into it)."""

    kind: str
    dry_run: bool
    started: float = field(default_factory=time.monotonic)
    targets: list[str] = field(default_factory=list)
    tables: dict[str, TableRemoval] = field(default_factory=dict)
    partitions: dict[str, TableRemoval] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)
    sessions: dict[uuid.UUID, None] = field(default_factory=dict)  # ordered set
    tombstoned: int = 0
    cut: int | None = None
    vacuumed: list[str] = field(default_factory=list)
    batches: int = 0

    def reset(self) -> None:
        """Forget everything (a dry run that must start over: nothing was committed)."""
        fresh = _Acc(self.kind, self.dry_run, self.started)
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def add(self, table: str, removal: TableRemoval) -> None:
        if table.startswith(_PARTITION_PREFIX):
            self.partitions[table] = self.partitions.get(table, TableRemoval()) + removal
            table = AGENT_HISTORY
        self.tables[table] = self.tables.get(table, TableRemoval()) + removal

    def merge(self, session_id: uuid.UUID, doc: dict[str, Any]) -> None:
        """Add one session's result (the JSON a purge_session_v2, purge_range_v2 or
        purge_expired_v1 call returned)."""
        touched = False
        for table, (rows, rewritten, size) in (doc.get("tables") or {}).items():
            self.add(table, TableRemoval(int(rows), int(rewritten), int(size)))
            touched = touched or bool(rows or rewritten)
        if doc.get("tombstoned"):
            self.tombstoned += 1
            touched = True
        if touched:
            self.sessions[session_id] = None

    def report(self) -> PurgeReport:
        tables = {name: TableRemoval() for name in self.targets}
        if self.kind in ("session", "subject", "tenant"):
            tables.setdefault(SESSIONS, TableRemoval())
        for name, removal in self.tables.items():
            tables[name] = tables.get(name, TableRemoval()) + removal
        return PurgeReport(
            kind=self.kind,
            dry_run=self.dry_run,
            tables=tables,
            partitions=dict(sorted(self.partitions.items())),
            partitions_truncated=tuple(dict.fromkeys(self.truncated)),
            session_ids=tuple(self.sessions),
            tombstoned=self.tombstoned,
            cut_turn_seq=self.cut,
            vacuumed=tuple(self.vacuumed),
            batches=self.batches,
            seconds=time.monotonic() - self.started,
        )


# ---------------------------------------------------------------- planning (pure)


def droppable_partitions(
    partitions: Sequence[tuple[str, datetime, datetime]], before: datetime, now: datetime
) -> list[str]:
    """Partitions whose whole range lies before ``before`` and in the past: every chunk in
    them was written before ``before`` (a chunk never spans partitions), so they can be
    emptied whole instead of row by row."""
    limit = min(before, now)
    return [name for name, _lower, upper in partitions if upper <= limit]


def vacuum_targets(acc: _Acc) -> list[str]:
    """Tables and partitions where a purge left dead row versions."""
    names = [
        name for name, t in acc.tables.items() if name != AGENT_HISTORY and (t.rows or t.rewritten)
    ]
    names += [
        name
        for name, t in acc.partitions.items()
        if (t.rows or t.rewritten) and name not in acc.truncated
    ]
    return sorted(set(names))


# ---------------------------------------------------------------- operations (sans-IO)


def _targets_op(acc: _Acc) -> Op[None]:
    if not acc.targets:
        rows = yield Q(query("purge_targets"))
        acc.targets = [r[0] for r in rows]


def _vacuum_op(acc: _Acc, vacuum: bool) -> Op[None]:
    if not vacuum or acc.dry_run:
        return
    for name in vacuum_targets(acc):
        if name in acc.vacuumed:
            continue
        # VACUUM cannot run in a transaction block: pool connections are autocommit
        yield Q(f"VACUUM {name}", fetch="none", prepare=False)
        acc.vacuumed.append(name)


def purge_session_op(acc: _Acc, session_id: uuid.UUID, vacuum: bool) -> Op[PurgeReport]:
    """Purge one session (one statement, atomic) and leave its tombstone."""
    yield from _targets_op(acc)
    (doc,) = yield Q(query("purge_session"), (session_id, acc.dry_run), fetch="one")
    acc.merge(session_id, doc)
    acc.batches += 1
    yield from _vacuum_op(acc, vacuum)
    return acc.report()


def purge_range_op(
    acc: _Acc,
    session_id: uuid.UUID,
    before_seq: int | None,
    before: datetime | None,
    vacuum: bool,
) -> Op[PurgeReport]:
    """Purge a session's turns before a turn_seq or a time (one statement, atomic)."""
    yield from _targets_op(acc)
    (doc,) = yield Q(
        query("purge_range"), (session_id, before_seq, before, acc.dry_run), fetch="one"
    )
    if doc.get("purged"):
        raise SessionPurged(f"session {session_id} was purged")
    acc.merge(session_id, doc)
    acc.cut = doc.get("cut")
    acc.batches += 1
    yield from _vacuum_op(acc, vacuum)
    return acc.report()


def purge_sessions_op(
    acc: _Acc,
    count_sql: str,
    list_sql: str,
    selector: tuple[Any, ...],
    batch_size: int,
    vacuum: bool,
    progress: ProgressHook | None,
    finish: Callable[[_Acc], Op[None]] | None = None,
) -> Op[PurgeReport]:
    """Purge every live session that ``list_sql`` selects, ``batch_size`` sessions per
    transaction, in session id order. A real run repeats its pass until nothing is left
    (sessions created meanwhile are caught); a dry run makes one pass. ``finish`` runs
    after the sessions are done (rows not tied to a session: a subject's facts)."""
    yield from _targets_op(acc)
    (total,) = yield Q(count_sql, selector, fetch="one")
    total = int(total)
    done = 0
    batch_sql = query("purge_session_batch")
    for _round in range(1 if acc.dry_run else 10):
        before_pass = done
        done = yield from _pass_op(
            acc,
            list_sql,
            selector,
            batch_size,
            batch_sql,
            lambda ids: (acc.dry_run, ids),
            progress,
            total,
            done,
        )
        if done == before_pass:
            break
    if finish is not None:
        yield from finish(acc)
    yield from _vacuum_op(acc, vacuum)
    return acc.report()


def _pass_op(
    acc: _Acc,
    list_sql: str,
    selector: tuple[Any, ...],
    batch_size: int,
    batch_sql: str,
    batch_params: Callable[[list[uuid.UUID]], tuple[Any, ...]],
    progress: ProgressHook | None,
    total: int,
    done: int = 0,
) -> Op[int]:
    """One pass over the sessions ``list_sql`` selects (``selector``, then the id to start
    after and ``batch_size``), in session id order: each batch purged by ``batch_sql`` in
    a transaction of its own (a crash keeps the batches before it), its results merged
    into ``acc``, ``progress`` told ``(done, total)``. Returns ``done`` plus the sessions
    this pass purged."""
    after = _ZERO_UUID
    while True:
        rows = yield Q(list_sql, (*selector, after, batch_size))
        if not rows:
            return done
        ids = [r[0] for r in rows]
        after = ids[-1]
        yield Tx.BEGIN
        results = yield Q(batch_sql, batch_params(ids))
        yield Tx.COMMIT
        for sid, doc in results:
            acc.merge(sid, doc)
        acc.batches += 1
        done += len(ids)
        if progress is not None:
            yield Call(progress, (done, max(total, done)))


def subject_facts_op(acc: _Acc, tenant_id: str, subject_id: str) -> Op[None]:
    """The subject's facts, also those with no source turn: one statement
    (``facts_purge_subject_v1``) after the subject's sessions are purged (which removed the
    facts sourced in them). A dry run counts them and removes nothing."""
    (doc,) = yield Q(
        query("facts_purge_subject"), (tenant_id, subject_id, acc.dry_run), fetch="one"
    )
    for table, (rows, rewritten, size) in (doc.get("tables") or {}).items():
        acc.add(table, TableRemoval(int(rows), int(rewritten), int(size)))


def tenant_facts_op(acc: _Acc, tenant_id: str) -> Op[None]:
    """Every fact of the tenant, also those with no source turn or whose subject has no
    session: one statement after the tenant's sessions are purged. A dry run counts them
    and removes nothing."""
    rows, size = yield Q(
        query("facts_purge_tenant"), {"tenant": tenant_id, "dry_run": acc.dry_run}, fetch="one"
    )
    acc.add("shardstore.facts", TableRemoval(int(rows), 0, int(size)))


def purge_before_op(
    acc: _Acc,
    before: datetime,
    tenant_id: str | None,
    batch_size: int,
    vacuum: bool,
    truncate: bool,
    progress: ProgressHook | None,
) -> Op[PurgeReport]:
    """Retention by time: remove every turn written before ``before`` (of one tenant's
    sessions, with ``tenant_id``).

    1. Partitions wholly before ``before`` are emptied with TRUNCATE (only those holding
       nothing but this tenant's chunks, with ``tenant_id``); a partition whose lock is not
       granted within a moment is left to step 2.
    2. Every session with older turns gets a range purge at its first turn written at or
       after ``before`` (buffer, chunk locations, keys, registered rows, the rest of the
       chunks, the chunk holding the cut rewritten), ``batch_size`` sessions per transaction.
    The data goes first: a crash between the steps leaves only chunk locations to clean,
    and running the purge again completes it."""
    yield from _targets_op(acc)
    (now,) = yield Q(query("purge_now"), fetch="one")
    skip: list[str] = []
    if truncate:
        rows = yield Q(query("purge_partitions"))
        parts = [(name, *parse_bound(bound)) for name, bound in rows]
        for name in droppable_partitions(parts, before, now):
            (doc,) = yield Q(
                query("purge_truncate_partition"),
                (name, before, tenant_id, acc.dry_run, TRUNCATE_LOCK_TIMEOUT_S),
                fetch="one",
            )
            if doc["truncated"]:
                acc.truncated.append(f"shardstore.{name}")
                acc.add(f"shardstore.{name}", TableRemoval(int(doc["rows"]), 0, int(doc["bytes"])))
                skip.append(f"shardstore.{name}")
    (total,) = yield Q(query("purge_before_count"), (before, tenant_id), fetch="one")
    yield from _pass_op(
        acc,
        query("purge_before_sessions"),
        (before, tenant_id),
        batch_size,
        query("purge_range_batch"),
        lambda ids: (before, acc.dry_run, skip if acc.dry_run else None, ids),
        progress,
        int(total),
    )
    yield from _vacuum_op(acc, vacuum)
    return acc.report()


# ---------------------------------------------------------------- progress


class _Bar:
    """A tqdm progress bar on stderr, fed by a ProgressHook."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.what, unit="session", file=sys.stderr)
        self.bar.total = total
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _hook(
    progress: bool | ProgressHook | None, what: str
) -> tuple[ProgressHook | None, _Bar | None]:
    if progress is True:
        bar = _Bar(what)
        return bar, bar
    if progress is None or progress is False:
        return None, None
    if not callable(progress):
        raise InvalidInput("progress must be True, False or a callable(done, total)")
    return progress, None


# ---------------------------------------------------------------- artifacts


def _releasing_op(
    store: StoreState,
    dry_run: bool,
    tenant: str | None,
    purge: Op[PurgeReport],
    session: uuid.UUID | None = None,
) -> Op[PurgeReport]:
    """Run a purge that keeps its sessions (``purge_range``, ``purge_before``), then delete
    at once (every backend, no grace period) the artifacts it left without a live
    reference; ``shardstore.artifacts`` in the report counts them (rows: artifacts, bytes:
    their size). A dry run removes no reference, so it reports 0 there.

    Which artifacts it marks released: with ``session`` (purge_range), those
    the session referenced (read before the purge; each marked after it unless a live
    reference is left), so the cost does not grow with the tenant's artifacts; else
    ``tenant``'s (neither: every tenant's), settled before the purge and marked after it
    (``artifact_sweep.purge_clock_op``, ``release_op``). Either way, an artifact that lost
    its last live reference before the purge keeps its grace."""
    held: list[uuid.UUID] | None = None
    if not dry_run and session is not None:
        row = yield Q(query("artifact_session_tenant"), (session,), fetch="one")
        if row is None:  # unknown session: the purge raises, nothing to release
            return (yield from purge)
        tenant = row[0]
        held = [r[0] for r in (yield Q(query("artifact_session_refs"), (tenant, session)))]
    if dry_run or held == []:  # no reference removed, or none of the session's to release
        report = yield from purge
        released = TableRemoval()
    else:
        if held is None:
            since = yield from artifact_sweep.purge_clock_op(tenant)
        else:
            since = yield from artifact_sweep.clock_op()
        report = yield from purge
        done = yield from artifact_sweep.release_op(store, since, tenant, held)
        released = TableRemoval(done.deleted, 0, done.bytes_deleted)
    return dataclasses.replace(report, tables={**report.tables, ARTIFACTS: released})


def _erasing_op(
    store: StoreState,
    dry_run: bool,
    tenant: str | None,
    purge: Op[PurgeReport],
    session: uuid.UUID | None = None,
    whole_tenant: bool = False,
) -> Op[PurgeReport]:
    """Run a purge of whole sessions (of ``session``, or of ``tenant``'s subject or of the
    whole ``tenant``), then erase before returning, in every backend, whatever it queued:
    each artifact any purged session ever referenced (also one whose references went
    before the purge: a rewind, an unref, checkpoint pruning) that no live reference of
    another session, nor one naming no session, still needs; with ``whole_tenant`` every
    artifact of the tenant, the references naming no session deleted first. The queue is
    written in the transactions that delete the sessions' rows, so a purge killed at any
    point is finished by its re-run (or the next sweep). ``shardstore.artifacts`` in the
    report counts what was erased (rows: artifacts, bytes: their size); a dry run erases
    nothing and reports 0 there."""
    if dry_run:
        report = yield from purge
        return dataclasses.replace(report, tables={**report.tables, ARTIFACTS: TableRemoval()})
    if session is not None:
        row = yield Q(query("artifact_session_tenant"), (session,), fetch="one")
        if row is None:  # unknown (or another tenant's) session: the purge raises
            return (yield from purge)
        tenant = str(row[0])
    report = yield from purge
    assert tenant is not None
    if whole_tenant:
        yield Q(query("artifact_erase_tenant"), (tenant,), fetch="one")
    done = yield from artifact_sweep.erase_op(config_of(store), tenant)
    erased = TableRemoval(done.deleted, 0, done.bytes)
    return dataclasses.replace(report, tables={**report.tables, ARTIFACTS: erased})


# ---------------------------------------------------------------- store methods


def _range_args(before_turn_seq: Any, before: Any) -> tuple[int | None, datetime | None]:
    if (before_turn_seq is None) == (before is None):
        raise InvalidInput("give exactly one of before_turn_seq and before")
    seq = None if before_turn_seq is None else validate.position(before_turn_seq, "before_turn_seq")
    return seq, validate.optional_instant(before, "before")


def _flags(**flags: Any) -> None:
    for name, value in flags.items():
        validate.flag(value, name)


def _purge_op(acc: _Acc, make: Callable[[], Op[PurgeReport]]) -> Op[PurgeReport]:
    """A deadlock or lock timeout makes the purge continue where it stopped (a dry run,
    which committed nothing, starts over), up to a few times."""
    return (
        yield from retrying(
            make,
            retry_on=lambda exc: isinstance(exc, Conflict),
            attempts=_RETRIES,
            deadline=float("inf"),
            first_delay=0.05,
            max_delay=0.05 * 2 ** (_RETRIES - 2),
            before_retry=acc.reset if acc.dry_run else None,
        )
    )


def _batched_op(
    acc: _Acc, progress: Any, what: str, make: Callable[[ProgressHook | None], Op[PurgeReport]]
) -> Op[PurgeReport]:
    hook, bar = _hook(progress, what)
    try:
        return (yield from _purge_op(acc, lambda: make(hook)))
    finally:
        if bar is not None:
            bar.close()


def purge_session(
    store: StoreState,
    session_id: uuid.UUID | str,
    *,
    dry_run: bool = False,
    vacuum: bool = False,
    shred: bool = False,
) -> Op[PurgeReport]:
    """Remove every trace of one session's conversation and leave a tombstone (later
    appends, reads and ``create_session`` with its id raise ``SessionPurged``).
    Atomic and idempotent; ``SessionNotFound`` if the id was never used.

    Every purge returns a :class:`PurgeReport`. ``dry_run=True`` removes nothing and reports
    what would go. ``vacuum=True`` vacuums the tables and partitions touched (needs an
    autocommit connection, which the store's pool provides). A deadlock or lock timeout
    makes the purge continue where it stopped (up to a few times); any other error leaves
    every session either untouched or fully purged, and repeating the call completes it.

    Artifacts: before it returns, erases in every backend each artifact the session ever
    referenced (also one whose references went before the purge) that no live reference
    of another session, nor one naming no session, still needs; ``report.tables
    ["shardstore.artifacts"]`` counts them. A purge killed before it erased them leaves
    them queued: repeating the call (or the next sweep) erases them.

    ``shred=True`` (a store connected with ``encryption=``), for a session without a
    subject: first every version of the session's own data key is destroyed in the key
    store, durably, before any row is deleted, with the guarantees of
    :meth:`purge_subject`'s ``shred`` (``report.shredded_keys``). A session with a subject
    is sealed under its subject's key, which other sessions share: ``InvalidInput`` (shred
    with ``purge_subject``, or purge without ``shred``), nothing purged."""
    sid = validate.session_id(session_id)
    acc = _Acc("session", dry_run)
    _flags(dry_run=dry_run, vacuum=vacuum, shred=shred)
    shredded: tuple[str, ...] = ()
    if shred:
        shredded = yield from shred_session_op(store, sid, dry_run)
    purge = _purge_op(acc, lambda: purge_session_op(acc, sid, vacuum))
    report = yield from _erasing_op(store, dry_run, None, purge, sid)
    return dataclasses.replace(report, shredded_keys=shredded)


def _sessions_op(
    kind: str,
    selector: tuple[str, ...],
    dry_run: bool,
    vacuum: bool,
    batch_size: Any,
    progress: Any,
    finish: Callable[[_Acc], Op[None]] | None = None,
) -> Op[PurgeReport]:
    size = validate.count(batch_size, "batch_size")
    acc = _Acc(kind, dry_run)
    _flags(dry_run=dry_run, vacuum=vacuum)
    count_sql, list_sql = query(f"purge_{kind}_count"), query(f"purge_{kind}_sessions")
    return (
        yield from _batched_op(
            acc,
            progress,
            f"purge {kind}",
            lambda hook: purge_sessions_op(
                acc, count_sql, list_sql, selector, size, vacuum, hook, finish
            ),
        )
    )


def purge_subject(
    store: StoreState,
    tenant_id: str,
    subject_id: str,
    *,
    dry_run: bool = False,
    vacuum: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | ProgressHook = False,
    shred: bool = False,
) -> Op[PurgeReport]:
    """Purge every session of one data subject of a tenant, ``batch_size`` sessions per
    transaction (``progress=True`` shows a bar on stderr; a callable gets
    ``(done, total)`` after each batch). Each session is purged atomically; after a
    crash, call again to finish (also the artifacts' bytes). The subject's facts go too,
    also those with no source turn (``remember(..., source=None)``), and, as for
    :meth:`purge_session`, every artifact its sessions ever referenced that no live
    reference of another subject's session (or naming no session) still needs.

    ``shred=True`` (a store connected with ``encryption=``): first the subject's data key
    is destroyed in the key store (durably, before the rows are deleted), so that every
    copy of the database taken before, backups and WAL archives included, holds only
    ciphertext nobody can open any more, even with the key-encryption key
    (``report.shredded_keys`` names it). A crash after the shred leaves rows that read as
    ``KeyShredded``; calling again purges them. Refused (``AccessDenied``) from a store
    bound to another tenant or by its role; ``ConfigurationError`` without encryption."""
    tenant, subject = validate.text(tenant_id, "tenant_id"), validate.text(subject_id, "subject_id")
    shredding = shred_subject_op(store, tenant, subject, dry_run)
    purge = _sessions_op(
        "subject",
        (tenant, subject),
        dry_run,
        vacuum,
        batch_size,
        progress,
        lambda acc: subject_facts_op(acc, tenant, subject),
    )
    return (yield from _shred_then_purge_op(store, tenant, shred, shredding, purge, dry_run))


def _shred_then_purge_op(
    store: StoreState,
    tenant: str,
    shred: Any,
    shredding: Op[tuple[str, ...]],
    purge: Op[PurgeReport],
    dry_run: bool,
    whole_tenant: bool = False,
) -> Op[PurgeReport]:
    """A subject's or a tenant's purge: with ``shred``, its data keys first (``shredding``,
    durably, before any row goes), then ``purge`` and the erasure of what it queued
    (:func:`_erasing_op`); the report names the shredded keys."""
    shredded: tuple[str, ...] = ()
    if validate.flag(shred, "shred"):
        shredded = yield from shredding
    report = yield from _erasing_op(store, dry_run, tenant, purge, whole_tenant=whole_tenant)
    return dataclasses.replace(report, shredded_keys=shredded)


def purge_tenant(
    store: StoreState,
    tenant_id: str,
    *,
    dry_run: bool = False,
    vacuum: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | ProgressHook = False,
    shred: bool = False,
) -> Op[PurgeReport]:
    """Purge every session of a tenant (batched and resumable like
    :meth:`purge_subject`). The tombstones keep the tenant id. Every fact of the tenant
    goes too, also those with no source turn, and every artifact of the tenant (the
    references naming no session with them), erased before it returns.

    ``shred=True`` (a store connected with ``encryption=``): first every data key of the
    tenant in the key store (its subjects', its subject-less sessions' and its own, every
    version) is destroyed, durably, before any row is deleted, with the guarantees of
    :meth:`purge_subject`'s ``shred`` (``report.shredded_keys`` names them). The key store
    is searched by the scope each key file records, so keys of subjects the database no
    longer names go too."""
    tenant = validate.text(tenant_id, "tenant_id")
    shredding = shred_tenant_op(store, tenant, dry_run)
    purge = _sessions_op(
        "tenant",
        (tenant,),
        dry_run,
        vacuum,
        batch_size,
        progress,
        lambda acc: tenant_facts_op(acc, tenant),
    )
    return (
        yield from _shred_then_purge_op(
            store, tenant, shred, shredding, purge, dry_run, whole_tenant=True
        )
    )


def purge_range(
    store: StoreState,
    session_id: uuid.UUID | str,
    before_turn_seq: int | None = None,
    before: datetime | None = None,
    *,
    dry_run: bool = False,
    vacuum: bool = False,
) -> Op[PurgeReport]:
    """Purge a session's oldest turns: those with ``turn_seq < before_turn_seq``, or
    those written before ``before`` (give exactly one). Atomic; the session stays live:
    ``history()`` then starts at the cut (``report.cut_turn_seq``), ``tail()`` and
    appends work as before. The chunk holding the cut is rewritten without the purged
    turns. Idempotency keys of purged turns are forgotten (a late retry of one is stored
    as a new turn). ``SessionPurged`` for a purged session."""
    sid = validate.session_id(session_id)
    seq, at = _range_args(before_turn_seq, before)
    acc = _Acc("range", dry_run)
    _flags(dry_run=dry_run, vacuum=vacuum)
    purge = _purge_op(acc, lambda: purge_range_op(acc, sid, seq, at, vacuum))
    return (yield from _releasing_op(store, dry_run, None, purge, sid))


def purge_before(
    store: StoreState,
    timestamp: datetime,
    tenant_id: str | None = None,
    *,
    dry_run: bool = False,
    vacuum: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | ProgressHook = False,
    truncate_partitions: bool = True,
) -> Op[PurgeReport]:
    """Retention: remove every turn written before ``timestamp`` (of ``tenant_id``'s
    sessions only, when given). Partitions wholly older are emptied at once (TRUNCATE;
    ``truncate_partitions=False`` deletes row by row instead); the rest is range-purged
    session by session, batched and resumable. Sessions stay live."""
    at = validate.instant(timestamp, "timestamp")
    tenant = validate.optional_text(tenant_id, "tenant_id")
    size = validate.count(batch_size, "batch_size")
    acc = _Acc("before", dry_run)
    _flags(dry_run=dry_run, vacuum=vacuum, truncate_partitions=truncate_partitions)
    purge = _batched_op(
        acc,
        progress,
        "purge before",
        lambda hook: purge_before_op(acc, at, tenant, size, vacuum, truncate_partitions, hook),
    )
    return (yield from _releasing_op(store, dry_run, tenant, purge))
