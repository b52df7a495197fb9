"""The retry policy, as an operation: repeat an operation while it fails with a retryable
error (:attr:`~shardstore.errors.ShardstoreError.retryable`), with exponential backoff; and
:func:`rerun_on_deadlock`, the store's own rerun of a one-statement write picked as a
deadlock's victim.

Safe for appends that carry idempotency keys (a repeat of an append that did commit returns
the first result with ``duplicate=True``) and for reads. An append without a key may have
committed before its connection broke, so repeating it could store the turn twice: the
stores' ``retry=True`` option refuses such appends. A connection that broke is given back
by the driver, so the next attempt runs on a fresh one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import ShardstoreError
from .steps import Op, Q, Sleep, StatementFailed, Try

T = TypeVar("T")

FIRST_DELAY = 0.01
MAX_DELAY = 0.5

_DEADLOCK = "40P01"
_DEADLOCKS = frozenset({_DEADLOCK})
# how often a write statement chosen as a deadlock's victim is run again before the
# Conflict reaches the caller (each rerun follows the other transaction's progress)
_DEADLOCK_RERUNS = 3


def rerun_on_deadlock(q: Q) -> Op[Any]:
    """Run ``q``; when the server picks it as a deadlock's victim, run it again, at most
    ``_DEADLOCK_RERUNS`` times, then let the ``Conflict`` through. Safe for one-statement
    writes: the victim was rolled back whole (under a savepoint inside a caller's
    transaction), so nothing of it was written, and the transaction it waited for has
    gone on. Other failures in ``q.recover`` come back as ``StatementFailed`` as usual."""
    # built directly: dataclasses.replace looks the fields up at every call (~5 us here)
    guarded = Q(q.sql, q.params, q.fetch, q.prepare, q.recover | _DEADLOCKS, q.named)
    for _ in range(_DEADLOCK_RERUNS):
        got = yield guarded
        if not (isinstance(got, StatementFailed) and got.sqlstate == _DEADLOCK):
            return got
    return (yield q)


def retrying(
    make: Callable[[], Op[T]],
    *,
    deadline: float = 30.0,
    retry_on: Callable[[ShardstoreError], bool] = lambda exc: exc.retryable,
    first_delay: float = FIRST_DELAY,
    max_delay: float = MAX_DELAY,
    attempts: int | None = None,
    before_retry: Callable[[], None] | None = None,
) -> Op[T]:
    """Run ``make()``; while it raises a ShardstoreError that ``retry_on`` accepts, wait
    (``first_delay`` doubling up to ``max_delay``) and run a fresh ``make()``, until
    ``deadline`` seconds have passed or ``attempts`` runs failed; then the last error is
    raised. Other errors are raised at once. Each attempt is a ``Try``: inside a caller's
    transaction a failed attempt is rolled back to its savepoint. ``before_retry`` runs
    before each repeat (e.g. to forget a failed attempt's partial report)."""
    give_up = time.monotonic() + deadline
    delay = first_delay
    failures = 0
    while True:
        try:
            result: T = yield Try(make())
            return result
        except ShardstoreError as exc:
            failures += 1
            if not retry_on(exc) or time.monotonic() + delay > give_up:
                raise
            if attempts is not None and failures >= attempts:
                raise
        if before_retry is not None:
            before_retry()
        yield Sleep(delay)
        delay = min(delay * 2, max_delay)
