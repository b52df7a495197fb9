"""What the exporter's record lines are made of: one table of fields per kind of row
(instead of a dict-building function per kind), the line encoder, and the keyset pager
every exported table is read with.

A field is ``name`` (the row's value as it is: text, numbers, booleans, null) or
``name:form``: ``id`` (a UUID as its string), ``time`` (an ISO 8601 time with its
offset), ``json`` (a JSON column read as text, parsed). Lines list the fields in the
table's order after ``kind``; docs/portability.md shows each."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..core import jsoncodec
from ..core.sql import query
from ..core.steps import Op, Q

PAGE = 200  # rows per round trip of the pager


def _same(value: Any) -> Any:
    return value


def _time(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _json(text: str | None) -> Any:
    return None if text is None else jsoncodec.loads(text)


def _id(value: Any) -> str | None:
    return None if value is None else str(value)


_FORMS: dict[str, Callable[[Any], Any]] = {"": _same, "id": _id, "time": _time, "json": _json}

_SPECS = {
    "checkpoint": "checkpoint_id:id tenant_id turn_seq sub_step parent_id:id idempotency_key "
    "created_at:time state:json tool_calls:json tool_results:json metadata:json",
    "run": "run_id:id tenant_id framework thread_key status awaiting:json awaiting_since:time "
    "steps usd_cost error metadata:json created_at:time updated_at:time closed_at:time",
    "summary": "tenant_id chunk_seq chunk_start:time first_turn_seq last_turn_seq summary tokens "
    "model created_at:time message_tokens counted_by",
    "fact": "tenant_id fact_id:id subject key value:json confidence source_session_id:id "
    "source_turn_seq valid_from:time valid_to:time recorded_at:time",
    "artifact_ref": "tenant_id artifact_id:id owner_type owner_id turn_seq required_for_resume "
    "expires_at:time",
    "artifact_link": "tenant_id artifact_id:id",
}
FIELDS: dict[str, tuple[tuple[str, Callable[[Any], Any]], ...]] = {
    kind: tuple(
        (name, _FORMS[form]) for name, _, form in (field.partition(":") for field in spec.split())
    )
    for kind, spec in _SPECS.items()
}

_encode = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode


def line(doc: Mapping[str, Any]) -> str:
    """One line of the file: pure ASCII JSON, no NaN or Infinity, with its newline."""
    return _encode(doc) + "\n"


def record(kind: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """The line object of a database row of a kind in :data:`FIELDS`."""
    doc: dict[str, Any] = {"kind": kind}
    for name, form in FIELDS[kind]:
        doc[name] = form(row[name])
    return doc


def record_lines(kind: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lines of rows of one kind."""
    return [line(record(kind, row)) for row in rows]


def paged_op(
    name: str,
    params: dict[str, Any],
    cursor: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    each: Callable[[Sequence[Mapping[str, Any]]], Op[None]],
) -> Op[None]:
    """Read the keyset query ``name`` a page of :data:`PAGE` rows at a time (``params``
    gets ``limit``, and after each page what ``cursor`` says of its last row), handing
    every page that has rows to ``each``."""
    params["limit"] = PAGE
    while True:
        rows = yield Q(query(name), params, named=True)
        if rows:
            yield from each(rows)
            params.update(cursor(rows[-1]))
        if len(rows) < PAGE:
            return
