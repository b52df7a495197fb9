"""Shared argument parsing for the command line: ``type=`` callables for argparse (they
raise ``argparse.ArgumentTypeError``, which argparse reports as a usage error, exit 2) and
parsers for values read inside a command (they raise :class:`UsageError`, also exit 2)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from ..errors import ConfigurationError
from ..settings import parse_interval


class UsageError(Exception):
    """Bad input detected by the CLI itself (e.g. a message that is not JSON); exit 2."""


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}: {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(text, 0)


def int_between(low: int, high: int) -> Callable[[str], int]:
    """A ``type=`` callable accepting integers with ``low <= value <= high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}: {value}")
        return value

    return parse


def positive_seconds(text: str) -> float:
    """A finite number of seconds greater than 0 (``--connect-timeout``): 0, a negative
    number, NaN or infinity is a usage error at parse time."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):  # NaN fails every comparison
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0: {text!r}")
    return value


def interval(text: str) -> timedelta:
    """A duration such as ``'7 days'``, ``'1h'`` or ``'90s'``
    (:func:`shardstore.settings.parse_interval`)."""
    try:
        return parse_interval(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def interval_seconds(text: str) -> float:
    """A duration as :func:`interval` reads it, in seconds."""
    return interval(text).total_seconds()


#: the longest lock timeout PostgreSQL takes (``lock_timeout`` is an int of milliseconds)
MAX_LOCK_TIMEOUT = timedelta(milliseconds=2**31 - 1)


def lock_timeout(text: str) -> timedelta:
    """A short duration in milliseconds (``'200ms'``) or seconds (``'1.5s'``, ``'2'``)."""
    value = text.strip().lower()
    try:
        if value.endswith("ms"):
            wait = timedelta(milliseconds=float(value[:-2]))
        else:
            wait = timedelta(seconds=float(value.rstrip("s")))
    # OverflowError: infinity, or more seconds than a timedelta holds ('1e309', '1e20')
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"cannot read lock timeout {text[:80]!r}; write e.g. '200ms' or '1.5s'"
        ) from None
    if wait > MAX_LOCK_TIMEOUT:  # PostgreSQL's lock_timeout is an int of milliseconds
        raise argparse.ArgumentTypeError(
            f"lock timeout {text[:80]!r} is longer than PostgreSQL allows (about 24 days)"
        )
    return wait


#: How every time option's help describes the TIME it takes (all read by :func:`parse_time`).
TIME_HELP = (
    "ISO 8601 (e.g. 2026-01-31 or 2026-01-31T12:00+01:00; UTC unless it names a zone) "
    "or an age such as '7 days'"
)


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO 8601 date/time (UTC when it names no zone) or an age like '90 days' (that long
    before ``now``, default the current time); always timezone-aware. Raises
    :class:`UsageError` for anything else. The one reader of every time option of the
    command line (``search --since/--until``, ``sessions --since``, ``facts --as-of``,
    ``purge range --before``, ``purge before``), so that they all take the same forms."""
    try:
        age = parse_interval(text)
    except ConfigurationError:
        pass
    else:
        try:
            return (now or datetime.now(UTC)) - age
        except OverflowError:  # an age reaching before year 1 ('800000 days')
            raise UsageError(f"age {text[:80]!r} reaches before the year 1") from None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"cannot read time {text!r}: write an ISO 8601 time such as 2026-01-31 or "
            "2026-01-31T12:00:00+01:00, or an age such as '90 days'"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def optional_time(text: str | None) -> datetime | None:
    """:func:`parse_time` of ``text``, or None when the option was not given."""
    return None if text is None else parse_time(text)


def parse_json(text: str, what: str) -> Any:
    """``text`` decoded as JSON; raises :class:`UsageError` naming ``what`` if it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:  # the decoder recurses once per level of nesting
        raise UsageError(f"{what} is nested too deeply to decode") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise UsageError(f"{what} holds a number too long to read: {exc}") from None


def read_stdin(what: str) -> str:
    """All of stdin as UTF-8 text; bytes that are not UTF-8 are a :class:`UsageError`
    naming ``what`` (not a UnicodeDecodeError)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream put in its place (an embedding program, a test)
        return str(sys.stdin.read())
    data: bytes = buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} on stdin is not valid UTF-8: {exc}") from None


def open_file(path: str, mode: str, what: str) -> IO[Any]:
    """``open(path, mode)`` for a file the user named (``what``, e.g. "--output"): a path
    that does not exist, is a directory, is too long or cannot be opened is a
    :class:`UsageError` saying so, not an OSError. Text modes read and write UTF-8."""
    try:
        if "b" in mode:
            return open(path, mode)
        return open(path, mode, encoding="utf-8", newline="\n")
    except (OSError, ValueError) as exc:  # ValueError: an empty path on some systems
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot open {what} {path[:200]!r}: {reason}") from None
