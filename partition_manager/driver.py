"""The one driver of the step protocol (:mod:`partition_manager.steps`), sync and asyncio.

The protocol logic (transactions and savepoints, ``Try``, ``recover``, errors raised back
into the operation) is written once, in :func:`_drive`, against an I/O object whose methods
are coroutines. The asyncio flavour awaits psycopg's async connection; the sync flavour's
coroutines never suspend, so :func:`_finish` runs them to completion with a single
``send(None)``: no event loop, no thread, and no second copy of the logic.

A driver takes its connection from a *source* (``acquire()`` / ``release(conn)``; a plain
connection is its own source) at the first statement and gives it back when the operation
ends. A connection that breaks outside any transaction is given back at once, so an
operation that retries (``Try`` + ``Sleep``) goes on with a fresh one from a pool.

A source may name a *prologue* (its ``prologue`` attribute, a :class:`Q`): a statement run
first in every transaction the driver runs on it, in the same round trip as the statement
it precedes (a pipeline). A tenant store's prologue binds its tenant for that transaction
only (``set_config(..., true)``), so that nothing is left on a connection that a
transaction-mode pooler hands to another client next. A statement outside a transaction
block shares the server's implicit transaction with the prologue (see
:func:`_with_prologue`); a transaction block (the operation's or a caller's) runs it
before its first statement, and again after a rollback to a savepoint (which undoes it).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, Generic, Protocol, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from .steps import Call, Emit, Op, Q, Sleep, StatementFailed, Try, Tx

T = TypeVar("T")
C = TypeVar("C")
Translate = Callable[[psycopg.Error], BaseException]


def keep(exc: psycopg.Error) -> BaseException:
    """The default translator: driver errors reach the operation as they are."""
    return exc


class Source(Protocol[C]):
    """Where a driver gets its connection from (a pool, or one connection)."""

    def acquire(self) -> C:
        """A connection for one operation, outside any transaction of another."""
        ...

    def release(self, conn: C) -> None:
        """Take back a connection :meth:`acquire` gave (broken ones included)."""
        ...


class AsyncSource(Protocol[C]):
    """asyncio version of :class:`Source`."""

    async def acquire(self) -> C:
        """As :meth:`Source.acquire`."""
        ...

    async def release(self, conn: C) -> None:
        """As :meth:`Source.release`."""
        ...


class Fixed(Generic[C]):
    """One connection as a source: every operation runs on it."""

    def __init__(self, conn: C) -> None:
        self.conn = conn

    def acquire(self) -> C:
        """The one connection, every time."""
        return self.conn

    def release(self, conn: C) -> None:
        """Nothing: the connection stays the caller's."""


class AsyncFixed(Generic[C]):
    """One asyncio connection as a source."""

    def __init__(self, conn: C) -> None:
        self.conn = conn

    async def acquire(self) -> C:
        """The one connection, every time."""
        return self.conn

    async def release(self, conn: C) -> None:
        """Nothing: the connection stays the caller's."""


class _Done:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _in_transaction(conn: Any) -> bool:
    if conn is None:  # an operation that needs no database (e.g. a retried user call)
        return False
    return not conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE


def _broken(conn: Any) -> bool:
    return bool(conn.closed or getattr(conn, "broken", False))


def _in_block(conn: Any) -> bool:
    return bool(conn.info.transaction_status == TransactionStatus.INTRANS)


def _outside_block(conn: Any) -> bool:
    return bool(conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE)


def _failed_block(conn: Any) -> bool:
    return bool(conn.info.transaction_status == TransactionStatus.INERROR)


_BEGIN = Q("BEGIN", prepare=False)
_COMMIT = Q("COMMIT", prepare=False)
_BLOCK = (_BEGIN.sql, _COMMIT.sql)


def _with_prologue(prologue: Q, q: Q, block: bool) -> list[Q]:
    """The statements that run ``q`` after a source's prologue, sent in one pipeline (one
    round trip, one Sync): the prologue's setting is then in force for ``q``, in ``q``'s
    transaction and no other. Outside a transaction block (autocommit) the two share the
    implicit transaction the server opens for the statements before a Sync; ``block``
    makes it an explicit one instead (``BEGIN ... COMMIT`` in the same pipeline), for a
    prologue that must run in a transaction block (on Citus only then does a ``SET LOCAL``
    reach the shards). Inside a transaction block (the operation's or a caller's) the
    prologue runs first in it."""
    return [_BEGIN, prologue, q, _COMMIT] if block else [prologue, q]


