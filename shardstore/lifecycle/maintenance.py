"""Partition maintenance of ``shardstore.agent_history``: the standalone partition library
(:mod:`partition_manager`) configured for shardstore, plus shardstore's own work in a run.

* :class:`HistoryPartitions` is :class:`partition_manager.RangeTable` for
  ``agent_history``, with the steps that have side effects done by shardstore's SQL
  functions (the ``maint_*`` functions, which the in-database
  ``CALL shardstore.run_maintenance()`` calls too): the partitioning comes from
  ``shardstore.config``, ATTACH goes through ``maint_attach_partition_v1``, retiring and
  dropping through ``maint_retire_v1`` / ``maint_drop_retired_v2`` (which also forget the
  dropped chunks' locations, idempotency keys and the rows of registered tables keyed by
  those chunks or their turns);
* :class:`_Hooks` adds shardstore's work to a run: fold idle sessions' buffers, delete rows
  older than the retention boundary, log the run in ``maintenance_runs``;
* :func:`maintain` is the store method (one operation on one connection: the partition run,
  then embedding), :func:`premake_op` the connect-time premake.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from partition_manager.archive import ArchiveHook, command_hook
from partition_manager.plan import (
    MaintenancePlan,
    MaintenancePolicy,
    PartitionBounds,
    PartitionState,
    plan_premake,
)
from partition_manager.runner import MaintenanceReport as PartitionRunReport
from partition_manager.runner import RunHooks, RunLock, RunLog, maintenance_op
from partition_manager.steps import Call, Op, Q, Tx
from partition_manager.table import Layout, RangeTable

from ..core import validate
from ..core.connector import AsyncConnector
from ..core.executor import translate
from ..core.rows import json_fields
from ..core.sql import query
from ..core.state import StoreState
from ..errors import (
    ConfigurationError,
    DatabaseUnavailable,
    InvalidInput,
    MissingDependency,
    ShardstoreError,
)
from ..search.keyed import maintenance_pass_op
from ..search.text_index import index_pending_op
from ..search.vectors import maintenance_backlog_op, queue_count_op
from ..settings import parse_interval

DEFAULT_FLUSH_IDLE = timedelta(minutes=5)
DEFAULT_LOCK_TIMEOUT = timedelta(seconds=1)
MAX_LOCK_TIMEOUT = timedelta(milliseconds=2**31 - 1)
# Fixed forever: every maintenance run (Python or CALL shardstore.run_maintenance()) takes
# this session-level advisory lock; sql/functions/run_maintenance.sql has the same number.
MAINTENANCE_LOCK_KEY = 0x5348_4152_4453_0002
EXPIRE_BATCH = 1000
# the longest embed_seconds: a day (a run is meant to fit a schedule)
MAX_EMBED_SECONDS = 86_400

Duration = timedelta | str | None


# ---------------------------------------------------------------- the partitioned table


@dataclass(frozen=True, slots=True)
class HistoryPartitions(RangeTable):
    """``shardstore.agent_history`` (``PARTITION BY RANGE (chunk_start)``) for
    :mod:`partition_manager`: generic listing and DETACH, shardstore's SQL functions for
    the rest (see the module docstring). The interval and origin are read from
    ``shardstore.config`` by :meth:`layout_op`."""

    schema: str = "shardstore"
    table: str = "agent_history"
    column: str = "chunk_start"

    def layout_op(self) -> Op[Layout]:
        """The server's clock and the partitioning recorded in ``shardstore.config``;
        ConfigurationError when the database was never initialised."""
        row = yield Q(query("maint_now"), fetch="one")
        if row is None:
            raise ConfigurationError(
                "shardstore is not initialised: connect with shardstore.connect() or run "
                "'shardstore init'"
            )
        now, seconds, origin = row
        return Layout(now, timedelta(seconds=seconds), origin)

    def attach_op(self, bounds: PartitionBounds, lock_timeout: timedelta) -> Op[bool]:
        """``maint_attach_partition_v1``: standalone table (LIKE agent_history, indexes,
        bounds CHECK) and ATTACH waiting at most ``lock_timeout``; False on a timeout."""
        (ok,) = yield Q(
            query("maint_attach"),
            (bounds.lower, bounds.upper, lock_timeout.total_seconds()),
            fetch="one",
        )
        return bool(ok)

    def detach_op(self, name: str, lock_timeout: timedelta, concurrently: bool) -> Op[str]:
        """The generic detach, but a plain ``DETACH`` (bounded by ``lock_timeout``) when
        ``agent_history`` is distributed by Citus, which has no ``DETACH ... CONCURRENTLY``."""
        if concurrently:
            (distributed,) = yield Q(query("maint_history_distributed"), fetch="one")
            concurrently = not distributed
        return (yield from RangeTable.detach_op(self, name, lock_timeout, concurrently))

    def finalize_op(self, name: str, lock_timeout: timedelta) -> Op[bool]:
        """``maint_finalize_detach_v1``: DETACH ... FINALIZE; False on a lock timeout."""
        (ok,) = yield Q(query("maint_finalize"), (name, lock_timeout.total_seconds()), fetch="one")
        return bool(ok)

    def retire_op(self, name: str, lock_timeout: timedelta) -> Op[str]:
        """``maint_retire_v1``: rename ``agent_history_pX`` to ``agent_history_rX``."""
        (retired,) = yield Q(
            query("maint_retire"), (name, lock_timeout.total_seconds()), fetch="one"
        )
        return str(retired)

    def drop_op(self, retired: str, lock_timeout: timedelta) -> Op[None]:
        """``maint_drop_retired_v2``: drop the retired table and forget its chunks."""
        yield Q(query("maint_drop_retired"), (retired, lock_timeout.total_seconds()), fetch="one")


HISTORY = HistoryPartitions()
"""The partitioned table shardstore maintains."""


def premake_op(premake: int) -> Op[list[str]]:
    """Create the current ``agent_history`` partition and ``premake`` ahead of it (by the
    server's clock) with ``ensure_partition_v1`` (safe against writers racing for the same
    partition; waits for its locks like any writer); returns the names of the partitions
    created. Run by ``connect()`` and ``store.premake_partitions()``."""
    layout = yield from HISTORY.layout_op()
    listing = yield from HISTORY.list_op(layout)
    existing = [p.lower for p in listing.partitions if p.state is PartitionState.ATTACHED]
    plan = plan_premake(
        layout.now, layout.interval, layout.origin, premake, existing, HISTORY.naming
    )
    created: list[str] = []
    for bounds in plan:
        (name,) = yield Q(query("ensure_partition"), (bounds.lower,), fetch="one")
        created.append(str(name))
    return created


# ---------------------------------------------------------------- the report


_DRY_RUN_ONLY = ("sessions_to_fold", "sessions_to_expire", "buffered_turns_to_expire")


@dataclass(frozen=True, slots=True)
class MaintenanceReport(PartitionRunReport):
    """What a maintenance run did and what it left (see ``docs/maintenance.md``): the
    partition library's report plus idle-session folds, expired rows and embedding.
    ``healthy``: the current partition and at least ``premake`` after it are attached and no
    step failed."""

    sessions_folded: int = 0
    turns_folded: int = 0
    sessions_expired: int = 0
    buffered_turns_expired: int = 0
    # dry run only: what the run would fold / expire
    sessions_to_fold: int | None = None
    sessions_to_expire: int | None = None
    buffered_turns_to_expire: int | None = None
    # embedding after the partition work (None: not attempted, no model configured)
    chunks_embedded: int | None = None
    embedding_skipped: str | None = None
    # chunks still queued for embedding after the run (dry run: queued now); None: not counted
    embedding_backlog: int | None = None
    embedding_seconds: float | None = None
    # why the embedding step stopped with chunks left: "max_embed" or "embed_seconds"
    embedding_stopped: str | None = None
    # keep_checkpoints: checkpoints deleted (None: not asked)
    checkpoints_removed: int | None = None
    # buffered turns given their full-text windows by the run (None: not run, dry run)
    text_turns_indexed: int | None = None
    text_sessions_indexed: int | None = None
    # with encryption=: sealed turns given keyed text windows by the client's pass (None:
    # not run: no encryption=, or a dry run)
    sealed_text_turns_indexed: int | None = None
    sealed_text_sessions_indexed: int | None = None
    # the artifact sweep (dry run: what it would delete; None: not run)
    artifacts_deleted: int | None = None
    artifact_bytes_deleted: int | None = None

    def detail_rows(self) -> list[tuple[str, str]]:
        """Folds, expiry and embedding, as rows of the text report."""
        plan = self.plan
        rows: list[tuple[str, str]] = []
        if self.dry_run and plan is not None:
            rows.append(("would fold", f"{self.sessions_to_fold or 0} idle sessions"))
            if self.embedding_backlog is not None:
                rows.append(("embedding backlog", f"{self.embedding_backlog} chunks queued"))
            if plan.retention_before is not None:
                when = plan.retention_before.strftime("%Y-%m-%d %H:%M:%S UTC")
                rows.append(
                    (
                        "would expire",
                        f"{self.sessions_to_expire or 0} sessions, "
                        f"{self.buffered_turns_to_expire or 0} buffered turns "
                        f"(older than {when})",
                    )
                )
            return rows
        rows.append(("folded", f"{self.sessions_folded} sessions ({self.turns_folded} turns)"))
        if self.chunks_embedded is not None:
            took = ""
            if self.embedding_seconds is not None:
                took = f" in {self.embedding_seconds:.1f} s"
                if self.chunks_embedded and self.embedding_seconds > 0:
                    took += f" ({self.chunks_embedded / self.embedding_seconds:,.1f} chunks/s)"
            stop = {
                "max_embed": "; stopped at max_embed",
                "embed_seconds": "; stopped at embed_seconds",
            }.get(self.embedding_stopped or "", "")
            rows.append(("embedded", f"{self.chunks_embedded} chunks{took}{stop}"))
        if self.embedding_skipped is not None:
            rows.append(("embedding skipped", self.embedding_skipped))
        if self.embedding_backlog:
            drain = ""
            if self.chunks_embedded and self.embedding_seconds:
                # at this run's rate: what another run (or a worker) needs to catch up
                eta = self.embedding_backlog * self.embedding_seconds / self.chunks_embedded
                drain = f", about {eta:,.0f} s at this run's rate"
            rows.append(
                (
                    "embedding backlog",
                    f"{self.embedding_backlog} chunks left queued (the next run or "
                    f"'shardstore embed' takes them{drain})",
                )
            )
        if self.text_turns_indexed is not None:
            rows.append(
                (
                    "text indexed",
                    f"{self.text_turns_indexed} buffered turns "
                    f"({self.text_sessions_indexed or 0} sessions)",
                )
            )
        if self.sealed_text_turns_indexed is not None:
            rows.append(
                (
                    "sealed text indexed",
                    f"{self.sealed_text_turns_indexed} encrypted turns "
                    f"({self.sealed_text_sessions_indexed or 0} sessions)",
                )
            )
        if self.checkpoints_removed is not None:
            rows.append(("checkpoints removed", str(self.checkpoints_removed)))
        if self.artifacts_deleted is not None:
            rows.append(
                (
                    "artifacts swept",
                    f"{self.artifacts_deleted} ({self.artifact_bytes_deleted or 0} bytes)",
                )
            )
        if self.retention is not None:
            rows.append(
                (
                    "expired",
                    f"{self.sessions_expired} sessions, "
                    f"{self.buffered_turns_expired} buffered turns",
                )
            )
        return rows

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON document (timestamps in ISO 8601, durations in seconds)."""
        # the library's fields in its JSON form, then shardstore's own; the would-do counts
        # only on a dry run
        library = tuple(f.name for f in dataclasses.fields(PartitionRunReport))
        would = () if self.dry_run else _DRY_RUN_ONLY
        seconds = self.embedding_seconds
        return {
            **PartitionRunReport.to_json(self),
            **json_fields(
                self,
                leave_out=library + would,
                embedding_seconds=None if seconds is None else round(seconds, 6),
            ),
        }


