"""Import from a table holding one row per conversation, its whole history in one JSON
column (``store.import_single_row``, ``shardstore import single-row``).

Accepted shapes of the history column (``jsonb``, ``json``, or text holding JSON): a JSON
array of message objects, or a JSON object whose ``messages_key`` member (default
``"messages"``) is such an array (its other members are ignored). Each element becomes one
turn, in array order. Anything else is refused for that row: NULL, a scalar, an object
without the array, an element that is not an object or that shardstore cannot store
(:func:`shardstore.core.jsoncodec.encode_message`), an element over ``chunk_max_bytes``, text
that is not JSON.

Guarantees:

* Memory: one page of row heads and one batch of elements at a time. The elements are
  produced server-side (``jsonb_array_elements ... WITH ORDINALITY``) and read through a
  named cursor, ``batch_size`` per round trip, so no history is loaded whole on the client.
* Atomic per session: a row is imported in one transaction of the store; a bad element
  rolls the whole row back (nothing half-imported), and with ``on_error="skip"`` the run
  goes on with the next row.
* Resumable: a session already holding k turns gets the elements from index k on, so a
  re-run after a crash (or after the source rows grew) appends exactly the missing turns
  and never one twice. Imported sessions should not get other appends in between.
* Consistent: the source is read in one REPEATABLE READ, READ ONLY transaction.
* Identifiers (table, columns) are quoted, never spliced: hostile names are just names
  that do not exist (``ImportRejected``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from ..core import validate
from ..core.state import StoreState
from ..core.steps import Call, Op
from ..errors import ImportRejected, InvalidInput
from .report import ImportReport, Skipped
from .source import SourceRun, connect, guarded, identifier, source_query
from .writer import Batch, append_batch_op

PAGE = 200  # row heads per round trip
DEFAULT_BATCH = 500  # elements per round trip and per append statement
_CURSOR = "shardstore_import_elements"
_SAVEPOINT = "shardstore_import_row"


@dataclass(frozen=True, slots=True)
class TableSpec:
    """The source table and how to read it, validated and quoted."""

    table: str
    id_column: str
    parts: dict[str, sql.Composable]
    tenant_id: str | None
    messages_key: str


@dataclass(frozen=True, slots=True)
class Head:
    """One source row, without its history."""

    key: Any
    label: str
    tenant: str | None
    subject: str | None
    created: datetime | None


def table_spec(
    table: Any,
    id_column: Any,
    history_column: Any,
    tenant_id: Any,
    tenant_column: Any,
    subject_column: Any,
    created_column: Any,
    messages_key: Any,
) -> TableSpec:
    """Validate the arguments of :func:`import_single_row` (``InvalidInput``)."""
    if (tenant_id is None) == (tenant_column is None):
        raise InvalidInput(
            "give exactly one of tenant_id (one tenant for every row) and "
            "tenant_column (each row's tenant)"
        )
    tenant = validate.optional_text(tenant_id, "tenant_id")

    def column(name: Any, what: str) -> sql.Composable:
        return identifier(name, what)

    parts: dict[str, sql.Composable] = {
        "table": identifier(table, "table", qualified=True),
        "id": column(id_column, "id_column"),
        "history": column(history_column, "history_column"),
        "tenant": sql.SQL("NULL::text")
        if tenant_column is None
        else sql.SQL("{}::text").format(column(tenant_column, "tenant_column")),
        "subject": sql.SQL("NULL::text")
        if subject_column is None
        else sql.SQL("{}::text").format(column(subject_column, "subject_column")),
        "created": sql.SQL("NULL::timestamptz")
        if created_column is None
        else sql.SQL("{}::timestamptz").format(column(created_column, "created_column")),
    }
    key = validate.text(messages_key, "messages_key")
    return TableSpec(table, id_column, parts, tenant, key)


class TableSource:
    """Reads one single-row table in one snapshot: pages of row heads, then one row's
    elements at a time through a named cursor under a savepoint (a row whose history
    cannot be read fails alone)."""

    def __init__(self, dsn: str, spec: TableSpec, cap: int) -> None:
        self.dsn = dsn
        self.spec = spec
        self.cap = cap
        self.conn: psycopg.Connection[Any] | None = None
        self.cursor: Any = None
        self.after: Any = None
        self.first = True
        self.row = ""
        self.expected = 0
        self.in_row = False

    def _sql(self, name: str, **extra: sql.Composable) -> sql.Composed:
        return sql.SQL(source_query(name)).format(**self.spec.parts, **extra)

    def _conn(self) -> psycopg.Connection[Any]:
        assert self.conn is not None, "open() first"
        return self.conn

    def open(self) -> int:
        """Connect, start the snapshot, check the table and columns; returns how many rows
        have a NULL id (they cannot be imported)."""
        self.conn = connect(self.dsn)
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True
        conn = self.conn
        what = f"table {self.spec.table!r}"

        def check() -> int:
            conn.execute("SET TIME ZONE 'UTC'")
            conn.execute(self._sql("source_check"))
            row = conn.execute(self._sql("source_null_ids")).fetchone()
            return int(row[0]) if row else 0

        return guarded(what, check)

    def heads(self) -> list[Head]:
        """The next page of rows in id order; empty at the end."""
        conn = self._conn()
        if self.first:
            after: sql.Composable = sql.SQL("")
        else:
            after = sql.SQL("AND {} > %(after)s").format(self.spec.parts["id"])
        statement = self._sql("source_heads", after=after)
        rows = guarded(
            f"table {self.spec.table!r}",
            lambda: conn.execute(statement, {"after": self.after, "limit": PAGE}).fetchall(),
        )
        if rows:
            self.first = False
            self.after = rows[-1][0]
        return [Head(*row) for row in rows]

    def start(self, head: Head, skip: int, where: str) -> int:
        """Check the row's shape and open its elements from index ``skip``; returns the
        array's length. ``ImportRejected`` for a history that is not an accepted shape."""
        conn = self._conn()
        self.row = where
        self.expected = skip
        conn.execute(f"SAVEPOINT {_SAVEPOINT}")
        self.in_row = True
        key = self.spec.messages_key
        try:
            shape = conn.execute(self._sql("source_shape"), {"id": head.key, "key": key})
            kind, inner, length = shape.fetchone() or (None, None, None)
            if length is None:
                raise ImportRejected(f"{where}: {_shape_problem(kind, inner, key)}")
            if length > skip:
                self.cursor = conn.cursor(name=_CURSOR)
                params = {"id": head.key, "key": key, "skip": skip, "cap": 2 * self.cap}
                self.cursor.execute(self._sql("source_elements"), params)
            return int(length)
        except psycopg.Error as exc:
            self._abandon()
            raise ImportRejected(
                f"{where}: the history cannot be read as JSON ({_reason(exc)})"
            ) from exc
        except BaseException:
            self._abandon()
            raise

    def fetch(self, n: int) -> list[tuple[int, str]]:
        """The next ``n`` elements (index, JSON text) of the open row; empty at its end.
        ``ImportRejected`` for an element over the size cap."""
        if self.cursor is None:
            return []
        try:
            rows = self.cursor.fetchmany(n)
        except psycopg.Error as exc:
            self._abandon()
            raise ImportRejected(
                f"{self.row}: the history cannot be read ({_reason(exc)})"
            ) from exc
        out = []
        for index, text, size in rows:
            if index != self.expected:  # never expected: the elements come in array order
                self._abandon()
                raise ImportRejected(f"{self.row}: element {self.expected} came out of order")
            self.expected += 1
            if text is None:
                self._abandon()
                raise ImportRejected(
                    f"{self.row} element {index}: {size} bytes of JSON, over the per-turn "
                    f"cap of {self.cap} bytes (chunk_max_bytes)"
                )
            out.append((int(index), text))
        return out

    def finish(self) -> None:
        """Close the row's cursor and release its savepoint."""
        conn = self._conn()
        if self.cursor is not None:
            cursor, self.cursor = self.cursor, None
            cursor.close()
        conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        self.in_row = False

    def abandon(self) -> None:
        """Undo the row's reads after a failure, keeping the snapshot for the next row
        (idempotent)."""
        self._abandon()

    def _abandon(self) -> None:
        self.cursor = None
        if not self.in_row:
            return
        self.in_row = False
        conn = self.conn
        if conn is not None and not conn.closed:
            try:
                conn.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
                conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
            except psycopg.Error:
                conn.close()

    def close(self) -> None:
        """End the snapshot and disconnect (idempotent)."""
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()