def _prologue(source: Any) -> tuple[Q | None, bool]:
    """The statement ``source`` wants first in every transaction, if any, and whether a
    statement outside a transaction runs with it in an explicit transaction block."""
    first = getattr(source, "prologue", None)
    if not isinstance(first, Q):
        return None, False
    return first, bool(getattr(source, "prologue_in_block", False))


_S = TypeVar("_S")
_C = TypeVar("_C")


class _Held(Generic[_S, _C]):
    """What a driver holds: its source, the connection it acquired (None until a step needs
    one), the open transaction blocks, the source's prologue, and whether the open block
    has run that prologue."""

    def __init__(self, source: _S) -> None:
        self.source = source
        self.conn: _C | None = None
        self.stack: list[Any] = []
        self.prologue, self.prologue_in_block = _prologue(source)
        self.primed = False


class _SyncIO(_Held[Source[psycopg.Connection[Any]], psycopg.Connection[Any]]):
    """Steps on sync psycopg connections; coroutines that never suspend."""

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            self.conn = self.source.acquire()
        return self.conn

    async def execute(self, q: Q) -> Any:
        conn = self._connection()
        cur: Any = conn.cursor(row_factory=dict_row) if q.named else conn.cursor()
        if self.prologue is None or (self.primed and _in_block(conn)):
            cur.execute(q.sql, q.params, prepare=q.prepare)
        else:
            block = self.prologue_in_block and _outside_block(conn)
            try:
                with conn.pipeline():
                    for step in _with_prologue(self.prologue, q, block):
                        # the cursor keeps the last result it ran: the prologue's, then q's
                        (conn if step.sql in _BLOCK else cur).execute(
                            step.sql, step.params, prepare=step.prepare
                        )
            except psycopg.Error:
                if block and _failed_block(conn):
                    conn.execute("ROLLBACK")
                raise
            self.primed = _in_block(conn)
        if q.fetch == "one":
            return cur.fetchone()
        return cur.fetchall() if q.fetch == "all" else None

    async def in_transaction(self) -> bool:
        return _in_transaction(self._connection())

    async def begin(self, snapshot: bool) -> None:
        conn = self._connection()
        fresh = conn.info.transaction_status == TransactionStatus.IDLE
        if fresh and not snapshot and not conn.autocommit:
            # a caller's connection between its transactions: begin the one its next
            # statement would begin, so that this block is a savepoint in it and the
            # caller's commit or rollback decides (a psycopg transaction block opened on
            # an idle connection would commit by itself)
            conn.execute("SELECT 1")
        tx = conn.transaction()
        tx.__enter__()
        self.stack.append(tx)
        if fresh:
            self.primed = False
        if snapshot and fresh:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    async def end(self, commit: bool) -> None:
        tx = self.stack.pop()
        if commit:
            tx.__exit__(None, None, None)
        else:
            self.primed = False  # a rollback to a savepoint also undoes what the prologue set
            tx.__exit__(psycopg.Rollback, psycopg.Rollback(), None)

    async def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def call(self, step: Call) -> Any:
        result = step.fn(*step.args)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return result

    async def drop_if_broken(self) -> None:
        if self.conn is not None and _broken(self.conn):
            self.stack.clear()
            conn, self.conn = self.conn, None
            self.source.release(conn)

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            self.source.release(conn)


