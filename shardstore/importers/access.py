"""The human-readable side of an export (``export_sessions(..., report=FILE)``;
``shardstore export --subject S --report FILE.md``): a Markdown summary of what the
machine-readable JSONL holds. For a subject it is an access report: every record kind
counted, the rows every session table a purge covers holds of the subject's live sessions
(read from the table registry, so a table a feature adds later is listed with no change
here), the sessions, and the current facts.

Every value from the database is shown escaped (``|``, newlines, control characters and
lone surrogates cannot break the table) and cut to :data:`CELL` characters; the sessions
and facts are listed up to :data:`LISTED` each (the count says how many there are), so
the report's memory does not grow with the export."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg import sql

from ..core.sql import query
from ..core.steps import Op, Q
from ..encryption.envelope import is_sealed
from ..models import SessionInfo
from .textfiles import path_or_stream, write_text

CELL = 120
LISTED = 500

# Composed per table from the registry's (regclass, name) pair, so not a named statement
# of sql/import.sql (those are prepared as they are by the schema tests).
_TABLE_ROWS = sql.SQL(
    "SELECT count(*) FROM {table} WHERE {column} IN (SELECT s.session_id "
    "FROM shardstore.sessions s WHERE s.subject_id = %(subject)s AND s.purged_at IS NULL "
    "AND (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s::text))"
)


def cell(value: Any) -> str:
    """A value as one Markdown table cell: JSON for non-strings, escaped, cut."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    out = []
    for ch in text:
        if ch == "|":
            out.append("\\|")
        elif ch in "\r\n\t":
            out.append(" ")
        elif ord(ch) < 32 or ch in "`<>":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    shown = "".join(out)
    return shown if len(shown) <= CELL else shown[: CELL - 1] + "…"


def _value_cell(stored: str) -> str:
    """A fact's value as a cell; a value encrypted at rest (the export was made without
    the key store) is not shown as its ciphertext but said to be sealed."""
    value = json.loads(stored)
    if is_sealed(value):
        return "(encrypted at rest: export with the key store to read it)"
    return cell(value)


def access_tables_op(subject: str, tenant: str | None) -> Op[list[tuple[str, int]]]:
    """(table, rows) for every session table a purge covers: its rows of the subject's
    live sessions (in ``tenant``, when given), one count statement per table."""
    targets = yield Q(query("access_session_tables"), (), named=True)
    counted: list[tuple[str, int]] = []
    for target in targets:
        schema, _, name = str(target["table_name"]).rpartition(".")
        table = sql.Identifier(schema, name) if schema else sql.Identifier(name)
        statement = _TABLE_ROWS.format(table=table, column=sql.Identifier(target["session_column"]))
        (rows,) = yield Q(statement, {"subject": subject, "tenant": tenant}, fetch="one")
        counted.append((str(target["table_name"]), int(rows)))
    return counted


class AccessReport:
    """What an export notes for its Markdown report, and the writing of it."""

    def __init__(self, out: Any, tenant: str | None, subject: str | None, file: str | None):
        self.path, self.stream = path_or_stream(
            out, "write", "report must be a path or a text stream (an object with write())"
        )
        self.tenant = tenant
        self.subject = subject
        self.file = file
        self.sessions: list[tuple[SessionInfo, int]] = []
        self.session_count = 0
        self.current: list[Any] = []
        self.current_count = 0
        self.tables: list[tuple[str, int]] = []

    def session(self, info: SessionInfo, turns: int) -> None:
        """A session was exported with ``turns`` turns."""
        self.session_count += 1
        if len(self.sessions) < LISTED:
            self.sessions.append((info, turns))

    def facts(self, rows: Sequence[Any]) -> None:
        """Fact versions were exported; the current ones are listed."""
        for row in rows:
            if row["valid_to"] is None:
                self.current_count += 1
                if len(self.current) < LISTED:
                    self.current.append(row)

    def text(self, done: Any) -> str:
        """The report as Markdown (``done``: the export's :class:`ExportReport`)."""
        who = (
            f"subject {cell(self.subject)}"
            + ("" if self.tenant is None else f" in tenant {cell(self.tenant)}")
            if self.subject is not None
            else (f"tenant {cell(self.tenant)}" if self.tenant is not None else "named sessions")
        )
        title = "Access report" if self.subject is not None else "Export report"
        lines = [
            f"# {title}: {who}",
            "",
            f"Written {datetime.now(UTC).isoformat(timespec='seconds')} with the export "
            f"`{done.export_id}` (shardstore.jsonl, version 3; docs/portability.md)"
            + ("" if self.file is None else f" in {cell(self.file)}")
            + ".",
            "",
            "## What the export holds",
            "",
            "| record | count |",
            "|---|---|",
            f"| sessions | {done.sessions} |",
            f"| turns | {done.turns} |",
            f"| checkpoints | {done.checkpoints} |",
            f"| runs | {done.runs} |",
            f"| chunk summaries | {done.summaries} |",
            f"| facts (every version) | {done.facts} |",
            f"| artifacts | {done.artifacts} ({done.artifact_bytes} bytes of content) |",
            f"| artifact references | {done.artifact_refs} |",
            "",
        ]
        if self.tables:
            lines += [
                "## Rows held in every session table",
                "",
                "What the database holds of these sessions, derived data (search vectors, "
                "text windows, queues) included; a purge of the subject removes all of it.",
                "",
                "| table | rows |",
                "|---|---|",
                *(f"| {cell(name)} | {rows} |" for name, rows in self.tables),
                "",
            ]
        lines += [
            f"## Sessions ({self.session_count})",
            "",
            "| session | tenant | agent | created | turns |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {info.session_id} | {cell(info.tenant_id)} | {cell(info.agent_id or '')} | "
            f"{info.created_at.isoformat(timespec='seconds')} | {turns} |"
            for info, turns in self.sessions
        ]
        if self.session_count > len(self.sessions):
            lines.append(f"| … {self.session_count - len(self.sessions)} more | | | | |")
        if self.subject is not None or self.tenant is not None:
            lines += [
                "",
                f"## Current facts ({self.current_count})",
                "",
                "| tenant | subject | key | value | since | confidence |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {cell(r['tenant_id'])} | {cell(r['subject'])} | {cell(r['key'])} | "
                f"{_value_cell(r['value'])} | "
                f"{r['valid_from'].isoformat(timespec='seconds')} | "
                f"{'' if r['confidence'] is None else r['confidence']} |"
                for r in self.current
            ]
            if self.current_count > len(self.current):
                lines.append(f"| … {self.current_count - len(self.current)} more | | | | | |")
        return "\n".join(lines) + "\n"

    def write(self, done: Any) -> None:
        """Write the report to its file or stream."""
        text = self.text(done)
        if self.stream is not None:
            self.stream.write(text)
            return
        assert self.path is not None
        write_text(self.path, text)
