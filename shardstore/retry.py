"""The retry policy: repeat a call while it fails with a retryable error.

Safe for appends that carry idempotency keys (a repeat of an append that did commit returns
the first result with ``duplicate=True``) and for reads. An append without a key may have
committed before its connection broke, so repeating it could store the turn twice: the
stores' ``retry=True`` option refuses such appends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .errors import ShardstoreError

T = TypeVar("T")

FIRST_DELAY = 0.01
MAX_DELAY = 0.5


def call(fn: Callable[..., T], *args: Any, deadline: float = 30.0, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)``; while it raises a ShardstoreError with ``retryable``
    set, wait (10 ms doubling up to 500 ms) and call again, until ``deadline`` seconds have
    passed; then the last error is raised. Other errors are raised at once."""
    give_up = time.monotonic() + deadline
    delay = FIRST_DELAY
    while True:
        try:
            return fn(*args, **kwargs)
        except ShardstoreError as exc:
            if not exc.retryable or time.monotonic() + delay > give_up:
                raise
        time.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)


async def acall(
    fn: Callable[..., Awaitable[T]], *args: Any, deadline: float = 30.0, **kwargs: Any
) -> T:
    """asyncio version of :func:`call`."""
    give_up = time.monotonic() + deadline
    delay = FIRST_DELAY
    while True:
        try:
            return await fn(*args, **kwargs)
        except ShardstoreError as exc:
            if not exc.retryable or time.monotonic() + delay > give_up:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)
