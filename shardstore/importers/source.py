"""Connections to the database an import reads from (not the store's), and the errors
they raise in shardstore's terms.

Source reads run in :class:`~shardstore.core.steps.Call` steps on a sync psycopg
connection: under :class:`~shardstore.AsyncStore` the driver runs them in a worker thread,
so the event loop goes on while a batch is fetched."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from ..core import validate
from ..core.executor import translate
from ..core.sql import named_statements
from ..core.steps import Op, Try, Tx
from ..errors import DatabaseUnavailable, ImportRejected, InvalidInput, ShardstoreError
from ..integrations.ids import external_metadata, external_session_id
from .report import ON_ERROR, Progress, Tally
from .writer import Batch, open_session_op

T = TypeVar("T")


@cache
def _statements() -> dict[str, str]:
    return named_statements(resources.files(__package__).joinpath("source.sql").read_text("utf-8"))


def source_query(name: str) -> str:
    """The SQL text of a statement sent to the source database (``source.sql``, parsed
    by :func:`shardstore.core.sql.named_statements`)."""
    return _statements()[name]


def source_error(exc: psycopg.Error, what: str) -> ShardstoreError:
    """A source database error as a shardstore error naming ``what`` was being read: a
    missing table or column, a column of the wrong type, a value that does not parse or a
    missing privilege is ``ImportRejected``, an unreachable server
    ``DatabaseUnavailable``, the rest as the store's own errors are translated."""
    if isinstance(exc, psycopg.ProgrammingError | psycopg.DataError) and not isinstance(
        exc, pgerrors.QueryCanceled
    ):
        # a missing table or column, a column that cannot be cast (42846), a value that
        # does not parse as its type (class 22), a privilege the role lacks
        return ImportRejected(f"source {what}: {exc.diag.message_primary or exc}")
    translated = translate(exc)
    if isinstance(translated, DatabaseUnavailable):
        return DatabaseUnavailable(f"source database: {translated}")
    return type(translated)(f"source {what}: {translated}")


class SourceRun:
    """One import from a source database: its options, checked (``InvalidInput``): the
    batch ``size``, ``on_error`` and the progress ``bar``; its ``tally``; and how each source
    element (a LangGraph thread, a table's row) becomes a session."""

    def __init__(
        self, source_dsn: Any, batch_size: Any, on_error: Any, progress: Any, what: str
    ) -> None:
        self.size = validate.count(batch_size, "batch_size", high=100_000)
        if on_error not in ON_ERROR:
            raise InvalidInput(
                f"on_error must be 'raise' or 'skip', not {validate.shown(on_error)}"
            )
        show = validate.flag(progress, "progress")
        if not isinstance(source_dsn, str) or not source_dsn:
            raise InvalidInput("source_dsn must be a non-empty DSN string")
        self.on_error = on_error
        self.tally = Tally()
        self.bar = Progress(show, what)

    def element_op(self, where: str, op: Op[None]) -> Op[None]:
        """Run ``op`` (one element's import) in a :class:`Try`: its ``ImportRejected``
        stops the run (``on_error="raise"``, the message saying what was kept) or lists
        the element as skipped and goes on."""
        try:
            yield Try(op)
        except ImportRejected as exc:
            if self.on_error == "raise":
                raise self.tally.stopped(exc) from exc
            self.tally.skip(where, exc)

    def session_op(
        self,
        where: str,
        framework: str,
        tenant: str,
        external_id: str,
        fill: Callable[[uuid.UUID, int, Batch], Op[None]],
        subject: str | None = None,
        created: datetime | None = None,
    ) -> Op[None]:
        """Import one element as the session ``external_session_id(framework, tenant,
        external_id)`` in one transaction: opened (created, or found with the same owners,
        holding how many turns), ``fill`` appends what it lacks through the batch, counted
        in the tally when committed."""
        try:
            sid = external_session_id(framework, tenant, external_id)
        except InvalidInput:
            raise ImportRejected(f"{where}: the id cannot name a session") from None
        yield Tx.BEGIN
        metadata = external_metadata(framework, external_id)
        have, existed = yield from open_session_op(where, tenant, subject, sid, metadata, created)
        batch = Batch()
        yield from fill(sid, have, batch)
        yield Tx.COMMIT
        self.tally.add_session(batch.appended, batch.written, existed)


def guarded(what: str, fn: Callable[[], T]) -> T:
    """``fn()`` with psycopg errors raised as :func:`source_error`."""
    try:
        return fn()
    except psycopg.Error as exc:
        raise source_error(exc, what) from exc


def connect(dsn: Any, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection to the source; ``DatabaseUnavailable`` if it cannot be reached,
    ``InvalidInput`` for a DSN that is not one."""
    if not isinstance(dsn, str) or not dsn.strip():
        raise InvalidInput("source_dsn must be a non-empty DSN string")
    validate.text(dsn, "source_dsn", limit=10_000)  # no NUL, no lone surrogate
    try:
        return psycopg.connect(dsn, connect_timeout=10, **kwargs)
    except psycopg.ProgrammingError as exc:  # an unparseable conninfo string
        raise InvalidInput(f"source_dsn is not a valid DSN: {exc}") from None
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        raise DatabaseUnavailable(f"source database unavailable: {reason}") from exc


def identifier(name: Any, what: str, *, qualified: bool = False) -> sql.Identifier:
    """A table (``schema.table`` when ``qualified``) or column name, quoted: the name is
    never spliced into SQL text, so a name shaped like SQL stays a name (that then does
    not exist). Names with a NUL, empty parts or over 63 bytes are refused."""
    validate.text(name, what)
    parts = name.split(".") if qualified else [name]
    if len(parts) > 2:
        raise InvalidInput(f"{what} {name!r:.80} must be 'table' or 'schema.table'")
    for part in parts:
        if not part or len(part.encode("utf-8")) > 63:
            raise InvalidInput(f"{what} {name!r:.80} is not a valid PostgreSQL name")
    return sql.Identifier(*parts)
