"""A maintenance run: the pure plan (:mod:`partition_manager.plan`) applied step by step, as
one sans-IO operation (:mod:`partition_manager.steps`) that the one driver
(:mod:`partition_manager.driver`) runs on one connection, sync or asyncio.

:func:`maintenance_op` takes a session-level advisory lock (runs never overlap; the lock is
given back however the run ends), reads the partitions, plans, finishes interrupted
detaches, premakes (standalone table + bounds CHECK + ATTACH, each attempt waiting at most
``lock_timeout``, with backoff between attempts), runs the caller's own work
(:class:`RunHooks`), then applies retention: DETACH (CONCURRENTLY where it can), rename out
of the way, the archive hook, DROP. A failed step is recorded in the report's ``errors`` and
the run goes on; a lost connection ends it (the lock dies with the connection).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors

from .archive import ArchiveHook, describe_failure
from .plan import (
    MaintenancePlan,
    MaintenancePolicy,
    Partition,
    PartitionBounds,
    PartitionState,
    bounds_for,
    partitions_ahead,
    plan_maintenance,
)
from .steps import Call, Op, Q, Sleep, Try, Tx
from .table import (
    FoundPartition,
    Layout,
    Listing,
    PartitionSQL,
    cleanup,
    local_lock_timeout_op,
    restore_lock_timeout_op,
)

PartitionReport = FoundPartition
"""A partition table as the report shows it."""

DEFAULT_ATTEMPTS = 6


def backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (0-based): 50 ms doubling, at most
    2 s."""
    return float(min(2.0, 0.05 * 2**attempt))


def connection_lost(exc: BaseException) -> bool:
    """The default test for an error that must end a run: the connection is gone (a psycopg
    operational or interface error that is not a lock or statement timeout). With another
    driver translator, pass ``fatal=`` to :func:`maintenance_op`."""
    if not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    if isinstance(exc, pgerrors.LockNotAvailable | pgerrors.QueryCanceled):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(("08", "57P"))