def _reason(exc: psycopg.Error) -> str:
    diag = getattr(exc, "diag", None)
    return (diag.message_primary if diag is not None else None) or str(exc)


def _shape_problem(kind: str | None, inner: str | None, key: str) -> str:
    if kind is None:
        return "the history is NULL"
    if kind == "object":
        if inner is None:
            return f"the history is an object without a {key!r} member"
        return f"the history's {key!r} member is a JSON {inner}, not an array"
    return f"the history is a JSON {kind}, not an array (or an object holding {key!r})"


def parse_element(text: str, where: str) -> dict[str, Any]:
    """One element's JSON text as a message dict; ``ImportRejected`` for anything else
    (nesting too deep to decode, an int with more digits than Python reads, not an
    object): never another exception, so ``on_error="skip"`` can skip the row."""
    try:
        value = json.loads(text)
    except RecursionError:  # the decoder recurses once per level; jsonb nests far deeper
        raise ImportRejected(f"{where}: the message nests too deeply") from None
    except ValueError as exc:  # an int over Python's digit limit (jsonb holds any number)
        raise ImportRejected(f"{where}: {exc}") from None
    if type(value) is not dict:
        kind = "array" if isinstance(value, list) else type(value).__name__
        raise ImportRejected(f"{where}: a {kind}, not a message object")
    return value