class _AsyncIO(_Held[AsyncSource[psycopg.AsyncConnection[Any]], psycopg.AsyncConnection[Any]]):
    """Steps on asyncio psycopg connections."""

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is None:
            self.conn = await self.source.acquire()
        return self.conn

    async def execute(self, q: Q) -> Any:
        conn = await self._connection()
        cur: Any = conn.cursor(row_factory=dict_row) if q.named else conn.cursor()
        if self.prologue is None or (self.primed and _in_block(conn)):
            await cur.execute(q.sql, q.params, prepare=q.prepare)
        else:  # as _SyncIO.execute
            block = self.prologue_in_block and _outside_block(conn)
            try:
                async with conn.pipeline():
                    for step in _with_prologue(self.prologue, q, block):
                        await (conn if step.sql in _BLOCK else cur).execute(
                            step.sql, step.params, prepare=step.prepare
                        )
            except psycopg.Error:
                if block and _failed_block(conn):
                    await conn.execute("ROLLBACK")
                raise
            self.primed = _in_block(conn)
        if q.fetch == "one":
            return await cur.fetchone()
        return await cur.fetchall() if q.fetch == "all" else None

    async def in_transaction(self) -> bool:
        return _in_transaction(await self._connection())

    async def begin(self, snapshot: bool) -> None:
        conn = await self._connection()
        fresh = conn.info.transaction_status == TransactionStatus.IDLE
        if fresh and not snapshot and not conn.autocommit:
            await conn.execute("SELECT 1")  # as in _SyncIO.begin
        tx = conn.transaction()
        await tx.__aenter__()
        self.stack.append(tx)
        if fresh:
            self.primed = False
        if snapshot and fresh:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    async def end(self, commit: bool) -> None:
        tx = self.stack.pop()
        if commit:
            await tx.__aexit__(None, None, None)
        else:
            self.primed = False  # as _SyncIO.end
            await tx.__aexit__(psycopg.Rollback, psycopg.Rollback(), None)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def call(self, step: Call) -> Any:
        if step.inline or inspect.iscoroutinefunction(step.fn):
            result = step.fn(*step.args)
        else:
            result = await asyncio.to_thread(step.fn, *step.args)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def drop_if_broken(self) -> None:
        if self.conn is not None and _broken(self.conn):
            self.stack.clear()
            conn, self.conn = self.conn, None
            await self.source.release(conn)

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await self.source.release(conn)


async def _awaited(value: Awaitable[T]) -> T:
    return await value


IO = _SyncIO | _AsyncIO


async def _unwind(io: IO, base: int) -> None:
    """Roll back every transaction level above ``base`` (the connection may be gone: the
    error that got us here is the one to report)."""
    while io.stack and len(io.stack) > base:
        try:
            await io.end(commit=False)
        except Exception:
            await io.drop_if_broken()


async def _statement(io: IO, q: Q) -> Any:
    if not q.recover:
        return await io.execute(q)
    guarded = await io.in_transaction()
    if guarded:  # a failure must undo only this statement, not the open transaction
        await io.begin(snapshot=False)
    try:
        value = await io.execute(q)
    except psycopg.Error as exc:
        if guarded:
            await io.end(commit=False)
        if exc.sqlstate in q.recover:
            return StatementFailed(exc.sqlstate or "")
        raise
    if guarded:
        await io.end(commit=True)
    return value


class ProtocolError(RuntimeError):
    """An operation broke the step protocol (a bug in the operation, never bad input)."""


def _translated(exc: psycopg.Error, translate: Translate) -> BaseException:
    """The error an operation sees for a driver error (the driver error as its cause)."""
    error = translate(exc)
    if error is not exc:
        error.__cause__ = exc
    return error


class _Resume:
    """Where the plain-statement loop (:func:`_plain_statements`) stopped, for :func:`_drive`
    to go on from: the step the operation yielded and is waiting on, or an error to raise
    into it."""

    __slots__ = ("error", "step")

    def __init__(self, step: Any = None, error: BaseException | None = None) -> None:
        self.step = step
        self.error = error


