"""The statements of a partition lifecycle, as sans-IO operations on one parent table.

:class:`PartitionSQL` is the interface the runner (:mod:`partition_manager.runner`) and
premake (:mod:`partition_manager.premake`) drive: read the clock and layout, list the
partition tables, create and attach one, detach, finish a detach, retire, drop.
:class:`RangeTable` implements it for any table ``PARTITION BY RANGE`` on a ``timestamptz``
column with generic DDL built through :mod:`psycopg.sql` (identifiers are never pasted
into SQL text). An application with its own SQL for some steps (side effects of creating
or dropping a partition, say) subclasses :class:`RangeTable` and overrides those methods.

Every method returns an operation (:mod:`partition_manager.steps`). Every statement that
takes a lock on the parent waits at most the ``lock_timeout`` it is given and then gives
up, reported as a result (``False`` / ``"timeout"``), never by waiting longer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from psycopg import sql

from .plan import Naming, PartitionBounds, PartitionState
from .steps import Op, Q, StatementFailed, Try, Tx

LOCK_NOT_AVAILABLE = frozenset({"55P03"})
DEFAULT_ORIGIN = datetime(2001, 1, 1, tzinfo=UTC)
LIKE_OPTIONS = (
    "INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE "
    "INCLUDING COMPRESSION"
)


@dataclass(frozen=True, slots=True)
class Layout:
    """The server's clock and the partitioning: partition ``k`` covers
    ``[origin + k * interval, origin + (k + 1) * interval)``."""

    now: datetime
    interval: timedelta
    origin: datetime


@dataclass(frozen=True, slots=True)
class FoundPartition:
    """A partition table as found in the database. ``rows`` is an estimate read without
    touching the table (``pg_class.reltuples``, or the statistics collector's live-row
    count for a table never analysed); ``bytes`` is ``pg_total_relation_size``."""

    name: str
    lower: datetime
    upper: datetime
    state: PartitionState
    rows: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        """The partition as a JSON object (bounds in ISO 8601)."""
        return {
            "name": self.name,
            "lower": self.lower.isoformat(),
            "upper": self.upper.isoformat(),
            "state": self.state.value,
            "rows": self.rows,
            "bytes": self.bytes,
        }


@dataclass(frozen=True, slots=True)
class Listing:
    """Every partition table of the parent, and whether the parent has a DEFAULT partition
    (which makes ``DETACH ... CONCURRENTLY`` impossible)."""

    partitions: list[FoundPartition]
    has_default: bool


class PartitionSQL(Protocol):
    """What the runner needs from one RANGE-partitioned table; each method returns an
    operation. ``schema`` and ``naming`` say where partition tables live and what they are
    called."""

    @property
    def schema(self) -> str:
        """The schema the partition tables are created in."""
        ...

    @property
    def naming(self) -> Naming:
        """How a partition is named from its bounds, and read back from a name."""
        ...

    def qualified(self, name: str) -> str:
        """``schema.name`` as the archive hook gets it."""
        ...

    def layout_op(self) -> Op[Layout]:
        """The server's clock and the partitioning."""
        ...

    def list_op(self, layout: Layout) -> Op[Listing]:
        """Attached partitions (with their detach-pending flag) and standalone tables named
        by :attr:`naming`, sorted by lower bound and name."""
        ...

    def attach_op(self, bounds: PartitionBounds, lock_timeout: timedelta) -> Op[bool]:
        """One attempt: create the standalone table for ``bounds`` (if missing) and attach
        it. True when it is attached (now or before), False when the lock wait timed out."""
        ...

    def detach_op(self, name: str, lock_timeout: timedelta, concurrently: bool) -> Op[str]:
        """One attempt to detach partition ``name``: ``"detached"``, ``"pending"`` (a
        concurrent detach was interrupted: finish it with :meth:`finalize_op`) or
        ``"timeout"`` (nothing done)."""
        ...

    def finalize_op(self, name: str, lock_timeout: timedelta) -> Op[bool]:
        """Finish an interrupted ``DETACH ... CONCURRENTLY`` of ``name``: True when it is no
        longer a partition, False on a lock timeout."""
        ...

    def retire_op(self, name: str, lock_timeout: timedelta) -> Op[str]:
        """Rename the detached table ``name`` to its retired name (so that nothing
        re-attaches it while it is archived) and return that name; a retired name is
        returned as is."""
        ...

    def drop_op(self, retired: str, lock_timeout: timedelta) -> Op[None]:
        """Drop the retired table (nothing when it is gone already)."""
        ...


