"""Fork lineage in a ``shardstore.jsonl`` export: a fork imported as a fork.

A fork's session line names its parent and fork point (``"fork": {"parent", "at"}``,
format version 2 on) and, from version 4, the turns that copy-on-write copied into it and
where from (``"copies": [{"origin", "first", "last"}]``: the ``fork_copies`` records of the
session merged into turn ranges per origin; chunk numbers are each store's own). The
exporter writes a session's live ancestors that are in the export's scope before it (its
parent, the origins of its copies), so that an import meets them first.

The importer makes the session a fork (``fork_v1``: one row, the inherited turns read
through the lineage, never copied) when this database holds the parent (the file's copy of
it under remapped ids) in the session's tenant with the same subject and agent and enough
turns, and the file's last inherited turn is the one the parent's view holds at the fork
point (same time); the inherited turn lines are then checked and not written. Otherwise it
makes a plain session holding the inherited turns, as before. Copied ranges become the
imported session's own chunks (a chunk boundary before and after each range, so that a
copied chunk holds copied turns only), folded, each with its copy record naming the origin
(the file's copy under remapped ids), so that a purge of the origin erases them from this
session too (``fork_erase``); an origin this database lacks leaves the range plain, and
the report lists it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.sql import query
from ..core.steps import Op, Q
from ..errors import ImportRejected
from ..history import ops as history_ops
from .fields import _int, _uuid
from .remap import IdMap

MAX_COPIES = 10_000  # copied ranges on one session line


@dataclass(frozen=True, slots=True)
class Copy:
    """Turns ``first .. last`` of a session were copied from session ``origin``."""

    origin: uuid.UUID
    first: int
    last: int


@dataclass(slots=True)
class Lineage:
    """A session imported as a fork of ``parent`` at turn ``at`` (``point``: the time of
    that turn in the parent's view here; ``met``: the file's copy of it was read)."""

    parent: uuid.UUID
    at: int
    point: datetime | None
    met: bool = False


# ---------------------------------------------------------------- export


def copies_op(sid: uuid.UUID) -> Op[list[dict[str, Any]]]:
    """A session's copy records as the session line's ``copies``: per origin, its ranges
    of copied turns merged where they touch."""
    rows = yield Q(query("export_fork_copies"), (sid,), named=True)
    ranges: dict[uuid.UUID, list[list[int]]] = {}
    for row in sorted(rows, key=lambda r: (str(r["origin_session_id"]), r["first_turn_seq"])):
        spans = ranges.setdefault(row["origin_session_id"], [])
        if spans and row["first_turn_seq"] <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], row["last_turn_seq"])
        else:
            spans.append([row["first_turn_seq"], row["last_turn_seq"]])
    merged = [
        {"origin": str(origin), "first": first, "last": last}
        for origin, spans in ranges.items()
        for first, last in spans
    ]
    return sorted(merged, key=lambda c: (c["first"], c["origin"]))


def ancestors_op(sid: uuid.UUID) -> Op[Sequence[Mapping[str, Any]]]:
    """The live sessions the session's history depends on (parent, copy origins), oldest
    first: session_id, tenant_id, subject_id."""
    rows: Sequence[Mapping[str, Any]] = yield Q(
        query("export_session_ancestors"), {"sid": sid}, named=True
    )
    return rows


# ---------------------------------------------------------------- import


def copies_of(value: Any, where: str) -> list[Copy]:
    """A session line's ``copies``, checked."""
    if type(value) is not list:
        raise ImportRejected(f"{where}: copies must be a list")
    if len(value) > MAX_COPIES:
        raise ImportRejected(f"{where}: more than {MAX_COPIES} copied ranges")
    out = []
    for n, item in enumerate(value):
        what = f"copies[{n}]"
        if type(item) is not dict:
            raise ImportRejected(f"{where}: {what} must be an object")
        origin = _uuid(item.get("origin"), where, f"{what}.origin")
        first = _int(item.get("first"), where, f"{what}.first")
        last = _int(item.get("last"), where, f"{what}.last")
        if last < first:
            raise ImportRejected(f"{where}: {what} ends before it starts")
        out.append(Copy(origin, first, last))
    return out


