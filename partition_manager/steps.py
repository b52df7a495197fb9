"""The sans-IO step protocol: an operation is a generator that yields steps and receives
their results, so that one piece of logic runs on a sync or an asyncio connection alike.

This is the lowest layer of the tree (partition_manager's operations and shardstore's all
speak it); :mod:`partition_manager.driver` is the one driver that runs it.

Steps and what the driver sends back:

* :class:`Q` — one statement; nothing, one row or all rows (rows are named tuples only
  when the driver was asked for them; see :mod:`shardstore.core.rows`).
* :class:`Tx` — ``BEGIN`` / ``BEGIN_SNAPSHOT`` open a transaction (a savepoint when one is
  already open, the caller's included), ``COMMIT`` closes the innermost one the operation
  opened; ``STATUS`` sends back whether the connection is inside a transaction block.
* :class:`Try` — run a nested operation; its result comes back, or its error is raised at
  this ``yield`` for the operation to catch. Whatever the child wrote is rolled back on
  failure (to a savepoint when the connection is in a transaction), and the parent's
  transaction stays usable.
* :class:`Sleep` — wait (``time.sleep`` / ``asyncio.sleep``): retries and backoff.
* :class:`Call` — run user code or a model: a sync driver calls it; the asyncio driver
  awaits it when it returns an awaitable (a coroutine function), else runs it in a worker
  thread so the event loop goes on (``inline=True``: cheap loop-bound work, called directly).
* :class:`Emit` — items a streaming operation hands to its caller as they come.

Errors: a failed statement rolls back every transaction level the current operation (or
``Try`` child) opened, is translated by the driver's translator and raised at the ``yield``;
an operation may catch it (it then stands outside its own transactions). An exception from
a :class:`Call` is raised at the ``yield`` unchanged, with transactions untouched.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Q:
    """One statement. ``fetch`` says what comes back: nothing, one row or all rows.
    ``prepare=False`` keeps a statement unprepared so that it is planned with its parameter
    values (partition pruning at plan time). ``recover``: SQLSTATEs after which the
    operation gets a :class:`StatementFailed` back instead of an error (inside a
    transaction the statement runs under a savepoint, so only it is undone).
    ``named``: rows come back as named tuples (read by column name)."""

    sql: Any
    params: Sequence[Any] | Mapping[str, Any] | None = None
    fetch: Literal["none", "one", "all"] = "all"
    prepare: bool | None = None
    recover: frozenset[str] = frozenset()
    named: bool = False


@dataclass(frozen=True, slots=True)
class StatementFailed:
    """Sent back for a :class:`Q` whose error was in its ``recover`` set."""

    sqlstate: str


class Tx(enum.Enum):
    """Transaction markers. BEGIN nests as a savepoint inside an open transaction."""

    BEGIN = "begin"
    BEGIN_SNAPSHOT = "begin_snapshot"  # repeatable read, read only (when not nested)
    COMMIT = "commit"
    STATUS = "status"  # sends back True when the connection is inside a transaction block


@dataclass(frozen=True, slots=True)
class Try:
    """Run ``op`` nested; its result is sent back, or its error raised at this yield."""

    op: Generator[Any, Any, Any]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait this many seconds without holding the event loop."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Call:
    """User code or a model between statements; its return value is sent back."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    inline: bool = False


@dataclass(frozen=True, slots=True)
class Emit:
    """Items produced by a streaming operation, handed to the caller as they come."""

    items: Sequence[Any]


Step = Q | Tx | Try | Sleep | Call | Emit
Op = Generator[Step, Any, T]


def relay(op: Op[T], on_emit: Callable[[Sequence[Any]], Op[None]]) -> Op[T]:
    """Run a streaming operation inside this one and return its result: every step but
    :class:`Emit` passes through to the driver, and what it emits goes to
    ``on_emit(items)``, an operation run here. An exception the driver or ``on_emit`` raises
    goes into the streaming operation, which may handle it."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = op.send(value) if error is None else op.throw(error)
        except StopIteration as stop:
            result: T = stop.value
            return result
        value, error = None, None
        if isinstance(step, Emit):
            try:
                yield from on_emit(step.items)
            except BaseException as exc:
                error = exc
            continue
        try:
            value = yield step
        except BaseException as exc:  # raised into the child, which may handle it
            error = exc


def collect(op: Op[Any]) -> Op[list[Any]]:
    """Run a streaming operation inside this one and return what it emits, as a list."""
    items: list[Any] = []

    def keep(batch: Sequence[Any]) -> Op[None]:
        items.extend(batch)
        yield from ()

    yield from relay(op, keep)
    return items