def ms(wait: timedelta) -> str:
    """A duration as the text ``SET lock_timeout`` takes (whole milliseconds, at least 1)."""
    return f"{max(1, round(wait.total_seconds() * 1000))}ms"


_GET_LOCK_TIMEOUT = "SELECT current_setting('lock_timeout')"
_SET_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, %s)"


def local_lock_timeout_op(wait: timedelta) -> Op[str]:
    """Inside a transaction: set ``lock_timeout`` for the rest of it; returns the value it
    had, for :func:`restore_lock_timeout_op`."""
    (previous,) = yield Q(_GET_LOCK_TIMEOUT, fetch="one")
    yield Q(_SET_LOCK_TIMEOUT, (ms(wait), True), fetch="none")
    return str(previous)


def restore_lock_timeout_op(previous: str, local: bool) -> Op[None]:
    """Give ``lock_timeout`` back its value (for this transaction, or the session)."""
    yield Q(_SET_LOCK_TIMEOUT, (previous, local), fetch="none")


def bounded_op(statement: sql.Composable, lock_timeout: timedelta) -> Op[bool]:
    """Run one DDL ``statement`` in a short transaction that waits at most ``lock_timeout``
    for any lock; False (and nothing done) when that wait timed out."""
    yield Tx.BEGIN
    previous = yield from local_lock_timeout_op(lock_timeout)
    outcome = yield Q(statement, fetch="none", prepare=False, recover=LOCK_NOT_AVAILABLE)
    yield from restore_lock_timeout_op(previous, local=True)
    yield Tx.COMMIT
    return not isinstance(outcome, StatementFailed)


_LIST_ATTACHED = """
SELECT c.relname::text,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\) TO'))[1]
           ::timestamptz,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]
           ::timestamptz,
       i.inhdetachpending,
       pg_total_relation_size(c.oid),
       CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint
            ELSE coalesce(pg_stat_get_live_tuples(c.oid), 0) END,
       pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = to_regclass(quote_ident(%s) || '.' || quote_ident(%s))
"""

_LIST_STANDALONE = """
SELECT c.relname::text, pg_total_relation_size(c.oid),
       CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint
            ELSE coalesce(pg_stat_get_live_tuples(c.oid), 0) END
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %s AND c.relkind = 'r' AND NOT c.relispartition
   AND left(c.relname, %s) = %s
"""

_IS_PARTITION = """
SELECT c.relispartition, i.inhdetachpending
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
        AND i.inhparent = to_regclass(quote_ident(%s) || '.' || quote_ident(%s))
 WHERE n.nspname = %s AND c.relname = %s
"""


