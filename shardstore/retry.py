"""The retry policy for your own calls: repeat a call while it fails with a retryable
error. The policy itself is the operation :func:`shardstore.core.rerun.retrying` (what
``append_turn(..., retry=True)`` runs); these helpers apply it to any callable.

Safe for appends that carry idempotency keys (a repeat of an append that did commit returns
the first result with ``duplicate=True``) and for reads. An append without a key may have
committed before its connection broke, so repeating it could store the turn twice: the
stores' ``retry=True`` option refuses such appends.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from partition_manager import driver

from .core.rerun import FIRST_DELAY, MAX_DELAY, retrying
from .core.steps import Call, Op

__all__ = ["FIRST_DELAY", "MAX_DELAY", "acall", "call", "retrying"]

T = TypeVar("T")


def _once(fn: Callable[[], Any]) -> Op[Any]:
    return (yield Call(fn, inline=True))


def call(fn: Callable[..., T], *args: Any, deadline: float = 30.0, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)``; while it raises a ShardstoreError with ``retryable``
    set, wait (10 ms doubling up to 500 ms) and call again, until ``deadline`` seconds have
    passed; then the last error is raised. Other errors are raised at once."""
    target = functools.partial(fn, *args, **kwargs)
    op = retrying(lambda: _once(target), deadline=deadline)
    result: T = driver.run_sync(driver.Fixed(None), op)  # type: ignore[arg-type]
    return result


async def acall(
    fn: Callable[..., Awaitable[T]], *args: Any, deadline: float = 30.0, **kwargs: Any
) -> T:
    """asyncio version of :func:`call`: awaits ``fn(*args, **kwargs)``."""
    target = functools.partial(fn, *args, **kwargs)
    op = retrying(lambda: _once(target), deadline=deadline)
    result: T = await driver.run_async(driver.AsyncFixed(None), op)  # type: ignore[arg-type]
    return result
