"""Partition maintenance as store methods (mixins of :class:`Store` / :class:`AsyncStore`).

The run itself is written once, in :mod:`partition_manager.runner`, as a program of sans-IO
operations; the two drivers below run it on one connection, which holds the maintenance
advisory lock for the whole run, and always give that lock back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from partition_manager.archive import ArchiveHook, run_archive_hook
from partition_manager.plan import MaintenancePolicy
from partition_manager.runner import (
    ArchiveCall,
    MaintenanceReport,
    Program,
    RunState,
    maintenance_program,
    release_op,
)

from .errors import ConfigurationError, MissingDependency, ShardstoreError
from .executor import run_async, run_sync
from .ops import Op
from .settings import parse_interval
from .vector_ops import VectorState, maintenance_backlog_op

if TYPE_CHECKING:
    from .connector import AsyncConnector, Connector
    from .settings import Settings

DEFAULT_FLUSH_IDLE = timedelta(minutes=5)
DEFAULT_LOCK_TIMEOUT = timedelta(seconds=1)

Duration = timedelta | str | None


def _duration(value: Duration, what: str) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return parse_interval(value)
    raise ConfigurationError(f"{what} must be a timedelta or a text like '30 days', not {value!r}")


def _or(value: timedelta | None, default: timedelta) -> timedelta:
    return default if value is None else value


def _setup(
    settings: Settings,
    premake: int | None,
    retention: Duration,
    flush_idle: Duration,
    lock_timeout: Duration,
    archive: ArchiveHook | None,
    dry_run: bool,
) -> tuple[Program, RunState]:
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
    if archive is not None and not (callable(archive) or isinstance(archive, str)):
        raise ConfigurationError("archive must be a callable or a shell command string")
    state = RunState()
    program = maintenance_program(
        policy, lock_timeout=wait, state=state, dry_run=dry_run, archive=archive is not None
    )
    return program, state


def _need_autocommit(autocommit: bool) -> None:
    if not autocommit:
        raise ConfigurationError(
            "maintain() needs a connection in autocommit mode (DETACH ... CONCURRENTLY cannot "
            "run inside a transaction): give connect() a DSN or a pool"
        )


class MaintenanceMethods:
    """Maintenance methods of :class:`shardstore.Store`."""

    settings: Settings
    _connector: Connector
    _vectors: VectorState
    _run: Callable[[Op[Any]], Any]
    embed: Callable[..., int]

    def maintain(
        self,
        *,
        dry_run: bool = False,
        premake: int | None = None,
        retention: Duration = None,
        flush_idle: Duration = DEFAULT_FLUSH_IDLE,
        lock_timeout: Duration = DEFAULT_LOCK_TIMEOUT,
        archive: ArchiveHook | None = None,
        embed: bool = True,
    ) -> MaintenanceReport:
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
        nothing: the report carries the plan. ``report.healthy`` is False when fewer than
        ``premake`` partitions are ahead or a step failed (see ``report.errors``).

        Then, with ``embed`` and an embedding model configured (this store's
        ``embedding_model`` or one recorded in the database), embeds as many chunks as were
        queued at that moment, idle sessions' freshly folded chunks included
        (``report.chunks_embedded``; a run ends even while writers keep queueing); a model
        that cannot load is reported in ``report.embedding_skipped`` without failing the run.
        """
        report = self._maintain_partitions(
            dry_run, premake, retention, flush_idle, lock_timeout, archive
        )
        if not embed or dry_run or report.already_running:
            return report
        try:
            backlog = self._run(maintenance_backlog_op(self._vectors))
            if not backlog:
                return report
            return dataclasses.replace(report, chunks_embedded=self.embed(limit=backlog))
        except (MissingDependency, ConfigurationError) as exc:
            return dataclasses.replace(report, embedding_skipped=str(exc))

    def _maintain_partitions(
        self,
        dry_run: bool,
        premake: int | None,
        retention: Duration,
        flush_idle: Duration,
        lock_timeout: Duration,
        archive: ArchiveHook | None,
    ) -> MaintenanceReport:
        program, state = _setup(
            self.settings, premake, retention, flush_idle, lock_timeout, archive, dry_run
        )
        dsn = self._connector.dsn
        with self._connector.connection() as conn:
            _need_autocommit(conn.autocommit)
            try:
                result: Any = None
                error: ShardstoreError | None = None
                while True:
                    try:
                        step = program.send(result) if error is None else program.throw(error)
                    except StopIteration as stop:
                        report: MaintenanceReport = stop.value
                        return report
                    result, error = None, None
                    if isinstance(step, ArchiveCall):
                        assert archive is not None
                        result = run_archive_hook(archive, step.table, dsn)
                        continue
                    try:
                        result = run_sync(conn, step)
                    except ShardstoreError as exc:
                        error = exc
            finally:
                program.close()
                with contextlib.suppress(Exception):
                    run_sync(conn, release_op(state))


class AsyncMaintenanceMethods:
    """Maintenance methods of :class:`shardstore.AsyncStore`."""

    settings: Settings
    _connector: AsyncConnector
    _vectors: VectorState
    _run: Callable[[Op[Any]], Coroutine[Any, Any, Any]]
    embed: Callable[..., Coroutine[Any, Any, int]]

    async def maintain(
        self,
        *,
        dry_run: bool = False,
        premake: int | None = None,
        retention: Duration = None,
        flush_idle: Duration = DEFAULT_FLUSH_IDLE,
        lock_timeout: Duration = DEFAULT_LOCK_TIMEOUT,
        archive: ArchiveHook | None = None,
        embed: bool = True,
    ) -> MaintenanceReport:
        """See :meth:`shardstore.Store.maintain`. A callable archive hook may be a coroutine
        function; a plain callable or a shell command runs in a worker thread."""
        report = await self._maintain_partitions(
            dry_run, premake, retention, flush_idle, lock_timeout, archive
        )
        if not embed or dry_run or report.already_running:
            return report
        try:
            backlog = await self._run(maintenance_backlog_op(self._vectors))
            if not backlog:
                return report
            embedded = await self.embed(limit=backlog)
            return dataclasses.replace(report, chunks_embedded=embedded)
        except (MissingDependency, ConfigurationError) as exc:
            return dataclasses.replace(report, embedding_skipped=str(exc))

    async def _maintain_partitions(
        self,
        dry_run: bool,
        premake: int | None,
        retention: Duration,
        flush_idle: Duration,
        lock_timeout: Duration,
        archive: ArchiveHook | None,
    ) -> MaintenanceReport:
        program, state = _setup(
            self.settings, premake, retention, flush_idle, lock_timeout, archive, dry_run
        )
        dsn = self._connector.dsn
        async with self._connector.connection() as conn:
            _need_autocommit(conn.autocommit)
            try:
                result: Any = None
                error: ShardstoreError | None = None
                while True:
                    try:
                        step = program.send(result) if error is None else program.throw(error)
                    except StopIteration as stop:
                        report: MaintenanceReport = stop.value
                        return report
                    result, error = None, None
                    if isinstance(step, ArchiveCall):
                        assert archive is not None
                        result = await _arun_hook(archive, step.table, dsn)
                        continue
                    try:
                        result = await run_async(conn, step)
                    except ShardstoreError as exc:
                        error = exc
            finally:
                program.close()
                with contextlib.suppress(Exception):
                    await run_async(conn, release_op(state))


async def _arun_hook(hook: ArchiveHook, table: str, dsn: str | None) -> str | None:
    if callable(hook) and inspect.iscoroutinefunction(hook):
        try:
            await hook(table)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None
    return await asyncio.to_thread(run_archive_hook, hook, table, dsn)
