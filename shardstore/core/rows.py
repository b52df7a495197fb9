"""Rows read by column name: a named row (a dict, from ``Q(..., named=True)``) mapped onto a
frozen dataclass field by field, so that a new column never shifts what a reader sees."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


_FIELDS: dict[type[Any], tuple[tuple[str, bool], ...]] = {}


def _fields(cls: type[Any]) -> tuple[tuple[str, bool], ...]:
    found = _FIELDS.get(cls)
    if found is not None:
        return found
    found = _FIELDS[cls] = tuple(
        (
            f.name,
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )
    return found


def record(cls: type[T], row: Mapping[str, Any], **values: Any) -> T:
    """``cls`` with each field taken from ``values``, else from the row's column of the same
    name, else its default. A field with no default and no column raises KeyError: the
    query and the type disagree, which must never pass silently."""
    kwargs: dict[str, Any] = {}
    for name, has_default in _fields(cls):
        if name in values:
            kwargs[name] = values[name]
        elif name in row:
            kwargs[name] = row[name]
        elif not has_default:
            raise KeyError(f"{cls.__name__}.{name}: no column {name!r} in the row")
    return cls(**kwargs)
