"""A standalone partition lifecycle library for any RANGE-partitioned PostgreSQL table.

* :mod:`partition_manager.plan` — pure planning: bounds, names (:class:`Naming`), what a
  run creates, finishes and expires;
* :mod:`partition_manager.table` — the statements of a lifecycle (:class:`PartitionSQL`),
  with a generic implementation for any table (:class:`RangeTable`, DDL via psycopg.sql);
* :mod:`partition_manager.premake` and :mod:`partition_manager.runner` — premake and a whole
  maintenance run as sans-IO operations (:mod:`partition_manager.steps`), run by the one
  driver (:mod:`partition_manager.driver`) sync or asyncio;
* :mod:`partition_manager.archive` — archive hooks (callables, shell commands).

Nothing here imports shardstore (which configures this library for its own tables, and
runs it as ``shardstore maintain``); tests/unit/test_import_graph.py checks it.
"""

from __future__ import annotations

from .archive import ArchiveFailed, ArchiveHook, command_hook
from .plan import (
    DEFAULT_NAMING,
    MaintenancePlan,
    MaintenancePolicy,
    Naming,
    Partition,
    PartitionBounds,
    PartitionState,
    bounds_for,
    plan_maintenance,
    plan_premake,
)
from .premake import premake_op
from .runner import (
    MaintenanceReport,
    RunHooks,
    RunLock,
    RunLog,
    format_report,
    lock_key_for,
    maintenance_op,
)
from .table import FoundPartition, Layout, Listing, PartitionSQL, RangeTable

__all__ = [
    "DEFAULT_NAMING",
    "ArchiveFailed",
    "ArchiveHook",
    "FoundPartition",
    "Layout",
    "Listing",
    "MaintenancePlan",
    "MaintenancePolicy",
    "MaintenanceReport",
    "Naming",
    "Partition",
    "PartitionBounds",
    "PartitionSQL",
    "PartitionState",
    "RangeTable",
    "RunHooks",
    "RunLock",
    "RunLog",
    "bounds_for",
    "command_hook",
    "format_report",
    "lock_key_for",
    "maintenance_op",
    "plan_maintenance",
    "plan_premake",
    "premake_op",
]
