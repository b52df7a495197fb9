"""A maintenance run: the pure plan (:mod:`partition_manager.plan`) applied step by step.

The run is a *program*: a generator that yields sans-IO operations (each run to completion on
the one connection that holds the maintenance lock) and :class:`ArchiveCall` requests (the
archive hook, run by the driver). The sync and asyncio drivers in
:mod:`shardstore.maintenance` send back each result, or throw a :class:`ShardstoreError` into
the program, which records it and goes on with the next step. Every step is one short
transaction (or, for ``DETACH ... CONCURRENTLY``, none) that waits at most ``lock_timeout``
for any lock, so a run never makes writers queue longer than that.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from shardstore.errors import ConfigurationError, DatabaseUnavailable, ShardstoreError
from shardstore.ops import Op, Q, StatementFailed, Tx, parse_bound
from shardstore.sql import query

from .plan import (
    MaintenancePlan,
    MaintenancePolicy,
    Partition,
    PartitionState,
    lower_from_name,
    partitions_ahead,
    plan_maintenance,
)

# Fixed forever: every maintenance run (Python or CALL shardstore.run_maintenance()) takes
# this session-level advisory lock; 0003_maintenance.sql has the same number.
MAINTENANCE_LOCK_KEY = 0x5348_4152_4453_0002
_LOCK_TIMEOUT_STATES = frozenset({"55P03"})
_PARTITION_NAME = re.compile(r"^agent_history_p\d{8}t\d{6}$")
EXPIRE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class ArchiveCall:
    """A request to the driver: pass this detached table (schema-qualified) to the archive
    hook. The driver sends back None on success, else the error text."""

    table: str


@dataclass(slots=True)
class RunState:
    """What the driver must undo on the run's connection when the run ends, however it ends
    (the program cannot: a failed step does not return control to it before the end)."""

    locked: bool = False
    saved_lock_timeout: str | None = None


def release_op(state: RunState) -> Op[None]:
    """Give back the maintenance lock and restore lock_timeout (idempotent)."""
    if state.saved_lock_timeout is not None:
        yield Q(query("maint_set_lock_timeout"), (state.saved_lock_timeout,), fetch="none")
        state.saved_lock_timeout = None
    if state.locked:
        yield Q(query("maint_unlock"), (MAINTENANCE_LOCK_KEY,), fetch="none")
        state.locked = False


# ---------------------------------------------------------------- report


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """A partition table after the run. ``rows`` is an estimate read without touching the
    table: ``pg_class.reltuples`` (kept current by autovacuum / ANALYZE), or for a table never
    analysed the statistics collector's live-row count. ``bytes`` is
    ``pg_total_relation_size`` (table, TOAST and indexes)."""

    name: str
    lower: datetime
    upper: datetime
    state: PartitionState
    rows: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "lower": self.lower.isoformat(),
            "upper": self.upper.isoformat(),
            "state": self.state.value,
            "rows": self.rows,
            "bytes": self.bytes,
        }


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    """What a maintenance run did and what it left. ``healthy`` is the run's verdict: the
    current partition and at least ``premake`` after it are attached and no step failed
    (a run that found another one running is not judged: ``already_running``)."""

    started_at: datetime
    seconds: float
    dry_run: bool
    already_running: bool
    premake: int
    retention: timedelta | None
    flush_idle: timedelta
    lock_timeout: timedelta
    partition_interval: timedelta
    plan: MaintenancePlan | None
    partitions_created: list[str] = field(default_factory=list)
    partitions_dropped: list[str] = field(default_factory=list)
    detaches_finished: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    sessions_folded: int = 0
    turns_folded: int = 0
    sessions_expired: int = 0
    buffered_turns_expired: int = 0
    partitions_ahead: int = 0
    current_attached: bool = False
    partitions: list[PartitionReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # dry run only: what the run would fold / expire
    sessions_to_fold: int | None = None
    sessions_to_expire: int | None = None
    buffered_turns_to_expire: int | None = None
    # embedding after the partition work (None: not attempted, no model configured)
    chunks_embedded: int | None = None
    embedding_skipped: str | None = None

    @property
    def healthy(self) -> bool:
        return self.current_attached and self.partitions_ahead >= self.premake and not self.errors

    @property
    def oldest_bound(self) -> datetime | None:
        """Lower bound of the oldest attached partition."""
        attached = [p.lower for p in self.partitions if p.state is PartitionState.ATTACHED]
        return min(attached) if attached else None

    @property
    def newest_bound(self) -> datetime | None:
        """Upper bound of the newest attached partition."""
        attached = [p.upper for p in self.partitions if p.state is PartitionState.ATTACHED]
        return max(attached) if attached else None

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON document (timestamps in ISO 8601, durations in seconds)."""

        def ts(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        plan = self.plan
        doc: dict[str, Any] = {
            "healthy": self.healthy,
            "already_running": self.already_running,
            "dry_run": self.dry_run,
            "started_at": ts(self.started_at),
            "seconds": round(self.seconds, 6),
            "premake": self.premake,
            "retention_seconds": None if self.retention is None else self.retention.total_seconds(),
            "flush_idle_seconds": self.flush_idle.total_seconds(),
            "lock_timeout_seconds": self.lock_timeout.total_seconds(),
            "partition_interval_seconds": self.partition_interval.total_seconds(),
            "partitions_created": self.partitions_created,
            "partitions_dropped": self.partitions_dropped,
            "detaches_finished": self.detaches_finished,
            "archived": self.archived,
            "sessions_folded": self.sessions_folded,
            "turns_folded": self.turns_folded,
            "sessions_expired": self.sessions_expired,
            "buffered_turns_expired": self.buffered_turns_expired,
            "chunks_embedded": self.chunks_embedded,
            "embedding_skipped": self.embedding_skipped,
            "partitions_ahead": self.partitions_ahead,
            "current_partition_attached": self.current_attached,
            "oldest_bound": ts(self.oldest_bound),
            "newest_bound": ts(self.newest_bound),
            "partitions": [p.to_json() for p in self.partitions],
            "errors": self.errors,
            "plan": None
            if plan is None
            else {
                "now": ts(plan.now),
                "create": [b.name for b in plan.create],
                "finish_detach": [p.name for p in plan.finalize],
                "expire": [p.name for p in plan.expire],
                "strays": [p.name for p in plan.strays],
                "fold_idle_before": ts(plan.fold_before),
                "retention_before": ts(plan.retention_before),
            },
        }
        if self.dry_run:
            doc["sessions_to_fold"] = self.sessions_to_fold
            doc["sessions_to_expire"] = self.sessions_to_expire
            doc["buffered_turns_to_expire"] = self.buffered_turns_to_expire
        return doc


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


def format_report(report: MaintenanceReport) -> str:
    """The report as aligned plain text (what ``shardstore maintain`` prints)."""
    if report.already_running:
        return "maintenance is already running (another run holds the lock); nothing done"
    rows: list[tuple[str, str]] = []
    plan = report.plan
    if report.dry_run and plan is not None:
        rows += [
            ("dry run", "nothing changed; this is what a run would do"),
            ("would create", _names([b.name for b in plan.create])),
            ("would finish detach", _names([p.name for p in plan.finalize])),
            ("would drop", _names([p.name for p in plan.expire])),
            ("would fold", f"{report.sessions_to_fold or 0} idle sessions"),
        ]
        if plan.retention_before is not None:
            rows.append(
                (
                    "would expire",
                    f"{report.sessions_to_expire or 0} sessions, "
                    f"{report.buffered_turns_to_expire or 0} buffered turns "
                    f"(older than {_when(plan.retention_before)})",
                )
            )
    else:
        rows += [
            ("created", _names(report.partitions_created)),
            ("dropped", _names(report.partitions_dropped)),
        ]
        if report.detaches_finished:
            rows.append(("finished detach", _names(report.detaches_finished)))
        if report.archived:
            rows.append(("archived", _names(report.archived)))
        rows.append(("folded", f"{report.sessions_folded} sessions ({report.turns_folded} turns)"))
        if report.chunks_embedded is not None:
            rows.append(("embedded", f"{report.chunks_embedded} chunks"))
        if report.embedding_skipped is not None:
            rows.append(("embedding skipped", report.embedding_skipped))
        if report.retention is not None:
            rows.append(
                (
                    "expired",
                    f"{report.sessions_expired} sessions, "
                    f"{report.buffered_turns_expired} buffered turns",
                )
            )
    rows += [
        (
            "partitions ahead",
            f"{report.partitions_ahead} (want {report.premake})"
            + ("" if report.current_attached else "; the CURRENT partition is missing"),
        ),
        ("oldest bound", _when(report.oldest_bound)),
        ("newest bound", _when(report.newest_bound)),
        ("took", f"{report.seconds:.3f} s"),
        ("status", "healthy" if report.healthy else "UNHEALTHY"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    for error in report.errors:
        lines.append(f"error: {error}")
    if report.partitions:
        lines.append("")
        header = ("partition", "from (UTC)", "to (UTC)", "state", "rows", "size")
        table = [
            (
                p.name,
                p.lower.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                p.upper.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                p.state.value,
                f"{p.rows:,}",
                _size(p.bytes),
            )
            for p in report.partitions
        ]
        widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
        for r in [header, *table]:
            cells = [c.rjust(widths[i]) if i >= 4 else c.ljust(widths[i]) for i, c in enumerate(r)]
            lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# ---------------------------------------------------------------- steps


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The partitions as found, with the server's clock and the partitioning."""

    now: datetime
    interval: timedelta
    origin: datetime
    partitions: list[PartitionReport]

    def planning_input(self) -> list[Partition]:
        return [Partition(p.name, p.lower, p.upper, p.state) for p in self.partitions]


def snapshot_op(lock_timeout: timedelta) -> Op[Snapshot]:
    """Read the clock, the partitioning and every partition table (attached, detach
    pending, standalone) with sizes and row estimates, in one transaction that waits at most
    ``lock_timeout`` for a lock (reading a table's size takes a light lock on it)."""
    yield Tx.BEGIN
    yield Q(query("maint_set_local_lock_timeout"), (_ms(lock_timeout),), fetch="none")
    row = yield Q(query("maint_now"), fetch="one")
    if row is None:
        raise ConfigurationError(
            "shardstore is not initialised: connect with shardstore.connect() or run "
            "'shardstore init'"
        )
    now, seconds, origin = row
    interval = timedelta(seconds=seconds)
    found: list[PartitionReport] = []
    attached = yield Q(query("maint_partitions"))
    for name, bound, pending, size, tuples in attached:
        lower, upper = parse_bound(bound)
        state = PartitionState.DETACH_PENDING if pending else PartitionState.ATTACHED
        found.append(PartitionReport(name, lower, upper, state, int(tuples), int(size)))
    standalone = yield Q(query("maint_standalone"))
    for name, size, tuples in standalone:
        start = lower_from_name(name)
        if start is None:  # pragma: no cover - the query filters by the same pattern
            continue
        state = PartitionState.RETIRED if name[14] == "r" else PartitionState.DETACHED
        found.append(PartitionReport(name, start, start + interval, state, int(tuples), int(size)))
    yield Tx.COMMIT
    found.sort(key=lambda p: (p.lower, p.name))
    return Snapshot(now, interval, origin, found)


def _ms(wait: timedelta) -> str:
    return f"{max(1, round(wait.total_seconds() * 1000))}ms"


def _checked(name: str) -> str:
    """A partition table name safe to put between double quotes."""
    if not re.fullmatch(r"agent_history_[pr]\d{8}t\d{6}", name):
        raise ValueError(f"not a partition table name: {name!r}")
    return name


def attach_op(lower: datetime, upper: datetime, lock_timeout: timedelta, attempts: int) -> Op[bool]:
    """Create the standalone table (with its indexes and bounds CHECK) and attach it, each
    ATTACH attempt waiting at most ``lock_timeout``, with exponential backoff between
    attempts (server-side sleep, so that both executors share it). True when attached."""
    for attempt in range(attempts):
        (ok,) = yield Q(
            query("maint_attach"), (lower, upper, lock_timeout.total_seconds()), fetch="one"
        )
        if ok:
            return True
        if attempt + 1 < attempts:
            yield Q("SELECT pg_sleep(%s)", (min(2.0, 0.05 * 2**attempt),), fetch="none")
    return False


def detach_op(name: str, lock_timeout: timedelta, state: RunState) -> Op[str]:
    """``DETACH PARTITION ... CONCURRENTLY`` (outside any transaction) with a session-level
    lock_timeout, restored afterwards. Returns "detached", "pending" (the wait for older
    snapshots timed out: the detach is half done) or "timeout" (nothing done)."""
    (previous,) = yield Q(query("maint_get_lock_timeout"), fetch="one")
    state.saved_lock_timeout = previous
    yield Q(query("maint_set_lock_timeout"), (_ms(lock_timeout),), fetch="none")
    outcome = yield Q(
        "ALTER TABLE shardstore.agent_history DETACH PARTITION "
        f'shardstore."{_checked(name)}" CONCURRENTLY',
        fetch="none",
        prepare=False,
        recover=_LOCK_TIMEOUT_STATES,
    )
    yield Q(query("maint_set_lock_timeout"), (previous,), fetch="none")
    state.saved_lock_timeout = None
    if not isinstance(outcome, StatementFailed):
        return "detached"
    pending = yield Q(query("maint_detach_pending"), (name,), fetch="one")
    return "pending" if pending is not None and pending[0] else "timeout"


def counts_op(plan: MaintenancePlan) -> Op[tuple[int, int, int]]:
    """Dry run: sessions to fold, sessions and buffered turns to expire."""
    rows = yield Q(query("maint_fold_candidates"), (plan.fold_before,))
    if plan.retention_before is None:
        return len(rows), 0, 0
    sessions, turns = yield Q(
        query("maint_count_expiring"), (plan.retention_before, plan.retention_before), fetch="one"
    )
    return len(rows), int(sessions), int(turns)


# ---------------------------------------------------------------- the program

Program = Generator["Op[Any] | ArchiveCall", Any, MaintenanceReport]


def maintenance_program(
    policy: MaintenancePolicy,
    *,
    lock_timeout: timedelta,
    state: RunState,
    dry_run: bool = False,
    archive: bool = False,
    attach_attempts: int = 6,
) -> Program:
    """One maintenance run (see the module docstring for how it is driven).

    Guarantees:
    - runs never overlap: without the advisory lock the run does nothing and reports
      ``already_running`` (a dry run takes no lock and changes nothing);
    - every lock wait is bounded by ``lock_timeout`` (ATTACH is retried with backoff, up to
      ``attach_attempts`` times; a detach or drop that times out is retried by the next run);
    - an expired partition is dropped only after it is detached, renamed out of the writers'
      way and, when ``archive`` is set, archived successfully; a detach interrupted by a
      crash (``detach pending``) is finished first;
    - a failed step is recorded in ``errors`` and the run goes on (the connection breaking
      ends it with :class:`DatabaseUnavailable`).
    """
    started = datetime.now(UTC)
    clock = time.monotonic()
    if not dry_run:
        (got,) = yield _one_row(Q(query("maint_try_lock"), (MAINTENANCE_LOCK_KEY,), fetch="one"))
        if not got:
            snap = yield snapshot_op(lock_timeout)
            return _report(snap, policy, lock_timeout, None, started, clock, already_running=True)
        state.locked = True
    snap = yield snapshot_op(lock_timeout)
    plan = plan_maintenance(snap.planning_input(), policy, snap.now, snap.interval, snap.origin)
    if dry_run:
        fold, sessions, turns = yield counts_op(plan)
        report = _report(snap, policy, lock_timeout, plan, started, clock, dry_run=True)
        return _replace(
            report,
            sessions_to_fold=fold,
            sessions_to_expire=sessions,
            buffered_turns_to_expire=turns,
        )

    errors: list[str] = []
    created: list[str] = []
    dropped: list[str] = []
    finished: list[str] = []
    archived: list[str] = []

    def failed(what: str, exc: ShardstoreError) -> None:
        if isinstance(exc, DatabaseUnavailable):
            raise exc
        errors.append(f"{what}: {exc}")

    # 1. finish interrupted detaches (of partitions that are not expiring; those below)
    for part in plan.finalize:
        try:
            ok = yield _one_q(query("maint_finalize"), (part.name, lock_timeout.total_seconds()))
            if ok:
                finished.append(part.name)
            else:
                errors.append(f"finishing the detach of {part.name} timed out; next run retries")
        except ShardstoreError as exc:
            failed(f"finishing the detach of {part.name}", exc)

    # 2. premake
    for bounds in plan.create:
        try:
            ok = yield attach_op(bounds.lower, bounds.upper, lock_timeout, attach_attempts)
            if ok:
                created.append(bounds.name)
            else:
                errors.append(
                    f"attaching {bounds.name} timed out {attach_attempts} times "
                    f"(lock_timeout {lock_timeout.total_seconds()} s); next run retries"
                )
        except ShardstoreError as exc:
            failed(f"creating {bounds.name}", exc)

    # 3. fold idle sessions' buffers
    sessions_folded = turns_folded = 0
    try:
        candidates = yield _all_q(query("maint_fold_candidates"), (plan.fold_before,))
    except ShardstoreError as exc:
        failed("listing idle sessions", exc)
        candidates = []
    for (sid,) in candidates:
        try:
            moved = yield _one_q(
                query("maint_fold_session"),
                (sid, plan.fold_before, lock_timeout.total_seconds()),
            )
        except ShardstoreError as exc:
            if exc.retryable and not isinstance(exc, DatabaseUnavailable):
                continue  # busy (lock timeout): next run
            failed(f"folding session {sid}", exc)
            continue
        if moved:
            sessions_folded += 1
            turns_folded += int(moved)

    # 4. retention
    sessions_expired = turns_expired = 0
    if plan.retention_before is not None:
        while True:
            try:
                row = yield _one_row(
                    Q(
                        query("maint_expire_rows"),
                        (plan.retention_before, EXPIRE_BATCH),
                        fetch="one",
                    )
                )
            except ShardstoreError as exc:
                failed("expiring rows", exc)
                break
            sessions_expired += int(row[0])
            turns_expired += int(row[1])
            if not row[0] and not row[1]:
                break
        for part in plan.expire:
            name = part.name
            was_pending = part.state is PartitionState.DETACH_PENDING
            try:
                pending = was_pending
                if part.state is PartitionState.ATTACHED:
                    outcome = yield detach_op(name, lock_timeout, state)
                    if outcome == "timeout":
                        errors.append(
                            f"detaching {name} timed out (lock_timeout "
                            f"{lock_timeout.total_seconds()} s); next run retries"
                        )
                        continue
                    pending = outcome == "pending"
                if pending:
                    ok = yield _one_q(query("maint_finalize"), (name, lock_timeout.total_seconds()))
                    if not ok:
                        errors.append(f"finishing the detach of {name} timed out; next run retries")
                        continue
                    if was_pending:
                        finished.append(name)
                retired = yield _one_q(query("maint_retire"), (name, lock_timeout.total_seconds()))
                if archive:
                    error = yield ArchiveCall(f"shardstore.{retired}")
                    if error is not None:
                        errors.append(
                            f"archiving shardstore.{retired} failed ({error}); it is kept, "
                            "detached, and the next run tries again"
                        )
                        continue
                    archived.append(f"shardstore.{retired}")
                yield _one_q(query("maint_drop_retired"), (retired, lock_timeout.total_seconds()))
                dropped.append("agent_history_p" + retired[len("agent_history_p") :])
            except ShardstoreError as exc:
                failed(f"expiring {name}", exc)

    after = yield snapshot_op(lock_timeout)
    # judge "partitions ahead" at the instant the plan was made for: with short intervals a
    # run may cross a boundary, which would count one partition fewer through no fault
    after = dataclasses.replace(after, now=snap.now)
    report = _report(after, policy, lock_timeout, plan, started, clock)
    report = _replace(
        report,
        partitions_created=created,
        partitions_dropped=dropped,
        detaches_finished=finished,
        archived=archived,
        sessions_folded=sessions_folded,
        turns_folded=turns_folded,
        sessions_expired=sessions_expired,
        buffered_turns_expired=turns_expired,
        errors=errors,
    )
    try:
        yield _one_q(
            query("maint_log_run"),
            (started, report.healthy, json.dumps(report.to_json())),
        )
    except ShardstoreError as exc:
        failed("logging the run", exc)
        report = _replace(report, errors=errors)
    return report


def _one_row(q: Q) -> Op[Any]:
    row = yield q
    return row


def _one_q(sql: str, params: Sequence[Any]) -> Op[Any]:
    row = yield Q(sql, params, fetch="one")
    return row[0]


def _all_q(sql: str, params: Sequence[Any]) -> Op[list[Any]]:
    rows = yield Q(sql, params)
    return list(rows)


def _report(
    snap: Snapshot,
    policy: MaintenancePolicy,
    lock_timeout: timedelta,
    plan: MaintenancePlan | None,
    started: datetime,
    clock: float,
    *,
    dry_run: bool = False,
    already_running: bool = False,
) -> MaintenanceReport:
    parts = snap.planning_input()
    current_lower = (snap.now - snap.origin) // snap.interval * snap.interval + snap.origin
    current = any(p.lower == current_lower and p.state is PartitionState.ATTACHED for p in parts)
    return MaintenanceReport(
        started_at=started,
        seconds=time.monotonic() - clock,
        dry_run=dry_run,
        already_running=already_running,
        premake=policy.premake,
        retention=policy.retention,
        flush_idle=policy.flush_idle,
        lock_timeout=lock_timeout,
        partition_interval=snap.interval,
        plan=plan,
        partitions_ahead=partitions_ahead(parts, snap.now, snap.interval, snap.origin),
        current_attached=current,
        partitions=snap.partitions,
    )


def _replace(report: MaintenanceReport, **changes: Any) -> MaintenanceReport:
    import dataclasses

    return dataclasses.replace(report, **changes)
