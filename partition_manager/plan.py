"""Pure partition planning for a RANGE-partitioned table: which partitions should exist,
which expire, what a run must finish.

Bounds follow Postgres ``date_bin``: ``lower = origin + floor((t - origin) / interval) *
interval``. Partition tables are named by :class:`Naming`: ``<table>_p<YYYYMMDDtHHMMSS>``
(the lower bound in UTC) while in use, ``<table>_r<...>`` once retired (detached for
retention, waiting for the archive hook and the drop).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

_STAMP = "%Y%m%dt%H%M%S"
_SUFFIX = re.compile(r"^_([pr])(\d{8}t\d{6})$")
MAX_IDENTIFIER = 63  # bytes, PostgreSQL's NAMEDATALEN - 1


@dataclass(frozen=True, slots=True)
class Naming:
    """How the partition tables of one parent table are named: ``<base>_p<stamp>`` in use,
    ``<base>_r<stamp>`` retired, where ``<stamp>`` is the lower bound in UTC
    (``YYYYMMDDtHHMMSS``). ``base`` defaults to the parent table's name.

    Guarantees: every name it makes fits in a PostgreSQL identifier, with room for the
    ``_bounds`` suffix of the bounds CHECK; :meth:`parse` inverts :meth:`partition` and
    :meth:`retired` and returns None for any other name."""

    base: str

    def __post_init__(self) -> None:
        longest = len((self.base + "_p20260101t000000_bounds").encode())
        if not self.base or longest > MAX_IDENTIFIER:
            raise ValueError(
                f"partition name base {self.base!r} must be 1 to "
                f"{MAX_IDENTIFIER - len('_p20260101t000000_bounds')} bytes"
            )

    def partition(self, lower: datetime) -> str:
        """The name of the partition table whose range starts at ``lower``."""
        return f"{self.base}_p{lower.astimezone(UTC).strftime(_STAMP)}"

    def retired(self, lower: datetime) -> str:
        """The name a partition table starting at ``lower`` gets once retired."""
        return f"{self.base}_r{lower.astimezone(UTC).strftime(_STAMP)}"

    def parse(self, name: str) -> tuple[datetime, bool] | None:
        """``(lower bound, retired)`` encoded in a partition table's name; None for any
        other name."""
        if not name.startswith(self.base):
            return None
        match = _SUFFIX.match(name[len(self.base) :])
        if match is None:
            return None
        lower = datetime.strptime(match.group(2), _STAMP).replace(tzinfo=UTC)
        return lower, match.group(1) == "r"


DEFAULT_NAMING = Naming("agent_history")
"""The naming used where none is given (the name base of the tables this library was first
written for; every function takes a ``naming`` to use another)."""


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """One partition's range ``[lower, upper)`` and the table name it gets."""

    lower: datetime
    upper: datetime
    naming: Naming = field(default=DEFAULT_NAMING, compare=False, repr=False)

    @property
    def name(self) -> str:
        """The partition table's name (by :attr:`naming`)."""
        return self.naming.partition(self.lower)


def bounds_for(
    at: datetime, interval: timedelta, origin: datetime, naming: Naming = DEFAULT_NAMING
) -> PartitionBounds:
    """The partition that holds instant ``at``: ``lower <= at < upper``."""
    if interval <= timedelta(0):
        raise ValueError("interval must be positive")
    steps = (at - origin) // interval
    lower = origin + steps * interval
    return PartitionBounds(lower, lower + interval, naming)


def plan_premake(
    now: datetime,
    interval: timedelta,
    origin: datetime,
    premake: int,
    existing: Iterable[datetime],
    naming: Naming = DEFAULT_NAMING,
) -> list[PartitionBounds]:
    """Partitions to create so that the current one and ``premake`` after it exist.

    ``existing`` holds the lower bounds of attached partitions; the result is in time
    order and excludes them."""
    have = set(existing)
    current = bounds_for(now, interval, origin, naming)
    wanted = [
        PartitionBounds(current.lower + i * interval, current.upper + i * interval, naming)
        for i in range(premake + 1)
    ]
    return [b for b in wanted if b.lower not in have]


# ---------------------------------------------------------------- maintenance planning


class PartitionState(enum.Enum):
    """Where a partition table stands in its life."""

    ATTACHED = "attached"
    """A partition of the parent table."""
    DETACH_PENDING = "detach_pending"
    """A ``DETACH ... CONCURRENTLY`` was interrupted: invisible to new queries, refuses
    inserts, still listed in ``pg_inherits`` (``inhdetachpending``)."""
    DETACHED = "detached"
    """A standalone ``<base>_p…`` table: detached and not yet renamed, or created ahead and
    not yet attached."""
    RETIRED = "retired"
    """A standalone ``<base>_r…`` table: detached for retention, waiting for its archive
    hook and its drop."""


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition table as found in the database."""

    name: str
    lower: datetime
    upper: datetime
    state: PartitionState = PartitionState.ATTACHED


def lower_from_name(name: str, naming: Naming = DEFAULT_NAMING) -> datetime | None:
    """The lower bound encoded in a partition table's name (``<base>_p20260101t000000`` or
    the retired ``<base>_r…``); None for any other name."""
    parsed = naming.parse(name)
    return None if parsed is None else parsed[0]


@dataclass(frozen=True, slots=True)
class MaintenancePolicy:
    """What a maintenance run keeps true.

    - ``premake``: the current partition and this many after it exist and are attached.
    - ``retention``: None keeps everything; otherwise partitions whose whole range ends at or
      before ``boundary = date_bin(interval, now - retention)`` are detached, archived and
      dropped.
    - ``flush_idle``: a grace period for the caller's own idle-row work (shardstore folds the
      buffers of sessions idle this long); the plan only carries ``now - flush_idle``.

    Construction raises ValueError for a policy that makes no sense.
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
    3. the caller's own work (shardstore folds buffers idle since before ``fold_before`` and
       deletes its rows older than ``retention_before``);
    4. with retention: take each of ``expire`` (oldest first) from its state to gone: detach
       (concurrently where it can), finish the detach, rename to ``<base>_r…``, archive,
       drop.

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
    naming: Naming = DEFAULT_NAMING,
) -> MaintenancePlan:
    """Plan a maintenance run from the partitions found, the policy and the clock. Pure.

    Guarantees (tests/unit/test_maintenance_planner.py checks them with hypothesis):
    - a partition is expired only if its whole range ends at or before ``now - retention``
      (so never the current one, never one ahead);
    - after applying the plan, the current partition and ``premake`` after it are attached;
    - applying the plan and planning again gives an empty plan.
    """
    current = bounds_for(now, interval, origin, naming)
    boundary = retention_boundary(now, policy.retention, interval, origin)
    window = {
        current.lower + i * interval: PartitionBounds(
            current.lower + i * interval, current.upper + i * interval, naming
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
    # a retired copy before the detached table of the same range: it must be gone before
    # the other one can take the retired name
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