# ---------------------------------------------------------------- shardstore's work in a run


def _fatal(exc: BaseException) -> bool:
    return isinstance(exc, DatabaseUnavailable)


class _Hooks(RunHooks):
    """Shardstore's steps in a partition run, and what they counted."""

    def __init__(self, lock_timeout: timedelta) -> None:
        self.lock_timeout = lock_timeout
        self.counts: dict[str, int | None] = {}

    def _failed(self, log: RunLog, what: str, exc: ShardstoreError) -> None:
        if _fatal(exc):
            raise exc
        log.errors.append(f"{what}: {exc}")

    def work(self, plan: MaintenancePlan, log: RunLog) -> Op[None]:
        """Fold idle sessions' buffers; with retention, delete sessions and buffered turns
        older than the boundary (before the partitions holding their chunks go)."""
        secs = self.lock_timeout.total_seconds()
        folded = turns = 0
        try:
            candidates = yield Q(query("maint_fold_candidates"), (plan.fold_before,))
        except ShardstoreError as exc:
            self._failed(log, "listing idle sessions", exc)
            candidates = []
        for (sid,) in candidates:
            try:
                (moved,) = yield Q(
                    query("maint_fold_session"), (sid, plan.fold_before, secs), fetch="one"
                )
            except ShardstoreError as exc:
                if exc.retryable and not _fatal(exc):
                    continue  # busy (lock timeout): next run
                self._failed(log, f"folding session {sid}", exc)
                continue
            if moved:
                folded += 1
                turns += int(moved)
        self.counts.update(sessions_folded=folded, turns_folded=turns)
        if plan.retention_before is None:
            return
        sessions = buffered = 0
        while True:
            try:
                row = yield Q(
                    query("maint_expire_rows"), (plan.retention_before, EXPIRE_BATCH), fetch="one"
                )
            except ShardstoreError as exc:
                self._failed(log, "expiring rows", exc)
                break
            sessions += int(row[0])
            buffered += int(row[1])
            if not row[0] and not row[1]:
                break
        self.counts.update(sessions_expired=sessions, buffered_turns_expired=buffered)
        try:
            yield from _forget_expired_parents_op()
        except ShardstoreError as exc:
            self._failed(log, "forgetting expired fork parents", exc)

    def dry_run(self, plan: MaintenancePlan) -> Op[None]:
        """Count the sessions a run would fold and the rows it would expire."""
        rows = yield Q(query("maint_fold_candidates"), (plan.fold_before,))
        self.counts["sessions_to_fold"] = len(rows)
        sessions = turns = 0
        if plan.retention_before is not None:
            sessions, turns = yield Q(
                query("maint_count_expiring"),
                (plan.retention_before, plan.retention_before),
                fetch="one",
            )
        self.counts.update(sessions_to_expire=int(sessions), buffered_turns_to_expire=int(turns))

    def finish(self, report: PartitionRunReport) -> Op[PartitionRunReport]:
        """shardstore's report (logged by :func:`maintain` once its embedding step is
        done, so that the log has the whole run)."""
        fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
        full = MaintenanceReport(**fields, **self.counts)  # type: ignore[arg-type]
        return full
        yield  # an operation that needs no statement


