"""Argument validation: one rule per kind of argument, used by every operation.

Each check returns the value in the form the database wants, or raises
:class:`~shardstore.errors.InvalidInput` before anything reaches the server. Booleans are
never accepted as numbers, and a truthy string is never accepted as a flag.
"""

from __future__ import annotations

import reprlib
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidInput
from . import jsoncodec

MAX_ID_CHARS = 256
_REPR = reprlib.Repr()
_REPR.maxlevel = 3  # a value nested thousands deep is shown by its first levels
_REPR.maxstring = _REPR.maxother = 80


def shown(value: Any, limit: int = 80) -> str:
    """``value`` as an error message shows it: a repr of at most ``limit`` characters that
    never raises (``repr`` itself raises RecursionError on a list nested 5,000 deep and
    ValueError on an int of 5,000 digits, so it must not be used on caller values)."""
    try:
        text = _REPR.repr(value)
    except Exception:  # an int over Python's digit limit, a __repr__ that raises
        text = f"<a {type(value).__name__}>"
    return text[:limit]


MAX_KEY_CHARS = 512
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1


def session_id(value: Any) -> uuid.UUID:
    """A session id as a UUID (a UUID or its string form)."""
    return uuid_value(value, "session_id")


def optional_session_id(value: Any) -> uuid.UUID | None:
    """None, or a session id as for :func:`session_id`."""
    return None if value is None else session_id(value)


def text(value: Any, what: str, *, limit: int | None = MAX_ID_CHARS, empty: bool = False) -> str:
    """A string the database can store: non-empty (unless ``empty``), at most ``limit``
    characters (None: no limit), no NUL, no lone surrogate (ids: tenant, subject, agent,
    idempotency keys; queries, summaries)."""
    if not isinstance(value, str) or (not value and not empty):
        raise InvalidInput(
            f"{what} must be a {'' if empty else 'non-empty '}string, not {shown(value)}"
        )
    if limit is not None and len(value) > limit:
        raise InvalidInput(f"{what} is longer than {limit} characters")
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} must be valid Unicode (it holds a lone surrogate)") from None
    return value


def optional_text(value: Any, what: str, *, limit: int = MAX_ID_CHARS) -> str | None:
    """None, or a string as for :func:`text`."""
    return None if value is None else text(value, what, limit=limit)


def count(value: Any, what: str, *, low: int = 1, high: int = MAX_INT32) -> int:
    """An int from ``low`` to ``high`` (counts, sizes, batch sizes, k)."""
    if type(value) is not int or not low <= value <= high:
        raise InvalidInput(f"{what} must be an int from {low} to {high}, not {shown(value)}")
    return value


def optional_count(value: Any, what: str, *, low: int = 1, high: int = MAX_INT32) -> int | None:
    """None, or an int as for :func:`count`."""
    return None if value is None else count(value, what, low=low, high=high)


def position(value: Any, what: str) -> int:
    """A non-negative bigint (a turn_seq or chunk_seq)."""
    return count(value, what, low=0, high=MAX_INT64)


def flag(value: Any, what: str) -> bool:
    """True or False, nothing else (a truthy string such as "no" must not mean yes)."""
    if type(value) is not bool:
        raise InvalidInput(f"{what} must be True or False, not {shown(value)}")
    return value


def instant(value: Any, what: str) -> datetime:
    """A timezone-aware datetime, in UTC."""
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a timezone-aware datetime, not {shown(value)}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be timezone-aware (e.g. datetime.now(UTC))")
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidInput(f"{what} is out of range: {shown(value)}") from None


def optional_instant(value: Any, what: str) -> datetime | None:
    """None, or a datetime as for :func:`instant`."""
    return None if value is None else instant(value, what)


def batch(messages: Any, keys: Any) -> tuple[list[Any], list[str | None]]:
    """A batch of messages (a list or tuple) and as many idempotency keys in the same order
    (each a string or None; None: no keys)."""
    if not isinstance(messages, list | tuple):
        raise InvalidInput("messages must be a list of message dicts")
    if keys is None:
        return list(messages), [None] * len(messages)
    if not isinstance(keys, list | tuple) or len(keys) != len(messages):
        raise InvalidInput("idempotency_keys must be a list as long as messages")
    if not all(k is None or isinstance(k, str) for k in keys):
        raise InvalidInput("each idempotency key must be a string or None")
    return list(messages), list(keys)


