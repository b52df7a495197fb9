"""Premake as a sans-IO operation (run by ``connect()`` and ``store.premake_partitions()``)."""

from __future__ import annotations

from datetime import timedelta

from shardstore.ops import Op, Q, ensure_partitions_op, parse_bound
from shardstore.sql import query

from .plan import plan_premake


def premake_op(premake: int) -> Op[list[str]]:
    """Create the current partition and ``premake`` ahead of it (by the server's clock);
    returns the names of the partitions created."""
    now_row = yield Q("SELECT now()", fetch="one")
    cfg = yield Q(query("config_get"), fetch="one")
    rows = yield Q(query("stats_partitions"))
    existing = [parse_bound(bound)[0] for _, bound, _ in rows]
    plan = plan_premake(now_row[0], timedelta(seconds=cfg[0]), cfg[1], premake, existing)
    created = yield from ensure_partitions_op(b.lower for b in plan)
    return created
