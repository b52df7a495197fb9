"""Partition planning, creation and maintenance for ``shardstore.agent_history``.

Planning is pure (:mod:`partition_manager.plan`); :func:`premake_op` (connect-time premake)
and :mod:`partition_manager.runner` (a whole maintenance run) apply plans as sans-IO
operations that the sync and asyncio stores both run. ``python -m partition_manager`` is
``shardstore maintain``.

This package imports shardstore lazily, so that ``python -m partition_manager`` (which
imports this package before shardstore) does not meet shardstore importing it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .plan import (
    MaintenancePlan,
    MaintenancePolicy,
    Partition,
    PartitionBounds,
    PartitionState,
    bounds_for,
    plan_maintenance,
    plan_premake,
)

if TYPE_CHECKING:
    from .premake import premake_op

__all__ = [
    "MaintenancePlan",
    "MaintenancePolicy",
    "Partition",
    "PartitionBounds",
    "PartitionState",
    "bounds_for",
    "plan_maintenance",
    "plan_premake",
    "premake_op",
]


def __getattr__(name: str) -> Any:
    if name == "premake_op":
        from .premake import premake_op

        return premake_op
    raise AttributeError(f"module 'partition_manager' has no attribute {name!r}")
