"""Premake as one sans-IO operation: make sure the current partition and ``premake`` after
it exist and are attached, by the server's clock."""

from __future__ import annotations

from datetime import timedelta

from .plan import PartitionState, plan_premake
from .runner import DEFAULT_ATTEMPTS, attach_with_retries_op, gave_up_message
from .steps import Op
from .table import PartitionSQL


def premake_op(
    table: PartitionSQL,
    premake: int,
    *,
    lock_timeout: timedelta = timedelta(seconds=1),
    attempts: int = DEFAULT_ATTEMPTS,
) -> Op[list[str]]:
    """Create the current partition of ``table`` and ``premake`` ahead of it (each a
    standalone table with a bounds CHECK, then ATTACH waiting at most ``lock_timeout`` per
    attempt, up to ``attempts`` tries with backoff). Returns the names of the partitions
    it attached; raises TimeoutError naming the first one it could not attach."""
    if type(premake) is not int or premake < 0:
        raise ValueError("premake must be an int >= 0")
    layout = yield from table.layout_op()
    listing = yield from table.list_op(layout)
    existing = [p.lower for p in listing.partitions if p.state is PartitionState.ATTACHED]
    plan = plan_premake(layout.now, layout.interval, layout.origin, premake, existing, table.naming)
    created: list[str] = []
    for bounds in plan:
        ok = yield from attach_with_retries_op(table, bounds, lock_timeout, attempts)
        if not ok:
            raise TimeoutError(gave_up_message(f"attaching {bounds.name}", attempts, lock_timeout))
        created.append(bounds.name)
    return created