async def _drive(
    io: IO, op: Op[Any], translate: Translate, resume: _Resume | None = None
) -> AsyncGenerator[Any, Any]:
    """Run ``op``: yields what it emits, and last a _Done with its result. With ``resume``,
    ``op`` has already started (see :func:`_plain_statements`)."""
    base = len(io.stack)
    value: Any = None
    error: BaseException | None = None if resume is None else resume.error
    pending: Any = None if resume is None else resume.step
    try:
        while True:
            try:
                if pending is not None:
                    step, pending = pending, None
                else:
                    step = op.send(value) if error is None else op.throw(error)
            except StopIteration as stop:
                if len(io.stack) > base:
                    raise ProtocolError("operation ended inside a transaction it opened") from None
                yield _Done(stop.value)
                return
            value, error = None, None
            if isinstance(step, Emit):
                yield step  # whole: the outermost pump hands its items out one by one
                continue
            if step is Tx.COMMIT and len(io.stack) <= base:
                raise ProtocolError("Tx.COMMIT without a Tx.BEGIN of this operation")
            try:
                if isinstance(step, Q):
                    value = await _statement(io, step)
                elif step is Tx.COMMIT:
                    await io.end(commit=True)
                elif step is Tx.BEGIN or step is Tx.BEGIN_SNAPSHOT:
                    await io.begin(step is Tx.BEGIN_SNAPSHOT)
                elif step is Tx.STATUS:
                    value = await io.in_transaction()
                elif isinstance(step, Try):
                    guarded = await io.in_transaction()
                    if guarded:  # the child's failure must leave this transaction usable
                        await io.begin(snapshot=False)
                    value = yield _Nested(step.op, guarded)
                elif isinstance(step, Sleep):
                    await io.sleep(step.seconds)
                elif isinstance(step, Call):
                    value = await io.call(step)
                else:
                    raise ProtocolError(f"not a step: {step!r}")
            except psycopg.Error as exc:
                await _unwind(io, base)
                await io.drop_if_broken()
                error = _translated(exc, translate)
            except (GeneratorExit, ProtocolError):
                raise
            except _ChildFailed as failed:
                error = failed.error
            except BaseException as exc:
                error = exc
    except BaseException:
        await _unwind(io, base)
        op.close()
        raise


class _Nested:
    """Internal: a Try child for :func:`_run_tree` to run (keeps the stack of drives flat,
    so a retry loop nests no deeper than one level)."""

    __slots__ = ("guarded", "op")

    def __init__(self, op: Op[Any], guarded: bool) -> None:
        self.op = op
        self.guarded = guarded


class _ChildFailed(Exception):
    """Internal: carries a Try child's error to its parent's drive."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


async def _run_tree(
    io: IO, op: Op[Any], translate: Translate, resume: _Resume | None = None
) -> AsyncGenerator[Any, None]:
    """Run ``op`` and its ``Try`` children; yields emitted items and finally the top
    operation's _Done."""
    stack: list[tuple[AsyncGenerator[Any, Any], bool]] = [
        (_drive(io, op, translate, resume), False)
    ]
    send: Any = None
    throw: BaseException | None = None
    try:
        while stack:
            gen, guarded = stack[-1]
            try:
                if throw is not None:
                    item = await gen.athrow(throw)
                else:
                    item = await gen.asend(send)
            except BaseException as exc:
                stack.pop()
                if not stack or isinstance(exc, GeneratorExit | ProtocolError):
                    raise
                if guarded:
                    await _unwind(io, len(io.stack) - 1)
                send, throw = None, _ChildFailed(exc)
                continue
            send, throw = None, None
            if isinstance(item, _Nested):
                stack.append((_drive(io, item.op, translate), item.guarded))
            elif isinstance(item, _Done):
                stack.pop()
                await gen.aclose()
                if not stack:
                    yield item
                    return
                if guarded:
                    await io.end(commit=True)
                send = item.value
            else:
                yield item
    finally:
        for gen, _guarded in reversed(stack):
            await gen.aclose()


def _finish(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the sync I/O) to its end."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a sync step suspended")


def _sync_io(source: Any) -> _SyncIO:
    return _SyncIO(Fixed(source) if isinstance(source, psycopg.Connection) else source)


def _async_io(source: Any) -> _AsyncIO:
    return _AsyncIO(AsyncFixed(source) if isinstance(source, psycopg.AsyncConnection) else source)


def _sync_items(
    io: _SyncIO, op: Op[Any], translate: Translate, resume: _Resume | None = None
) -> Iterator[Any]:
    """What ``op`` emits (``Emit`` steps, whole), then its _Done; the connection goes back
    however it ends."""
    tree = _run_tree(io, op, translate, resume)
    try:
        while True:
            try:
                yield _finish(tree.asend(None))
            except StopAsyncIteration:
                return
    finally:
        _finish(tree.aclose())
        _finish(io.close())