@dataclass(frozen=True, slots=True)
class RangeTable:
    """A table ``PARTITION BY RANGE (column)`` on a ``timestamptz`` column, with generic
    DDL: a partition is made as a standalone table ``LIKE`` the parent (its defaults,
    constraints, indexes, storage) with a CHECK matching its bounds, then attached (the CHECK
    lets ATTACH skip its validation scan, and ATTACH takes SHARE UPDATE EXCLUSIVE on the
    parent, so inserts go on). ``interval`` and ``origin`` give the partition bounds;
    ``naming`` defaults to ``Naming(table)``.

    Subclass it to replace some statements with your own (keep each method's contract)."""

    schema: str
    table: str
    column: str
    interval: timedelta | None = None
    origin: datetime = DEFAULT_ORIGIN
    name_base: str | None = None
    like_options: str = LIKE_OPTIONS
    _naming: Naming = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for what in ("schema", "table", "column"):
            value = getattr(self, what)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{what} must be a non-empty string")
        if self.interval is not None and self.interval <= timedelta(0):
            raise ValueError("interval must be positive")
        if self.origin.tzinfo is None:
            raise ValueError("origin must be timezone-aware")
        if not set(self.like_options.split()) <= {"INCLUDING", "EXCLUDING", *_LIKE_WORDS}:
            raise ValueError(f"not LIKE options: {self.like_options!r}")
        object.__setattr__(self, "_naming", Naming(self.name_base or self.table))

    # -- names ------------------------------------------------------------------

    @property
    def naming(self) -> Naming:
        """How this table's partitions are named."""
        return self._naming

    @property
    def parent(self) -> sql.Composable:
        """The parent table as a quoted, schema-qualified identifier."""
        return sql.Identifier(self.schema, self.table)

    def ident(self, name: str) -> sql.Composable:
        """A partition table of this parent as a quoted, schema-qualified identifier."""
        return sql.Identifier(self.schema, name)

    def qualified(self, name: str) -> str:
        """``schema.name`` (unquoted) as the archive hook gets it."""
        return f"{self.schema}.{name}"

    # -- reading ------------------------------------------------------------------

    def layout_op(self) -> Op[Layout]:
        """The server's clock with this table's configured interval and origin."""
        if self.interval is None:
            raise ValueError(f"{self.schema}.{self.table}: no partition interval configured")
        (now,) = yield Q("SELECT now()", fetch="one")
        return Layout(now, self.interval, self.origin)

    def list_op(self, layout: Layout) -> Op[Listing]:
        """Attached partitions with their bounds (read from ``pg_inherits``), standalone
        tables named by :attr:`naming` (bounds from the name), sizes and row estimates."""
        found: list[FoundPartition] = []
        has_default = False
        rows = yield Q(_LIST_ATTACHED, (self.schema, self.table), prepare=False)
        for name, lower, upper, pending, size, tuples, default in rows:
            if default:
                has_default = True
                continue
            if lower is None or upper is None:  # MINVALUE / MAXVALUE: not ours to manage
                continue
            state = PartitionState.DETACH_PENDING if pending else PartitionState.ATTACHED
            found.append(FoundPartition(name, lower, upper, state, int(tuples), int(size)))
        base = self.naming.base
        rows = yield Q(_LIST_STANDALONE, (self.schema, len(base), base), prepare=False)
        for name, size, tuples in rows:
            parsed = self.naming.parse(name)
            if parsed is None:
                continue
            lower, retired = parsed
            state = PartitionState.RETIRED if retired else PartitionState.DETACHED
            found.append(
                FoundPartition(name, lower, lower + layout.interval, state, int(tuples), int(size))
            )
        found.sort(key=lambda p: (p.lower, p.name))
        return Listing(found, has_default)

    def _state_op(self, name: str) -> Op[tuple[bool, bool] | None]:
        """``(is a partition, detach pending)`` of table ``name``; None when missing."""
        row = yield Q(
            _IS_PARTITION, (self.schema, self.table, self.schema, name), fetch="one", prepare=False
        )
        if row is None:
            return None
        return bool(row[0]), bool(row[1])

    # -- premake --------------------------------------------------------------------

    def create_op(self, bounds: PartitionBounds) -> Op[None]:
        """Create the standalone table for ``bounds`` with its bounds CHECK, if missing.
        Locks nothing but the new table (``LIKE`` reads the parent's definition with an
        ACCESS SHARE lock)."""
        name = bounds.name
        state = yield from self._state_op(name)
        if state is not None:
            return
        yield Tx.BEGIN
        made = yield Q(
            sql.SQL("CREATE TABLE {} (LIKE {} " + self.like_options + ")").format(
                self.ident(name), self.parent
            ),
            fetch="none",
            prepare=False,
            recover=frozenset({"42P07", "23505"}),  # made concurrently
        )
        if not isinstance(made, StatementFailed):
            yield Q(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK ({} >= {} AND {} < {})").format(
                    self.ident(name),
                    sql.Identifier(name + "_bounds"),
                    sql.Identifier(self.column),
                    sql.Literal(bounds.lower),
                    sql.Identifier(self.column),
                    sql.Literal(bounds.upper),
                ),
                fetch="none",
                prepare=False,
            )
        yield Tx.COMMIT

    def attach_op(self, bounds: PartitionBounds, lock_timeout: timedelta) -> Op[bool]:
        """Create the standalone table if missing, then ``ATTACH PARTITION`` in a short
        transaction whose lock waits end after ``lock_timeout``. True when attached (now or
        before), False on a lock timeout (the standalone table stays for the next try)."""
        name = bounds.name
        state = yield from self._state_op(name)
        if state is not None and state[0]:
            return True
        if state is None:
            yield from self.create_op(bounds)
        attach = sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})")
        return (
            yield from bounded_op(
                attach.format(
                    self.parent,
                    self.ident(name),
                    sql.Literal(bounds.lower),
                    sql.Literal(bounds.upper),
                ),
                lock_timeout,
            )
        )

    # -- retention ------------------------------------------------------------------

    def detach_op(self, name: str, lock_timeout: timedelta, concurrently: bool) -> Op[str]:
        """``DETACH PARTITION ... CONCURRENTLY`` (``concurrently``: the connection must be
        outside any transaction; it takes SHARE UPDATE EXCLUSIVE, so inserts go on), else a
        plain ``DETACH PARTITION`` in a short transaction (ACCESS EXCLUSIVE on the parent
        for a moment). Either waits at most ``lock_timeout`` for a lock, and gives
        ``lock_timeout`` back its value afterwards, however the statement ends."""
        statement = sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
            self.parent, self.ident(name)
        )
        if not concurrently:
            done = yield from bounded_op(statement, lock_timeout)
            return "detached" if done else "timeout"
        (previous,) = yield Q(_GET_LOCK_TIMEOUT, fetch="one")
        yield Q(_SET_LOCK_TIMEOUT, (ms(lock_timeout), False), fetch="none")
        try:
            outcome = yield Q(
                statement + sql.SQL(" CONCURRENTLY"),
                fetch="none",
                prepare=False,
                recover=LOCK_NOT_AVAILABLE,
            )
        except GeneratorExit:
            raise
        except BaseException:
            yield from cleanup(restore_lock_timeout_op(str(previous), local=False))
            raise
        yield from restore_lock_timeout_op(str(previous), local=False)
        if not isinstance(outcome, StatementFailed):
            return "detached"
        state = yield from self._state_op(name)
        return "pending" if state is not None and state[1] else "timeout"

    def finalize_op(self, name: str, lock_timeout: timedelta) -> Op[bool]:
        """``DETACH PARTITION ... FINALIZE`` in a short transaction waiting at most
        ``lock_timeout``; True when ``name`` is no longer a partition."""
        state = yield from self._state_op(name)
        if state is None or not state[0]:
            return True
        finalize = sql.SQL("ALTER TABLE {} DETACH PARTITION {} FINALIZE")
        return (yield from bounded_op(finalize.format(self.parent, self.ident(name)), lock_timeout))

    def retire_op(self, name: str, lock_timeout: timedelta) -> Op[str]:
        """Rename detached ``name`` to its retired name. Raises ValueError for a name not
        made by :attr:`naming`, or when the table is still a partition or missing; a lock
        timeout raises the driver's error for SQLSTATE 55P03."""
        parsed = self.naming.parse(name)
        if parsed is None:
            raise ValueError(f"not a partition table name of {self.table}: {name!r}")
        lower, retired = parsed
        if retired:
            return name
        new = self.naming.retired(lower)
        state = yield from self._state_op(name)
        if state is None:
            again = yield from self._state_op(new)
            if again is not None:
                return new
            raise ValueError(f"table {self.schema}.{name} does not exist")
        if state[0]:
            raise ValueError(f"{self.schema}.{name} is still a partition of {self.table}")
        taken = yield from self._state_op(new)
        if taken is not None:
            raise ValueError(
                f"{self.schema}.{new} is still waiting to be archived and dropped; "
                "the next run retires this one"
            )
        yield Tx.BEGIN
        previous = yield from local_lock_timeout_op(lock_timeout)
        yield Q(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(self.ident(name), sql.Identifier(new)),
            fetch="none",
            prepare=False,
        )
        yield from restore_lock_timeout_op(previous, local=True)
        yield Tx.COMMIT
        return new

    def drop_op(self, retired: str, lock_timeout: timedelta) -> Op[None]:
        """``DROP TABLE IF EXISTS`` the retired table, waiting at most ``lock_timeout``.
        Raises ValueError for a name that is not a retired one."""
        parsed = self.naming.parse(retired)
        if parsed is None or not parsed[1]:
            raise ValueError(f"only retired tables are dropped, not {retired!r}")
        yield Tx.BEGIN
        previous = yield from local_lock_timeout_op(lock_timeout)
        yield Q(
            sql.SQL("DROP TABLE IF EXISTS {}").format(self.ident(retired)),
            fetch="none",
            prepare=False,
        )
        yield from restore_lock_timeout_op(previous, local=True)
        yield Tx.COMMIT


_LIKE_WORDS = {
    "COMMENTS",
    "COMPRESSION",
    "CONSTRAINTS",
    "DEFAULTS",
    "GENERATED",
    "IDENTITY",
    "INDEXES",
    "STATISTICS",
    "STORAGE",
    "ALL",
}


def cleanup(op: Op[Any]) -> Op[None]:
    """Run a cleanup operation as a ``Try`` child and swallow its failure (the connection may
    be gone; the error that brought us here is the one to report)."""
    try:
        yield Try(op)
    except Exception:
        return