def keys_for_retry(keys: Sequence[str | None]) -> None:
    """``retry=True`` needs a key on every turn."""
    if any(k is None for k in keys):
        raise InvalidInput(
            "retry=True needs an idempotency key for every turn: without one, a repeat of "
            "an append that did commit would store the turn twice"
        )


MAX_JSON_BYTES = 1 << 20


def json_object(value: Any, what: str, *, limit: int = MAX_JSON_BYTES) -> str:
    """A dict that JSON (and JSONB) can hold exactly, as its encoded text of at most
    ``limit`` bytes (run metadata, what a run awaits); NaN, non-string keys, cycles and
    values JSON has no form for are refused."""
    if type(value) is not dict:
        raise InvalidInput(f"{what} must be a dict, not {type(value).__name__}")
    encoded = jsoncodec.encode_json(value, what)
    if len(encoded.encode("utf-8", "surrogatepass")) > limit:
        raise InvalidInput(f"{what} is larger than {limit} bytes as JSON")
    return encoded


def amount(value: Any, what: str) -> float:
    """A finite, non-negative number (an int or a float; never a bool), as a float: costs."""
    if type(value) not in (int, float):
        raise InvalidInput(f"{what} must be a number, not {shown(value)}")
    try:
        result = float(value)
    except OverflowError:
        raise InvalidInput(f"{what} is out of range: {shown(value)}") from None
    if not 0.0 <= result < float("inf"):  # NaN fails every comparison
        raise InvalidInput(f"{what} must be a finite number >= 0, not {shown(value)}")
    return result


def choice(value: Any, what: str, options: Sequence[str]) -> str:
    """One of ``options`` (a status, a kind), exactly."""
    if type(value) is not str or value not in options:
        raise InvalidInput(f"{what} must be one of {', '.join(options)}; not {shown(value)}")
    return value


def parsed_uuid(value: Any) -> uuid.UUID | None:
    """A UUID or its string form as a UUID; None for anything else (never raises)."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            return None
    return None


def uuid_value(value: Any, what: str) -> uuid.UUID:
    """An id as a UUID (a UUID or its string form): run ids and the like."""
    parsed = parsed_uuid(value)
    if parsed is None:
        raise InvalidInput(f"{what} must be a UUID (or its string form), not {shown(value)}")
    return parsed


def fraction(value: Any, what: str) -> float:
    """A finite number from 0 to 1 (an int or a float; never a bool), as a float:
    confidences."""
    if type(value) not in (int, float):
        raise InvalidInput(f"{what} must be a number from 0 to 1, not {shown(value)}")
    if not 0 <= value <= 1:  # compared before float(): a huge int would overflow it
        raise InvalidInput(f"{what} must be a number from 0 to 1, not {shown(value)}")
    result = float(value)
    if not 0.0 <= result <= 1.0:  # NaN fails every comparison
        raise InvalidInput(f"{what} must be a number from 0 to 1, not {shown(value)}")
    return result


def optional_fraction(value: Any, what: str) -> float | None:
    """None, or a number as for :func:`fraction`."""
    return None if value is None else fraction(value, what)


def texts(value: Any, what: str, *, limit: int = MAX_ID_CHARS) -> list[str]:
    """A list (or tuple) of strings as for :func:`text`; a bare string is refused (it
    would be read as its characters)."""
    if not isinstance(value, list | tuple):
        raise InvalidInput(f"{what} must be a list of strings, not {shown(value)}")
    return [text(item, f"each of {what}", limit=limit) for item in value]


def turn_ref(value: Any, what: str) -> tuple[uuid.UUID, int]:
    """A turn named as ``(session_id, turn_seq)``: a session id as for :func:`session_id`
    and a non-negative turn_seq."""
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise InvalidInput(f"{what} must be a (session_id, turn_seq) pair, not {shown(value)}")
    return session_id(value[0]), position(value[1], f"{what} turn_seq")
