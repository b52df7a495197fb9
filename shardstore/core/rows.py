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


def json_fields(obj: Any, *, leave_out: tuple[str, ...] = (), **values: Any) -> dict[str, Any]:
    """The other direction of :func:`record`: a dataclass instance as a dict by field name,
    in declaration order, less the fields ``leave_out`` names; each of ``values`` replaces
    the field of its name (its JSON form: a UUID as text, a time in ISO 8601) or, for a
    computed value, comes after the fields."""
    out = {name: getattr(obj, name) for name, _ in _fields(type(obj)) if name not in leave_out}
    out.update(values)
    return out