def breaks(copies: Sequence[Copy]) -> set[int]:
    """The turns that must open a chunk of their own so that no chunk mixes copied turns
    with others."""
    return {c.first for c in copies} | {c.last + 1 for c in copies}


def _usable(row: Mapping[str, Any] | None, tenant: str) -> bool:
    return row is not None and not row["purged"] and row["tenant_id"] == tenant


def fork_op(
    sid: uuid.UUID,
    fork: tuple[uuid.UUID, int] | None,
    owners: tuple[str, str | None, str | None],
    metadata: str,
    created_at: datetime,
    ids: IdMap,
) -> Op[tuple[str, Lineage | None]]:
    """Create session ``sid`` as a fork, in the caller's transaction, when it can be one
    here: ``("ok", lineage)``; ``("exists", None)`` when the id is taken; ``("plain",
    None)`` with nothing written when the parent is not here (or of another tenant or
    owners, purged, too short)."""
    if fork is None or fork[1] < 0:
        return "plain", None
    parent, at = ids.source_session(fork[0]), fork[1]
    row = yield Q(query("import_fork_parent"), (parent,), fetch="one", named=True)
    if not _usable(row, owners[0]) or at >= row["next_turn_seq"]:
        return "plain", None
    if (row["subject_id"], row["agent_id"]) != owners[1:]:
        return "plain", None
    (status,) = yield Q(query("import_fork"), (parent, at, sid, metadata), fetch="one")
    if status == "exists":
        return "exists", None
    if status != "ok":
        return "plain", None
    # in two statements: one joining the chunk's location to the tables is not routable on
    # Citus ("complex joins are only supported when all distributed tables are co-located")
    where = yield Q(query("import_fork_chunk"), {"parent": parent, "at": at}, fetch="one")
    at_time = None
    if where is not None:
        owner, chunk = where
        point = yield Q(
            query("import_fork_point"), {"owner": owner, "chunk": chunk, "at": at}, fetch="one"
        )
        at_time = None if point is None else point[0]
    yield Q(query("import_fork_times"), (created_at, at_time, sid), fetch="none")
    return "ok", Lineage(parent, at, at_time)


def inherited(lineage: Lineage, seq: int, created: datetime, at: str) -> None:
    """Check an inherited turn line of a session imported as a fork: the last one must be
    the turn the parent's view holds at the fork point."""
    if seq == lineage.at:
        if created != lineage.point:
            raise ImportRejected(
                f"{at}: turn {seq} is not the turn session {lineage.parent} holds at the fork "
                "point here (the inherited turns differ)"
            )
        lineage.met = True


def seal_op(sid: uuid.UUID) -> Op[None]:
    """Close the session's open chunk: the next turn starts a new one."""
    yield Q(query("import_seal_open"), (sid,), fetch="none")


def record_copies_op(
    sid: uuid.UUID, tenant: str, copies: Sequence[Copy], ids: IdMap, where: str
) -> Op[list[str]]:
    """Fold the session's chunks and write a copy record per copied range on the chunks
    holding it; returns why a range was left plain (its origin not here)."""
    if not copies:
        return []
    yield from seal_op(sid)
    yield from history_ops.fold_sealed_op(sid, 0)
    why = []
    for c in copies:
        origin = ids.source_session(c.origin)
        row = yield Q(query("import_fork_parent"), (origin,), fetch="one", named=True)
        if not _usable(row, tenant):
            why.append(
                f"turns {c.first}..{c.last} of session {sid} were copied from session "
                f"{origin}, which this database lacks: imported as its own turns"
            )
            continue
        params = {"sid": sid, "origin": origin, "first": c.first, "last": c.last}
        (chunks,) = yield Q(query("import_fork_copy"), params, fetch="one")
        if not chunks:
            raise ImportRejected(f"{where}: copied turns {c.first}..{c.last} are not the session's")
    return why
