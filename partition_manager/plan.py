"""Pure partition planning: which ``agent_history`` partitions should exist.

Bounds follow the same rule as the SQL function ``shardstore.ensure_partition_v1``:
``lower = origin + floor((t - origin) / interval) * interval`` (Postgres ``date_bin``).
"""

from __future__ import annotations

import enum
import re
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


# ---------------------------------------------------------------- maintenance planning

_NAME = re.compile(r"^agent_history_([pr])(\d{8}t\d{6})$")


class PartitionState(enum.Enum):
    """Where a partition table stands in its life."""

    ATTACHED = "attached"
    """A partition of ``agent_history``."""
    DETACH_PENDING = "detach_pending"
    """A ``DETACH ... CONCURRENTLY`` was interrupted: invisible to new queries, refuses
    inserts, still listed in ``pg_inherits`` (``inhdetachpending``)."""
    DETACHED = "detached"
    """A standalone ``agent_history_p…`` table: detached and not yet renamed, or created ahead
    and not yet attached."""
    RETIRED = "retired"
    """A standalone ``agent_history_r…`` table: detached for retention, waiting for its
    archive hook and its drop."""


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition table as found in the database."""

    name: str
    lower: datetime
    upper: datetime
    state: PartitionState = PartitionState.ATTACHED


def lower_from_name(name: str) -> datetime | None:
    """The lower bound encoded in a partition table's name (``agent_history_p20260101t000000``
    or the retired ``agent_history_r…``); None for any other name."""
    match = _NAME.match(name)
    if match is None:
        return None
    return datetime.strptime(match.group(2), "%Y%m%dt%H%M%S").replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class MaintenancePolicy:
    """What a maintenance run keeps true.

    - ``premake``: the current partition and this many after it exist and are attached.
    - ``retention``: None keeps everything; otherwise partitions whose whole range ends at or
      before ``boundary = date_bin(interval, now - retention)`` are detached, archived and
      dropped, and rows outside ``agent_history`` older than that boundary are deleted.
    - ``flush_idle``: sessions without a turn for this long get their buffer folded.
    """

    premake: int = 4
    retention: timedelta | None = None
    flush_idle: timedelta = timedelta(minutes=5)

    def __post_init__(self) -> None:
        if type(self.premake) is not int or not 0 <= self.premake <= 1000:
            raise ValueError("premake must be an int between 0 and 1000")
        if self.retention is not None and (
            not isinstance(self.retention, timedelta) or self.retention <= timedelta(0)
        ):
            raise ValueError("retention must be a positive timedelta, or None to keep everything")
        if not isinstance(self.flush_idle, timedelta) or self.flush_idle < timedelta(0):
            raise ValueError("flush_idle must be a timedelta >= 0")


@dataclass(frozen=True, slots=True)
class MaintenancePlan:
    """What one maintenance run will do, in this order:

    1. ``finalize``: finish interrupted detaches of partitions that are not expired;
    2. ``create``: create (standalone table, indexes, bounds CHECK) and attach these ranges;
    3. fold the buffers of sessions idle since before ``fold_before``;
    4. with retention: delete rows older than ``retention_before`` outside agent_history,
       then take each of ``expire`` (oldest first) from its state to gone: detach
       concurrently, finish the detach, rename to ``agent_history_r…``, archive, drop.

    ``strays`` are standalone tables neither expired nor in the premake window: left alone
    and reported.
    """

    now: datetime
    current: PartitionBounds
    create: tuple[PartitionBounds, ...]
    finalize: tuple[Partition, ...]
    expire: tuple[Partition, ...]
    strays: tuple[Partition, ...]
    fold_before: datetime
    retention_before: datetime | None

    @property
    def empty(self) -> bool:
        """True when the plan changes no partition (folds and row expiry aside)."""
        return not (self.create or self.finalize or self.expire)


def retention_boundary(
    now: datetime, retention: timedelta | None, interval: timedelta, origin: datetime
) -> datetime | None:
    """The partition boundary at or before ``now - retention``: everything strictly older is
    expired. None when retention is off."""
    if retention is None:
        return None
    return bounds_for(now - retention, interval, origin).lower


def plan_maintenance(
    partitions: Iterable[Partition],
    policy: MaintenancePolicy,
    now: datetime,
    interval: timedelta,
    origin: datetime,
) -> MaintenancePlan:
    """Plan a maintenance run from the partitions found, the policy and the clock. Pure.

    Guarantees (tests/test_maintenance_plan.py checks them with hypothesis):
    - a partition is expired only if its whole range ends at or before ``now - retention``
      (so never the current one, never one ahead);
    - after applying the plan, the current partition and ``premake`` after it are attached;
    - applying the plan and planning again gives an empty plan.
    """
    current = bounds_for(now, interval, origin)
    boundary = retention_boundary(now, policy.retention, interval, origin)
    window = {
        current.lower + i * interval: PartitionBounds(
            current.lower + i * interval, current.upper + i * interval
        )
        for i in range(policy.premake + 1)
    }
    attached: set[datetime] = set()
    finalize: list[Partition] = []
    expire: list[Partition] = []
    strays: list[Partition] = []
    for part in sorted(partitions, key=lambda p: (p.lower, p.state.value)):
        expired = boundary is not None and part.upper <= boundary
        if expired:
            expire.append(part)
        elif part.state is PartitionState.ATTACHED:
            attached.add(part.lower)
        elif part.state is PartitionState.DETACH_PENDING:
            finalize.append(part)  # then attached again if it is in the window
        elif part.lower not in window:
            strays.append(part)
    create = tuple(b for lower, b in sorted(window.items()) if lower not in attached)
    fold_before = now - policy.flush_idle
    # a retired copy before the detached table of the same range (see maint_retire_v1)
    expire.sort(key=lambda p: (p.lower, p.state is not PartitionState.RETIRED))
    return MaintenancePlan(
        now=now,
        current=current,
        create=create,
        finalize=tuple(finalize),
        expire=tuple(expire),
        strays=tuple(strays),
        fold_before=fold_before,
        retention_before=boundary,
    )


def apply_plan(partitions: Iterable[Partition], plan: MaintenancePlan) -> list[Partition]:
    """The partitions a successful run of ``plan`` leaves (a model of the runner, for tests
    and for ``--dry-run`` reports)."""
    gone = {p.name for p in plan.expire}
    finalized = {p.name for p in plan.finalize}
    result: dict[datetime, Partition] = {}
    others: list[Partition] = []
    for part in partitions:
        if part.name in gone:
            continue
        if part.name in finalized:
            part = Partition(part.name, part.lower, part.upper, PartitionState.DETACHED)
        if part.state is PartitionState.ATTACHED:
            result[part.lower] = part
        else:
            others.append(part)
    for b in plan.create:
        result[b.lower] = Partition(b.name, b.lower, b.upper, PartitionState.ATTACHED)
    created = {b.name for b in plan.create}
    kept = [p for p in others if p.name not in created]
    return sorted([*result.values(), *kept], key=lambda p: (p.lower, p.name))


def partitions_ahead(
    partitions: Iterable[Partition], now: datetime, interval: timedelta, origin: datetime
) -> int:
    """How many consecutive attached partitions follow the current one (0 when the current
    one is missing and none follow it)."""
    current = bounds_for(now, interval, origin)
    have = {p.lower for p in partitions if p.state is PartitionState.ATTACHED}
    ahead = 0
    while current.lower + (ahead + 1) * interval in have:
        ahead += 1
    return ahead