def _row_op(
    store: StoreState, source: TableSource, head: Head, spec: TableSpec, where: str, run: SourceRun
) -> Op[None]:
    """Import one row in one transaction of the store."""
    tenant = spec.tenant_id if spec.tenant_id is not None else head.tenant
    if tenant is None:
        raise ImportRejected(f"{where}: the tenant column is NULL")
    ctx = store.ctx

    def fill(sid: uuid.UUID, have: int, batch: Batch) -> Op[None]:
        try:
            length = yield Call(source.start, (head, have, where))
            run.bar.expect(length - have)
            while True:
                elements = yield Call(source.fetch, (run.size,))
                if not elements:
                    break
                for index, text in elements:
                    at = f"{where} element {index}"
                    batch.add(ctx, parse_element(text, at), at)
                yield from append_batch_op(ctx, sid, batch, run.bar)
            yield Call(source.finish)
        except Exception:
            yield Call(source.abandon)
            raise

    framework = f"table:{spec.table}"
    yield from run.session_op(
        where, framework, tenant, head.label, fill, head.subject, head.created
    )


def import_single_row(
    store: StoreState,
    source_dsn: str,
    table: str,
    *,
    id_column: str,
    history_column: str,
    tenant_id: str | None = None,
    tenant_column: str | None = None,
    subject_column: str | None = None,
    created_column: str | None = None,
    messages_key: str = "messages",
    batch_size: int = DEFAULT_BATCH,
    on_error: str = "raise",
    progress: bool = False,
) -> Op[ImportReport]:
    """Import every row of ``table`` in the database ``source_dsn`` as one session, its
    ``history_column`` (a JSON array of messages, or an object holding one under
    ``messages_key``) appended in order, ``batch_size`` elements per round trip.

    The session id is the row's id when that is a UUID, else
    ``integrations.ids.external_session_id("table:<table>", tenant, id)``; the metadata
    records ``{"framework": "table:<table>", "external_id": id}``. The tenant is
    ``tenant_id`` or each row's ``tenant_column``; ``subject_column`` and
    ``created_column`` (the session's ``created_at``) are optional. Turns are stamped at
    import time.

    Each row is one transaction: a row that cannot be imported (wrong shape, a bad or
    oversize element, a session id taken by other owners) raises ``ImportRejected`` naming
    the row and element, with nothing of it written; sessions imported before it stay. With
    ``on_error="skip"`` such rows are listed in the report's ``skipped`` instead and the
    run goes on. A re-run resumes each session after the turns it already holds, so a
    crashed run is completed without a duplicate. The id column must be unique and
    orderable; rows with a NULL id are reported as skipped. A missing table or column:
    ``ImportRejected``; an unreachable source: ``DatabaseUnavailable``. ``progress`` draws
    a bar of turns on stderr. Under asyncio the source is read in a worker thread."""
    spec = table_spec(
        table,
        id_column,
        history_column,
        tenant_id,
        tenant_column,
        subject_column,
        created_column,
        messages_key,
    )
    run = SourceRun(source_dsn, batch_size, on_error, progress, f"importing {spec.table}")
    source = TableSource(source_dsn, spec, store.ctx.settings.chunk_max_bytes)
    try:
        null_ids = yield Call(source.open)
        if null_ids:
            run.tally.skipped.append(
                Skipped(f"table {spec.table!r}", f"{null_ids} rows have a NULL {spec.id_column}")
            )
        previous: Any = _NONE
        while True:
            heads: Sequence[Head] = yield Call(source.heads)
            if not heads:
                break
            for head in heads:
                where = f"row {spec.id_column}={head.label!r}"
                if head.key == previous:
                    run.tally.skipped.append(
                        Skipped(where, f"another row has the same {spec.id_column}")
                    )
                    continue
                previous = head.key
                yield from run.element_op(where, _row_op(store, source, head, spec, where, run))
    finally:
        source.close()
        run.bar.close()
    return run.tally.report()


_NONE = uuid.uuid4()  # a sentinel no id equals