def _log_run_op(report: MaintenanceReport) -> Op[MaintenanceReport]:
    """Log a live run in ``maintenance_runs``; a failure to log it is one more error."""
    try:
        yield Q(
            query("maint_log_run"),
            (report.started_at, report.healthy, json.dumps(report.to_json())),
            fetch="one",
        )
    except ShardstoreError as exc:
        if _fatal(exc):
            raise
        report = dataclasses.replace(report, errors=[*report.errors, f"logging the run: {exc}"])
    return report


# ---------------------------------------------------------------- the store method


# a duration is subtracted from the server's clock: beyond this it leaves the dates a
# datetime can hold (timedelta.max would be an OverflowError, not a typed error)
_LONGEST = timedelta(days=1000 * 366)


def _duration(value: Duration, what: str) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_interval(value)
    if not isinstance(value, timedelta):
        raise ConfigurationError(
            f"{what} must be a timedelta or a text like '30 days', not {validate.shown(value)}"
        )
    if not -_LONGEST <= value <= _LONGEST:  # abs(timedelta.min) itself overflows
        raise ConfigurationError(f"{what} must be at most 1000 years, not {value}")
    return value


def _or(value: timedelta | None, default: timedelta) -> timedelta:
    return default if value is None else value


def _archive_hook(archive: Any, dsn: str | None) -> ArchiveHook | None:
    if archive is None:
        return None
    if isinstance(archive, str):
        return command_hook(
            archive,
            table_env="SHARDSTORE_ARCHIVE_TABLE",
            env={"SHARDSTORE_DSN": dsn} if dsn else None,
        )
    if callable(archive):
        hook: ArchiveHook = archive
        return hook
    raise ConfigurationError("archive must be a callable or a shell command string")


