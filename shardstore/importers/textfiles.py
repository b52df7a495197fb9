"""The files an export writes and an import reads: a path the caller names (opened here,
UTF-8) or a text stream the caller holds (used as it is), with the same refusals for
both (``InvalidInput``, never an ``OSError`` or ``ValueError``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

from ..core import validate
from ..errors import InvalidInput


def path_or_stream(target: Any, method: str, refusal: str) -> tuple[str | None, Any]:
    """``(path, None)`` for a path, ``(None, stream)`` for an object with a ``method``
    (``write`` or ``readline``); ``InvalidInput(refusal)`` for anything else."""
    if isinstance(target, str | os.PathLike):
        return os.fspath(target), None
    if callable(getattr(target, method, None)):
        return None, target
    raise InvalidInput(refusal)


@contextmanager
def _refused_as_invalid_input(path: str, verb: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise InvalidInput(f"cannot {verb} {path}: {exc.strerror}") from None
    except ValueError as exc:  # a NUL in the path, a lone surrogate (UnicodeError)
        raise InvalidInput(f"cannot {verb} {validate.shown(path)}: {exc}") from None


def open_text(path: str, mode: str, **options: Any) -> TextIO:
    """``path`` opened in ``mode`` ("w" or "r", UTF-8): a file that cannot be opened (or a
    path with a NUL or a lone surrogate) is ``InvalidInput`` naming it."""
    with _refused_as_invalid_input(path, "write" if "w" in mode else "read"):
        return cast(TextIO, open(path, mode, encoding="utf-8", **options))


def write_text(path: str, text: str) -> None:
    """Write ``text`` to the file ``path`` (UTF-8, replacing it); what cannot be opened
    or written is ``InvalidInput`` naming it."""
    with _refused_as_invalid_input(path, "write"), open(path, "w", encoding="utf-8") as out:
        out.write(text)
