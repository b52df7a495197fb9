"""Pure partition planning: which ``agent_history`` partitions should exist.

Bounds follow the same rule as the SQL function ``shardstore.ensure_partition_v1``:
``lower = origin + floor((t - origin) / interval) * interval`` (Postgres ``date_bin``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """One partition's range ``[lower, upper)`` and the table name it gets."""

    lower: datetime
    upper: datetime

    @property
    def name(self) -> str:
        return "agent_history_p" + self.lower.astimezone(UTC).strftime("%Y%m%dt%H%M%S")


def bounds_for(at: datetime, interval: timedelta, origin: datetime) -> PartitionBounds:
    """The partition that holds instant ``at``."""
    if interval <= timedelta(0):
        raise ValueError("interval must be positive")
    steps = (at - origin) // interval
    lower = origin + steps * interval
    return PartitionBounds(lower, lower + interval)


def plan_premake(
    now: datetime,
    interval: timedelta,
    origin: datetime,
    premake: int,
    existing: Iterable[datetime],
) -> list[PartitionBounds]:
    """Partitions to create so that the current one and ``premake`` after it exist.

    ``existing`` holds the lower bounds of attached partitions; the result is in time
    order and excludes them."""
    have = set(existing)
    current = bounds_for(now, interval, origin)
    wanted = [
        PartitionBounds(current.lower + i * interval, current.upper + i * interval)
        for i in range(premake + 1)
    ]
    return [b for b in wanted if b.lower not in have]
