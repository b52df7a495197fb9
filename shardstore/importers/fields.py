"""Field checks of an import line: each turns a wrong type, a value out of range or a
malformed id or time into ``ImportRejected`` naming the line (``where``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from ..core import jsoncodec, validate
from ..errors import ImportRejected, InvalidInput


def _instant(value: Any, where: str, what: str) -> datetime:
    if not isinstance(value, str):
        raise ImportRejected(f"{where}: {what} must be an ISO 8601 string")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ImportRejected(
            f"{where}: {what} {validate.shown(value, 60)} is not an ISO 8601 time"
        ) from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise ImportRejected(f"{where}: {what} {validate.shown(value, 60)} has no UTC offset")
    # in UTC it must still be a datetime (0001-01-01T00:00+14:00 is not): the database
    # stores it in UTC and every read hands it back as one
    return _field(validate.instant, at, where, what)  # type: ignore[no-any-return]


def _field(check: Any, value: Any, where: str, *args: Any) -> Any:
    try:
        return check(value, *args)
    except InvalidInput as exc:
        raise ImportRejected(f"{where}: {exc}") from None


def _key(value: Any) -> str | None:
    return validate.optional_text(value, "idempotency_key", limit=validate.MAX_KEY_CHARS)


def _int(value: Any, where: str, what: str, *, low: int = 0, high: int = validate.MAX_INT64) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ImportRejected(f"{where}: {what} must be an int from {low} to {high}")
    return value


def _opt_int(value: Any, where: str, what: str, *, high: int = validate.MAX_INT64) -> int | None:
    return None if value is None else _int(value, where, what, high=high)


def _text(
    doc: dict[str, Any], name: str, where: str, limit: int | None = validate.MAX_ID_CHARS
) -> str:
    try:
        return validate.text(doc.get(name), name, limit=limit)
    except InvalidInput as exc:
        raise ImportRejected(f"{where}: {exc}") from None


def _opt_text(
    doc: dict[str, Any], name: str, where: str, limit: int | None = validate.MAX_ID_CHARS
) -> str | None:
    return None if doc.get(name) is None else _text(doc, name, where, limit)


def _uuid(value: Any, where: str, what: str) -> uuid.UUID:
    if not isinstance(value, str):
        raise ImportRejected(f"{where}: {what} must be a UUID string")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ImportRejected(f"{where}: {what} {validate.shown(value, 60)} is not a UUID") from None


def _opt_instant(value: Any, where: str, what: str) -> datetime | None:
    return None if value is None else _instant(value, where, what)


def _jsonb(value: Any, where: str, what: str, *, null: bool = False) -> str | None:
    if value is None and null:
        return None
    return _field(jsoncodec.encode_json, value, where, what)  # type: ignore[no-any-return]


def _number(value: Any, where: str, what: str, low: float, high: float) -> float:
    if type(value) not in (int, float) or not low <= value <= high:
        raise ImportRejected(f"{where}: {what} must be a number from {low} to {high}")
    return float(value)


def _owned(doc: dict[str, Any], tenant: str, where: str) -> None:
    """A row of a session may repeat its tenant, never name another."""
    named = doc.get("tenant_id", tenant)
    if named != tenant:
        raise ImportRejected(
            f"{where}: the row names tenant {validate.shown(named, 60)}, not its session's"
        )