async def _plain_statements(io: IO, op: Op[Any], translate: Translate) -> _Done | _Resume:
    """Run ``op`` while it yields plain statements outside any transaction of its own.

    Most calls are one or two such statements (an append, a tail), and the general driver
    (:func:`_run_tree` over :func:`_drive`: two layers of async generators) costs ~15 us of
    CPU per call on top of psycopg's ~32 us for a one-row statement. This loop does what
    :func:`_drive` does for those steps (a ``recover`` statement outside a transaction needs
    no savepoint; an error is translated and raised into the operation). At the first other
    step, or at an error, it hands over (``_Resume``) without running it; when the operation
    ends here, the connection goes back here. One coroutine for both drivers: the sync one
    runs it with :func:`_finish` (its I/O never suspends), the asyncio one awaits it."""
    value: Any = None
    try:
        while True:
            try:
                step = op.send(value)
            except StopIteration as stop:
                await io.close()
                return _Done(stop.value)
            if type(step) is not Q:
                return _Resume(step=step)
            if step.recover and await io.in_transaction():
                return _Resume(step=step)  # it needs _statement's savepoint
            try:
                value = await io.execute(step)
            except psycopg.Error as exc:
                if exc.sqlstate in step.recover:
                    value = StatementFailed(exc.sqlstate or "")
                    continue
                await io.drop_if_broken()
                return _Resume(error=_translated(exc, translate))
            except GeneratorExit:
                raise
            except BaseException as exc:  # as _drive: raised into the operation
                return _Resume(error=exc)
    except BaseException:
        op.close()
        await io.close()
        raise


def _result(item: Any) -> Any:
    if isinstance(item, _Done):
        return item.value
    raise ProtocolError("operation ended without a result")


def run_sync(
    source: Source[psycopg.Connection[Any]] | psycopg.Connection[Any],
    op: Op[T],
    translate: Translate = keep,
) -> T:
    """Run an operation to completion on a sync source and return its result."""
    io = _sync_io(source)
    resume = _finish(_plain_statements(io, op, translate))
    if isinstance(resume, _Done):
        return resume.value  # type: ignore[no-any-return]
    items = _sync_items(io, op, translate, resume)
    try:
        for item in items:
            if isinstance(item, _Done):
                return item.value  # type: ignore[no-any-return]
    finally:
        items.close()  # type: ignore[attr-defined]
    return _result(None)  # type: ignore[no-any-return]


def stream_sync(
    source: Source[psycopg.Connection[Any]] | psycopg.Connection[Any],
    op: Op[Any],
    translate: Translate = keep,
) -> Iterator[Any]:
    """Run a streaming operation on a sync source, yielding what it emits."""
    for item in _sync_items(_sync_io(source), op, translate):
        if isinstance(item, _Done):
            return
        yield from item.items


async def _async_items(
    io: _AsyncIO, op: Op[Any], translate: Translate, resume: _Resume | None = None
) -> AsyncIterator[Any]:
    tree = _run_tree(io, op, translate, resume)
    try:
        async for item in tree:
            yield item
    finally:
        await tree.aclose()
        await io.close()


async def run_async(
    source: AsyncSource[psycopg.AsyncConnection[Any]] | psycopg.AsyncConnection[Any],
    op: Op[T],
    translate: Translate = keep,
) -> T:
    """Run an operation to completion on an asyncio source and return its result."""
    io = _async_io(source)
    resume = await _plain_statements(io, op, translate)
    if isinstance(resume, _Done):
        return resume.value  # type: ignore[no-any-return]
    items = _async_items(io, op, translate, resume)
    done: Any = None
    try:
        async for item in items:
            if isinstance(item, _Done):
                done = item
                break
    finally:
        await items.aclose()  # type: ignore[attr-defined]
    return _result(done)  # type: ignore[no-any-return]


async def stream_async(
    source: AsyncSource[psycopg.AsyncConnection[Any]] | psycopg.AsyncConnection[Any],
    op: Op[Any],
    translate: Translate = keep,
) -> AsyncIterator[Any]:
    """Run a streaming operation on an asyncio source, yielding what it emits."""
    items = _async_items(_async_io(source), op, translate)
    try:
        async for item in items:
            if isinstance(item, _Done):
                return
            for value in item.items:
                yield value
    finally:
        await items.aclose()  # type: ignore[attr-defined]
