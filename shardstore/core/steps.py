"""The step protocol shardstore's operations speak (defined one layer down, in
:mod:`partition_manager.steps`, so that the partition library speaks it too)."""

from partition_manager.steps import (
    Call,
    Emit,
    Op,
    Q,
    Sleep,
    StatementFailed,
    Step,
    Try,
    Tx,
    collect,
    relay,
)

__all__ = [
    "Call",
    "Emit",
    "Op",
    "Q",
    "Sleep",
    "StatementFailed",
    "Step",
    "Try",
    "Tx",
    "collect",
    "relay",
]