def lock_key_for(table: PartitionSQL) -> int:
    """A stable advisory lock key (signed 64-bit) for runs on ``table``'s partitions."""
    digest = hashlib.blake2b(
        f"partition_manager:{table.schema}.{table.naming.base}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


def try_lock_op(key: int) -> Op[bool]:
    """``pg_try_advisory_lock(key)``: True when this connection now holds the lock."""
    (got,) = yield Q("SELECT pg_try_advisory_lock(%s)", (key,), fetch="one")
    return bool(got)


def unlock_op(key: int) -> Op[None]:
    """``pg_advisory_unlock(key)``."""
    yield Q("SELECT pg_advisory_unlock(%s)", (key,), fetch="none")


@dataclass(frozen=True, slots=True)
class RunLock:
    """How a run keeps other runs out: ``take`` (an operation sending back whether it got
    the lock, at once, without waiting) and ``give_back``. The default is a session-level
    advisory lock on the run's own connection (:func:`try_lock_op`); behind a
    transaction-mode pooler, whose server connection changes between transactions, a
    caller passes one held elsewhere (a transaction kept open on a connection of its own)."""

    take: Callable[[], Op[bool]]
    give_back: Callable[[], Op[None]]


# ---------------------------------------------------------------- report


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    """What a maintenance run did and what it left. ``healthy`` is the run's verdict: the
    current partition and at least ``premake`` after it are attached and no step failed
    (a run that found another one running is not judged: ``already_running``).

    Applications add their own fields by subclassing (keep defaults on them) and overriding
    :meth:`to_json` and :meth:`detail_rows`."""

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
    partitions_ahead: int = 0
    current_attached: bool = False
    partitions: list[PartitionReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """The current partition and ``premake`` after it are attached; no step failed."""
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

    def detail_rows(self) -> list[tuple[str, str]]:
        """Rows a subclass adds to :func:`format_report` after the partition actions."""
        return []

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON document (timestamps in ISO 8601, durations in seconds)."""
        plan = self.plan
        return {
            "healthy": self.healthy,
            "already_running": self.already_running,
            "dry_run": self.dry_run,
            "started_at": _ts(self.started_at),
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
            "partitions_ahead": self.partitions_ahead,
            "current_partition_attached": self.current_attached,
            "oldest_bound": _ts(self.oldest_bound),
            "newest_bound": _ts(self.newest_bound),
            "partitions": [p.to_json() for p in self.partitions],
            "errors": self.errors,
            "plan": None
            if plan is None
            else {
                "now": _ts(plan.now),
                "create": [b.name for b in plan.create],
                "finish_detach": [p.name for p in plan.finalize],
                "expire": [p.name for p in plan.expire],
                "strays": [p.name for p in plan.strays],
                "fold_idle_before": _ts(plan.fold_before),
                "retention_before": _ts(plan.retention_before),
            },
        }


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


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
    """The report as aligned plain text: the actions (or, for a dry run, the plan), the
    report's :meth:`~MaintenanceReport.detail_rows`, the health, then every partition."""
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
        ]
    else:
        rows += [
            ("created", _names(report.partitions_created)),
            ("dropped", _names(report.partitions_dropped)),
        ]
        if report.detaches_finished:
            rows.append(("finished detach", _names(report.detaches_finished)))
        if report.archived:
            rows.append(("archived", _names(report.archived)))
    rows += report.detail_rows()
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


# ---------------------------------------------------------------- snapshot


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The partitions as found, with the server's clock and the partitioning."""

    layout: Layout
    listing: Listing

    @property
    def partitions(self) -> list[FoundPartition]:
        """Every partition table found."""
        return self.listing.partitions

    def planning_input(self) -> list[Partition]:
        """The partitions as the planner takes them."""
        return [Partition(p.name, p.lower, p.upper, p.state) for p in self.partitions]


def snapshot_op(table: PartitionSQL, lock_timeout: timedelta) -> Op[Snapshot]:
    """Read the clock, the partitioning and every partition table (attached, detach
    pending, standalone) with sizes and row estimates, in one transaction that waits at most
    ``lock_timeout`` for a lock (reading a table's size takes a light lock on it)."""
    yield Tx.BEGIN
    previous = yield from local_lock_timeout_op(lock_timeout)
    layout = yield from table.layout_op()
    listing = yield from table.list_op(layout)
    yield from restore_lock_timeout_op(previous, local=True)
    yield Tx.COMMIT
    return Snapshot(layout, listing)


# ---------------------------------------------------------------- steps


@dataclass(slots=True)
class RunLog:
    """What a run did so far (the steps append to it)."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


T = TypeVar("T")

Fatal = Callable[[BaseException], bool]


def _failed(log: RunLog, what: str, exc: Exception, fatal: Fatal) -> None:
    if fatal(exc):
        raise exc
    log.errors.append(f"{what}: {exc}")


def _retried_op(
    attempt_op: Callable[[], Op[T]], succeeded: Callable[[T], bool], attempts: int
) -> Op[T | None]:
    """Up to ``attempts`` tries of ``attempt_op()`` (each nested in a ``Try``), sleeping
    :func:`backoff` between them (a ``Sleep`` step: nothing waits on the server), until one
    ``succeeded``. Returns the last try's outcome (None when ``attempts`` < 1)."""
    outcome: T | None = None
    for attempt in range(attempts):
        if attempt:
            yield Sleep(backoff(attempt - 1))
        outcome = yield Try(attempt_op())
        if succeeded(outcome):
            break
    return outcome


def gave_up_message(
    action: str, attempts: int, lock_timeout: timedelta, *, next_run_retries: bool = False
) -> str:
    """How a lock wait that ran out on every try is told: what was being done, how often,
    and (``next_run_retries``) that the next run tries again."""
    then = "; next run retries" if next_run_retries else ""
    return (
        f"{action} timed out {attempts} times (lock_timeout {lock_timeout.total_seconds()} s)"
        + then
    )


def attach_with_retries_op(
    table: PartitionSQL, bounds: PartitionBounds, lock_timeout: timedelta, attempts: int
) -> Op[bool]:
    """Up to ``attempts`` tries of :meth:`PartitionSQL.attach_op` (:func:`_retried_op`).
    True when attached."""
    ok = yield from _retried_op(lambda: table.attach_op(bounds, lock_timeout), bool, attempts)
    return bool(ok)


def _each_partition_op(
    step: Op[bool],
    name: str,
    done: list[str],
    what: str,
    timed_out: str,
    log: RunLog,
    fatal: Fatal,
) -> Op[None]:
    """One partition's ``step`` in a run over many: ``name`` goes to ``done`` when it
    succeeded, ``timed_out`` to the errors when it gave up waiting for a lock, and an
    exception is recorded as ``what`` failing (or raised when ``fatal``), so that the next
    partition still runs."""
    try:
        ok = yield from step
    except Exception as exc:
        _failed(log, what, exc, fatal)
        return
    if ok:
        done.append(name)
    else:
        log.errors.append(timed_out)


def _finalize_op(table: PartitionSQL, name: str, lock_timeout: timedelta) -> Op[bool]:
    ok: bool = yield Try(table.finalize_op(name, lock_timeout))
    return ok


def _finalize_timed_out(name: str) -> str:
    return f"finishing the detach of {name} timed out; next run retries"


def finish_detaches_op(
    table: PartitionSQL, plan: MaintenancePlan, lock_timeout: timedelta, log: RunLog, fatal: Fatal
) -> Op[None]:
    """Finish the interrupted detaches of partitions that are not expiring (those that are
    expiring are finished by :func:`expire_op`)."""
    for part in plan.finalize:
        yield from _each_partition_op(
            _finalize_op(table, part.name, lock_timeout),
            part.name,
            log.finished,
            f"finishing the detach of {part.name}",
            _finalize_timed_out(part.name),
            log,
            fatal,
        )


def premake_plan_op(
    table: PartitionSQL,
    plan: MaintenancePlan,
    lock_timeout: timedelta,
    attempts: int,
    log: RunLog,
    fatal: Fatal,
) -> Op[None]:
    """Create and attach every range of ``plan.create``."""
    for bounds in plan.create:
        yield from _each_partition_op(
            attach_with_retries_op(table, bounds, lock_timeout, attempts),
            bounds.name,
            log.created,
            f"creating {bounds.name}",
            gave_up_message(
                f"attaching {bounds.name}", attempts, lock_timeout, next_run_retries=True
            ),
            log,
            fatal,
        )


def expire_op(
    table: PartitionSQL,
    plan: MaintenancePlan,
    lock_timeout: timedelta,
    log: RunLog,
    fatal: Fatal,
    *,
    archive: ArchiveHook | None,
    concurrently: bool,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Op[None]:
    """Take each partition of ``plan.expire`` from its state to gone: detach (up to
    ``attempts`` tries with backoff), finish the detach, retire, archive, drop. A partition
    is dropped only after all of that succeeded; whatever fails is recorded and left for
    the next run."""
    for part in plan.expire:
        try:
            yield from _expire_one(table, part, lock_timeout, log, archive, concurrently, attempts)
        except Exception as exc:
            _failed(log, f"expiring {part.name}", exc, fatal)


def _expire_one(
    table: PartitionSQL,
    part: Partition,
    lock_timeout: timedelta,
    log: RunLog,
    archive: ArchiveHook | None,
    concurrently: bool,
    attempts: int,
) -> Op[None]:
    name = part.name
    pending = part.state is PartitionState.DETACH_PENDING
    if part.state is PartitionState.ATTACHED:
        outcome = yield from _retried_op(
            lambda: table.detach_op(name, lock_timeout, concurrently),
            lambda outcome: outcome != "timeout",
            attempts,
        )
        if outcome in (None, "timeout"):
            log.errors.append(
                gave_up_message(f"detaching {name}", attempts, lock_timeout, next_run_retries=True)
            )
            return
        pending = outcome == "pending"
    if pending:
        if not (yield from _finalize_op(table, name, lock_timeout)):
            log.errors.append(_finalize_timed_out(name))
            return
        if part.state is PartitionState.DETACH_PENDING:
            log.finished.append(name)
    retired = yield Try(table.retire_op(name, lock_timeout))
    qualified = table.qualified(retired)
    if archive is not None:
        try:
            yield Call(archive, (qualified,))
        except Exception as exc:
            log.errors.append(
                f"archiving {qualified} failed ({describe_failure(exc)}); it is kept, "
                "detached, and the next run tries again"
            )
            return
        log.archived.append(qualified)
    yield Try(table.drop_op(retired, lock_timeout))
    log.dropped.append(table.naming.partition(part.lower))


# ---------------------------------------------------------------- the run


class RunHooks:
    """The caller's own work in a run; every method returns an operation. The defaults do
    nothing. Hooks run on the run's connection; an exception they raise ends the run (the
    lock is still given back): record what may fail in ``log.errors`` instead."""

    def work(self, plan: MaintenancePlan, log: RunLog) -> Op[None]:
        """Runs after premake, before partitions expire, holding the lock (live runs)."""
        return
        yield  # pragma: no cover - makes this a generator

    def dry_run(self, plan: MaintenancePlan) -> Op[None]:
        """Runs instead of :meth:`work` in a dry run (count, change nothing)."""
        return
        yield  # pragma: no cover

    def finish(self, report: MaintenanceReport) -> Op[MaintenanceReport]:
        """Gets every run's report last (a live run's while it still holds the lock) and
        returns the report to give the caller (e.g. a subclass with more fields)."""
        return report
        yield  # pragma: no cover


def maintenance_op(
    table: PartitionSQL,
    policy: MaintenancePolicy,
    *,
    lock_timeout: timedelta = timedelta(seconds=1),
    dry_run: bool = False,
    archive: ArchiveHook | None = None,
    lock_key: int | None = None,
    lock: RunLock | None = None,
    detach_concurrently: bool = True,
    attempts: int = DEFAULT_ATTEMPTS,
    hooks: RunHooks | None = None,
    fatal: Fatal = connection_lost,
) -> Op[MaintenanceReport]:
    """One maintenance run of ``table``'s partitions (see the module docstring).

    Guarantees:
    - runs never overlap: without the advisory lock (``lock_key``, default
      :func:`lock_key_for`; or ``lock``, see :class:`RunLock`) the run does nothing and
      reports ``already_running``; a dry run takes no lock and changes nothing (its hooks'
      ``dry_run`` aside);
    - the lock is given back however the run ends (a failure to give it back, e.g. on a
      lost connection, never hides the error that ended the run);
    - every lock wait is bounded by ``lock_timeout``; ATTACH and DETACH are retried up to
      ``attempts`` times with :func:`backoff` (``Sleep`` steps);
    - expired partitions are detached with ``DETACH ... CONCURRENTLY`` when the connection
      is outside a transaction, the parent has no DEFAULT partition and
      ``detach_concurrently`` allows it, else with a plain ``DETACH`` (ACCESS EXCLUSIVE on
      the parent for a moment, and inside a caller's transaction until it ends). Behind a
      transaction-mode pooler pass ``detach_concurrently=False``: the session-level
      ``lock_timeout`` that bounds the concurrent form would be set on one server
      connection and the DETACH run on another;
    - an expired partition is dropped only after it is detached, retired and, with
      ``archive``, archived successfully; a detach interrupted by a crash (``detach
      pending``) is finished first;
    - a failed step is recorded in ``errors`` and the run goes on; an error for which
      ``fatal`` is true (default: :func:`connection_lost`) ends the run and is raised.
    """
    hooks = hooks or RunHooks()
    key = lock_key_for(table) if lock_key is None else lock_key
    if lock is None:
        lock = RunLock(lambda: try_lock_op(key), lambda: unlock_op(key))
    started = datetime.now(UTC)
    clock = time.monotonic()
    in_tx = yield Tx.STATUS
    if dry_run:
        snap = yield from snapshot_op(table, lock_timeout)
        plan = _plan(table, snap, policy)
        yield from hooks.dry_run(plan)
        report = _report(snap, policy, lock_timeout, plan, started, clock, dry_run=True)
        return (yield from hooks.finish(report))
    got = yield from lock.take()
    if not got:
        snap = yield from snapshot_op(table, lock_timeout)
        report = _report(snap, policy, lock_timeout, None, started, clock, already_running=True)
        return (yield from hooks.finish(report))
    closing = False
    try:
        snap = yield from snapshot_op(table, lock_timeout)
        plan = _plan(table, snap, policy)
        log = RunLog()
        yield from finish_detaches_op(table, plan, lock_timeout, log, fatal)
        yield from premake_plan_op(table, plan, lock_timeout, attempts, log, fatal)
        yield from hooks.work(plan, log)
        concurrently = detach_concurrently and not in_tx and not snap.listing.has_default
        yield from expire_op(
            table,
            plan,
            lock_timeout,
            log,
            fatal,
            archive=archive,
            concurrently=concurrently,
            attempts=attempts,
        )
        after = yield from snapshot_op(table, lock_timeout)
        # judge "partitions ahead" at the instant the plan was made for: with short
        # intervals a run may cross a boundary, which would count one fewer through no fault
        after = Snapshot(dataclasses.replace(after.layout, now=snap.layout.now), after.listing)
        report = _report(after, policy, lock_timeout, plan, started, clock, log=log)
        return (yield from hooks.finish(report))
    except GeneratorExit:
        closing = True  # the driver is abandoning the run: no more steps
        raise
    finally:
        if not closing:
            yield from cleanup(lock.give_back())


def _plan(table: PartitionSQL, snap: Snapshot, policy: MaintenancePolicy) -> MaintenancePlan:
    layout = snap.layout
    return plan_maintenance(
        snap.planning_input(), policy, layout.now, layout.interval, layout.origin, table.naming
    )


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
    log: RunLog | None = None,
) -> MaintenanceReport:
    """The report of a run that left ``snap``, with what ``log`` says it did (nothing,
    without one: a dry run, or one that found another running)."""
    log = RunLog() if log is None else log
    layout = snap.layout
    parts = snap.planning_input()
    current_lower = bounds_for(layout.now, layout.interval, layout.origin).lower
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
        partition_interval=layout.interval,
        plan=plan,
        partitions_created=log.created,
        partitions_dropped=log.dropped,
        detaches_finished=log.finished,
        archived=log.archived,
        partitions_ahead=partitions_ahead(parts, layout.now, layout.interval, layout.origin),
        current_attached=current,
        partitions=snap.partitions,
        errors=log.errors,
    )
