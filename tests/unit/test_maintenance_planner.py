"""The pure maintenance planner: unit cases and hypothesis properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition_manager.plan import (
    MaintenancePolicy,
    Partition,
    PartitionBounds,
    PartitionState,
    apply_plan,
    bounds_for,
    lower_from_name,
    partitions_ahead,
    plan_maintenance,
    retention_boundary,
)

ORIGIN = datetime(2001, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
NOW = datetime(2026, 3, 10, 12, 30, tzinfo=UTC)


def _part(offset: int, state: PartitionState = PartitionState.ATTACHED) -> Partition:
    """The partition ``offset`` intervals from the current one (daily partitions)."""
    current = bounds_for(NOW, DAY, ORIGIN)
    b = PartitionBounds(current.lower + offset * DAY, current.upper + offset * DAY)
    name = b.name if state is not PartitionState.RETIRED else b.name.replace("_p", "_r", 1)
    return Partition(name, b.lower, b.upper, state)


def test_premake_creates_current_and_ahead() -> None:
    plan = plan_maintenance([_part(0), _part(2)], MaintenancePolicy(premake=3), NOW, DAY, ORIGIN)
    assert [b.lower for b in plan.create] == [_part(1).lower, _part(3).lower]
    assert plan.expire == () and plan.finalize == ()
    assert plan.fold_before == NOW - timedelta(minutes=5)
    assert plan.retention_before is None


def test_retention_expires_only_whole_ranges_before_the_boundary() -> None:
    parts = [_part(i) for i in range(-10, 5)]
    plan = plan_maintenance(
        parts, MaintenancePolicy(premake=4, retention=3 * DAY), NOW, DAY, ORIGIN
    )
    # now - 3 days is inside partition -3, which must stay: -10 .. -4 go
    assert [p.name for p in plan.expire] == [_part(i).name for i in range(-10, -3)]
    assert plan.retention_before == _part(-3).lower
    assert plan.empty is False


def test_pending_detach_is_finished_and_reattached_when_in_the_window() -> None:
    pending_old = _part(-1, PartitionState.DETACH_PENDING)
    pending_ahead = _part(1, PartitionState.DETACH_PENDING)
    plan = plan_maintenance(
        [_part(0), pending_old, pending_ahead], MaintenancePolicy(premake=1), NOW, DAY, ORIGIN
    )
    assert plan.finalize == (pending_old, pending_ahead)
    assert [b.lower for b in plan.create] == [pending_ahead.lower]
    after = apply_plan([_part(0), pending_old, pending_ahead], plan)
    again = plan_maintenance(after, MaintenancePolicy(premake=1), NOW, DAY, ORIGIN)
    assert again.empty
    assert [p.name for p in again.strays] == [pending_old.name]


def test_expired_pending_and_retired_tables_are_expired_retired_copy_first() -> None:
    retired = _part(-9, PartitionState.RETIRED)
    detached = _part(-9, PartitionState.DETACHED)
    pending = _part(-8, PartitionState.DETACH_PENDING)
    plan = plan_maintenance(
        [detached, retired, pending, _part(0)],
        MaintenancePolicy(premake=0, retention=DAY),
        NOW,
        DAY,
        ORIGIN,
    )
    assert plan.expire == (retired, detached, pending)
    assert plan.finalize == ()


def test_names_round_trip() -> None:
    b = bounds_for(NOW, timedelta(seconds=1), ORIGIN)
    assert lower_from_name(b.name) == b.lower
    assert lower_from_name(b.name.replace("_p", "_r", 1)) == b.lower
    assert lower_from_name("agent_history") is None


def test_policy_is_validated() -> None:
    with pytest.raises(ValueError):
        MaintenancePolicy(premake=-1)
    with pytest.raises(ValueError):
        MaintenancePolicy(retention=timedelta(0))
    with pytest.raises(ValueError):
        MaintenancePolicy(flush_idle=timedelta(seconds=-1))


# ---------------------------------------------------------------- properties

INTERVALS = st.sampled_from(
    [timedelta(seconds=1), timedelta(minutes=15), timedelta(hours=1), DAY, 7 * DAY]
)
STATES = st.sampled_from(list(PartitionState))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Partition], MaintenancePolicy, datetime, timedelta]:
    interval = draw(INTERVALS)
    now = draw(
        st.datetimes(
            min_value=datetime(2001, 1, 2), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
        )
    )
    current = bounds_for(now, interval, ORIGIN)
    found: dict[tuple[int, bool], Partition] = {}
    for offset, state in draw(
        st.lists(st.tuples(st.integers(-40, 40), STATES), max_size=30, unique_by=lambda t: t[0])
    ):
        lower = current.lower + offset * interval
        b = PartitionBounds(lower, lower + interval)
        retired = state is PartitionState.RETIRED
        name = b.name.replace("_p", "_r", 1) if retired else b.name
        found[(offset, retired)] = Partition(name, b.lower, b.upper, state)
    retention = draw(
        st.none()
        | st.builds(
            lambda k, extra: k * interval + timedelta(seconds=extra),
            st.integers(0, 45),
            st.integers(0, 3600),
        ).filter(lambda r: r > timedelta(0))
    )
    policy = MaintenancePolicy(
        premake=draw(st.integers(0, 8)),
        retention=retention,
        flush_idle=timedelta(seconds=draw(st.integers(0, 86400))),
    )
    return list(found.values()), policy, now, interval


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_plan_properties(
    scenario: tuple[list[Partition], MaintenancePolicy, datetime, timedelta],
) -> None:
    partitions, policy, now, interval = scenario
    plan = plan_maintenance(partitions, policy, now, interval, ORIGIN)

    # never drops a partition whose range ends after now - retention
    for part in plan.expire:
        assert policy.retention is not None
        assert part.upper <= now - policy.retention
    if policy.retention is None:
        assert plan.expire == ()
    else:
        boundary = retention_boundary(now, policy.retention, interval, ORIGIN)
        assert boundary is not None and boundary <= now - policy.retention
        # and drops every partition whose range ends by then
        assert {p.name for p in plan.expire} == {p.name for p in partitions if p.upper <= boundary}

    # always leaves the current partition and premake ahead attached
    after = apply_plan(partitions, plan)
    current = bounds_for(now, interval, ORIGIN)
    attached = {p.lower for p in after if p.state is PartitionState.ATTACHED}
    assert current.lower in attached
    assert partitions_ahead(after, now, interval, ORIGIN) >= policy.premake
    # no two tables claim one range among the attached ones
    assert len(attached) == len([p for p in after if p.state is PartitionState.ATTACHED])

    # idempotent: applying the plan and planning again changes nothing
    again = plan_maintenance(after, policy, now, interval, ORIGIN)
    assert again.empty, again
    assert apply_plan(after, again) == after
