"""Transaction-local bindings: run an operation so that every transaction it runs begins
with one statement (a tenant store's ``SET LOCAL shardstore.tenant_id``, see
:func:`shardstore.rls.connect_tenant`).

Why per transaction and not once per connection: on Citus a session-level setting stays on
the coordinator, while ``SET LOCAL`` in a transaction block is sent on to every shard query
of that transaction (docs/scale-out.md). So the binding must be inside each transaction
the operation runs, including the single statements it sends in autocommit.

What the wrapper does, step by step (the operation itself is unchanged):

* a statement outside a transaction (autocommit) runs as ``BEGIN; binding; statement;
  COMMIT``: still one transaction of its own, as before, now bound;
* a transaction the operation opens (``Tx.BEGIN`` on an idle connection) gets the binding
  as its first statement; savepoints (a ``Tx.BEGIN`` inside it) and statements inside it
  need nothing more;
* a ``Try`` child outside a transaction is wrapped the same way;
* an operation that starts inside a transaction (the caller's, or a connection that is not
  in autocommit) runs entirely inside it: the binding is sent once, first.

Failures are the driver's as before: a failed statement rolls back what was opened for it,
and the error reaches the operation at the same ``yield``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .steps import Op, Q, Try, Tx

T = TypeVar("T")

_BEGINS = (Tx.BEGIN, Tx.BEGIN_SNAPSHOT)


def transaction_local(op: Op[T], binding: Q) -> Op[T]:
    """``op`` with ``binding`` run first in every transaction it runs (see the module
    docstring); the result, the errors and the transactions' extent are ``op``'s."""
    if (yield Tx.STATUS):
        yield binding
        return (yield from op)
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = op.send(value) if error is None else op.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            if isinstance(step, Q):
                if (yield Tx.STATUS):
                    value = yield step
                else:
                    yield Tx.BEGIN
                    yield binding
                    value = yield step
                    yield Tx.COMMIT
            elif step in _BEGINS:
                fresh = not (yield Tx.STATUS)
                yield step
                if fresh:
                    yield binding
            elif isinstance(step, Try) and not (yield Tx.STATUS):
                value = yield Try(transaction_local(step.op, binding))
            else:
                value = yield step
        except GeneratorExit:
            op.close()
            raise
        except BaseException as exc:  # the driver's error (already rolled back): op's to handle
            error = exc