def _embed_seconds(value: Any) -> float | None:
    """None, or a time limit (a number of seconds or a timedelta) above 0, in seconds."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        seconds = validate.amount(value, "embed_seconds")
    if not 0 < seconds <= MAX_EMBED_SECONDS:
        raise InvalidInput(
            f"embed_seconds must be more than 0 and at most {MAX_EMBED_SECONDS} "
            f"(a number of seconds or a timedelta), not {validate.shown(value)}"
        )
    return seconds


def maintain(
    store: StoreState,
    *,
    dry_run: bool = False,
    premake: int | None = None,
    retention: Duration = None,
    flush_idle: Duration = DEFAULT_FLUSH_IDLE,
    lock_timeout: Duration = DEFAULT_LOCK_TIMEOUT,
    archive: ArchiveHook | str | None = None,
    embed: bool = True,
    keep_checkpoints: int | None = None,
    max_embed: int | None = None,
    embed_seconds: float | timedelta | None = None,
    progress: bool = False,
    artifact_grace: Duration = None,
) -> Op[MaintenanceReport]:
    """Run partition maintenance once and report what it did.

    In order: finish detaches interrupted by a crash; create the current partition and
    ``premake`` (default: the store's setting) ahead, each as a standalone table with its
    indexes and a bounds CHECK, then ATTACH (retried with backoff); fold the buffers of
    sessions idle for ``flush_idle``; with ``retention`` (a timedelta or '90 days'; None
    keeps everything) delete sessions whose last turn is older than the retention
    boundary (with all their rows) and buffered turns older than it, then for each
    partition whose whole range ends by that boundary: DETACH CONCURRENTLY, rename to
    ``agent_history_r…``, pass it to ``archive`` (a callable or a shell command; see
    :mod:`partition_manager.archive`) and drop it.

    Guarantees: runs never overlap (another run holding the lock makes this one return
    at once with ``already_running=True``); no step waits longer than ``lock_timeout``
    for a lock, so appends never queue behind maintenance for longer than that; nothing
    is dropped before it is detached and archived. ``dry_run`` takes no lock and changes
    nothing: the report carries the plan and ``embedding_backlog`` (chunks queued for
    embedding; the model is not loaded). ``report.healthy`` is False when fewer than
    ``premake`` partitions are ahead or a step failed (see ``report.errors``).
    ``report.seconds`` is the whole run, embedding included.

    Then, with ``embed`` and an embedding model configured (this store's
    ``embedding_model`` or one recorded in the database), embeds the chunks queued at that
    moment, idle sessions' freshly folded chunks included (``report.chunks_embedded``; a
    run ends even while writers keep queueing), at most ``max_embed`` chunks (an int >= 0)
    and for at most about ``embed_seconds`` (seconds, or a timedelta; model loading
    included; no batch starts after it and batches are sized to end by it), so that a run
    fits its schedule; ``report.embedding_stopped`` says which cap ended the step and
    ``report.embedding_backlog`` how many chunks are still queued (the next run goes on).
    The model is loaded only when something is queued. A model that cannot load is
    reported in ``report.embedding_skipped`` without failing the run. ``progress`` draws a
    bar on stderr for the embedding step. Bad caps raise InvalidInput.

    With ``AsyncStore`` a callable ``archive`` may be a coroutine function (awaited); a
    plain callable or a shell command runs in a worker thread. Needs a connection outside
    any transaction (ConfigurationError otherwise).

    ``keep_checkpoints``: keep only the newest N checkpoints of every session (after the
    partition work; ``report.checkpoints_removed``); None (the default) keeps them all.

    Then the buffered turns of every session that still lack full-text windows get them
    (``report.text_turns_indexed``, ``report.text_sessions_indexed``; nothing while text
    indexing is off), so that text search reads them from the index instead of indexing
    them at every call; what is appended during the run waits for the next one. With
    ``encryption=``, sealed turns (buffered or folded) without keyed text windows get them
    from this client, at most 1,000 sessions a run, the most recently active first
    (``report.sealed_text_turns_indexed``, ``report.sealed_text_sessions_indexed``); a
    search of their scope indexes what is left.

    Then the artifact sweep (:meth:`sweep_artifacts`): artifacts without a live reference
    for longer than ``artifact_grace`` (default: the store's, one day) are deleted
    (``report.artifacts_deleted``; a dry run counts what would go).
    """
    clock = time.monotonic()
    settings = store.settings
    keep = validate.optional_count(keep_checkpoints, "keep_checkpoints", low=0)
    cap = validate.optional_count(max_embed, "max_embed", low=0, high=validate.MAX_INT64)
    budget = _embed_seconds(embed_seconds)
    show = validate.flag(progress, "progress")
    grace = _duration(artifact_grace, "artifact_grace")
    try:
        policy = MaintenancePolicy(
            premake=settings.premake if premake is None else premake,
            retention=_duration(retention, "retention"),
            flush_idle=_or(_duration(flush_idle, "flush_idle"), DEFAULT_FLUSH_IDLE),
        )
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    wait = _or(_duration(lock_timeout, "lock_timeout"), DEFAULT_LOCK_TIMEOUT)
    if wait < timedelta(milliseconds=1):
        raise ConfigurationError("lock_timeout must be at least 1 ms")
    if wait > MAX_LOCK_TIMEOUT:  # PostgreSQL's lock_timeout is an int of milliseconds
        raise ConfigurationError(f"lock_timeout must be at most {MAX_LOCK_TIMEOUT}")
    hook = _archive_hook(archive, store.dsn)
    in_tx = yield Tx.STATUS
    if in_tx:
        raise ConfigurationError(
            "maintain() needs a connection in autocommit mode (DETACH ... CONCURRENTLY cannot "
            "run inside a transaction): give connect() a DSN or a pool"
        )
    result = yield from maintenance_op(
        HISTORY,
        policy,
        lock_timeout=wait,
        dry_run=dry_run,
        archive=hook,
        lock_key=MAINTENANCE_LOCK_KEY,
        lock=_run_lock(store.connector),
        detach_concurrently=not store.connector.pooler,
        hooks=_Hooks(wait),
        fatal=_fatal,
    )
    assert isinstance(result, MaintenanceReport)
    report = result
    if report.already_running:
        return report
    if dry_run:
        queued = yield from queue_count_op()
        report = yield from _artifact_step(store, report, grace, True)
        return dataclasses.replace(
            report, embedding_backlog=queued, seconds=time.monotonic() - clock
        )
    try:
        if keep is not None:
            from ..state.checkpoints import keep_op  # checkpoints imports history's building blocks

            removed = yield from keep_op(keep)
            report = dataclasses.replace(report, checkpoints_removed=removed)
        sessions, turns = yield from index_pending_op()
        report = dataclasses.replace(
            report, text_turns_indexed=turns, text_sessions_indexed=sessions
        )
        if store.ctx.sealer is not None:
            sessions, turns = yield from maintenance_pass_op(store.ctx.sealer)
            report = dataclasses.replace(
                report, sealed_text_turns_indexed=turns, sealed_text_sessions_indexed=sessions
            )
        report = yield from _artifact_step(store, report, grace, False)
        if embed:
            report = yield from _embed_step(store, report, cap, budget, show)
        queued = yield from queue_count_op()
        report = dataclasses.replace(report, embedding_backlog=queued)
    except ShardstoreError as exc:
        if _fatal(exc):
            raise
        # the run is logged as far as it went, then the error goes to the caller
        failed = dataclasses.replace(
            report,
            errors=[*report.errors, f"after the partition work: {exc}"],
            seconds=time.monotonic() - clock,
        )
        yield from _log_run_op(failed)
        raise
    report = dataclasses.replace(report, seconds=time.monotonic() - clock)
    return (yield from _log_run_op(report))


def _forget_expired_parents_op() -> Op[int]:
    """Forks whose parent session retention deleted stop naming it: the turns they shared
    with it were older than the retention boundary and went with it, so the fork goes on as
    a session of its own from its first own turn (as after ``purge_range``). Also finishes
    what a run that died after expiring a parent left. Three statements that each stay on
    one node's rows or name sessions by id (runnable on Citus); returns how many forks."""
    parents = yield Q(query("maint_fork_parents"))
    if not parents:
        return 0
    named = [r[0] for r in parents]
    alive = yield Q(query("maint_sessions_present"), (named,))
    gone = sorted(set(named) - {r[0] for r in alive})
    if not gone:
        return 0
    forgotten = yield Q(query("maint_forget_fork_parents"), (gone,))
    return len(forgotten)


class _HeldLock:
    """The run's lock behind a transaction-mode pooler: ``pg_try_advisory_xact_lock`` in a
    transaction kept open for the run on a connection of its own. A session-level lock
    would be taken on one server connection and given back on another (or never), since
    the pooler moves a client between server connections at every transaction; an open
    transaction pins its server connection until it ends, and ends if the process dies."""

    def __init__(self, connector: Any) -> None:
        self.connector = connector
        self.conn: Any = None

    def take(self) -> Op[bool]:
        got = yield Call(self._atake if isinstance(self.connector, AsyncConnector) else self._take)
        return bool(got)

    def give_back(self) -> Op[None]:
        yield Call(
            self._agive_back if isinstance(self.connector, AsyncConnector) else self._give_back
        )

    def _take(self) -> bool:
        conn = self.connector.acquire()
        try:
            conn.execute("BEGIN")
            (got,) = conn.execute(_TRY_XACT_LOCK, (MAINTENANCE_LOCK_KEY,)).fetchone()
            if not got:
                conn.execute("ROLLBACK")
        except psycopg.Error as exc:
            self.connector.release(conn)
            raise translate(exc) from exc
        if not got:
            self.connector.release(conn)
            return False
        self.conn = conn
        return True

    def _give_back(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            raise translate(exc) from exc
        finally:
            self.connector.release(conn)

    async def _atake(self) -> bool:
        conn = await self.connector.acquire()
        try:
            await conn.execute("BEGIN")
            cur = await conn.execute(_TRY_XACT_LOCK, (MAINTENANCE_LOCK_KEY,))
            (got,) = await cur.fetchone()
            if not got:
                await conn.execute("ROLLBACK")
        except psycopg.Error as exc:
            await self.connector.release(conn)
            raise translate(exc) from exc
        if not got:
            await self.connector.release(conn)
            return False
        self.conn = conn
        return True

    async def _agive_back(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            await conn.execute("COMMIT")
        except psycopg.Error as exc:
            raise translate(exc) from exc
        finally:
            await self.connector.release(conn)


_TRY_XACT_LOCK = "SELECT pg_try_advisory_xact_lock(%s)"


def _run_lock(connector: Any) -> RunLock | None:
    """The run's lock: the default session-level one on a direct connection; behind a
    pooler, one held in a transaction of its own (:class:`_HeldLock`), which needs a
    second connection from the store's pool."""
    if not connector.pooler:
        return None
    if connector.single:
        raise ConfigurationError(
            "maintain() behind a connection pooler needs a store with a pool of its own "
            "(connect() with a DSN or a pool), or a direct connection: its lock is held in a "
            "transaction on a second connection for the whole run"
        )
    held = _HeldLock(connector)
    return RunLock(held.take, held.give_back)


def _artifact_step(
    store: StoreState, report: MaintenanceReport, grace: timedelta | None, dry_run: bool
) -> Op[MaintenanceReport]:
    """The artifact sweep of a run."""
    from ..artifacts.sweep import sweep_artifacts  # the artifact package imports settings

    swept = yield from sweep_artifacts(store, grace=grace, dry_run=dry_run)
    return dataclasses.replace(
        report, artifacts_deleted=swept.deleted, artifact_bytes_deleted=swept.bytes_deleted
    )


def _embed_step(
    store: StoreState,
    report: MaintenanceReport,
    cap: int | None,
    budget: float | None,
    progress: bool,
) -> Op[MaintenanceReport]:
    """The embedding step of a run: the chunks queued now, within the caps."""
    from ..search.ops import embed_run  # search imports the store's building blocks

    try:
        backlog = yield from maintenance_backlog_op(store.vector_state)
        if not backlog:
            return report
        limit = backlog if cap is None else min(backlog, cap)
        run = yield from embed_run(store, limit=limit, progress=progress, seconds=budget)
    except (MissingDependency, ConfigurationError) as exc:
        return dataclasses.replace(report, embedding_skipped=str(exc))
    stopped = None
    if run.stopped_by == "time":
        stopped = "embed_seconds"
    elif run.stopped_by == "limit" and cap is not None and limit == cap and cap < backlog:
        stopped = "max_embed"
    return dataclasses.replace(
        report,
        chunks_embedded=run.stored,
        embedding_seconds=run.seconds,
        embedding_stopped=stopped,
    )
