"""Delayed mark-and-sweep of artifacts (``maintain()``, ``shardstore artifacts sweep``) and
the immediate release a GDPR purge makes.

Mark: an artifact without a live reference gets ``unreferenced_since``; one that has a live
reference again is cleared. The paths that remove references mark what they released
themselves (``artifacts_released_v1``; not a trigger, since Citus distributes no table with
one: docs/artifacts.md, "How it works"): unref, keep_checkpoints and rewind at once, a purge
in its release step (below); retention leaves it to this mark phase (the grace then starts at
the sweep that finds the artifact without a live reference). Sweep: artifacts unreferenced
for longer than the grace period, and uploads that never became ready or referenced, are
deleted — postgres rows with their chunks in one statement; objects elsewhere by marking the
row 'deleting', removing the object while holding the row, then the row. A sweep that dies
leaves 'deleting' rows; the next one finishes them. Staged uploads of clients that died are
removed when older than the grace (and than an hour)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..core import validate
from ..core.rows import json_fields
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q, Tx
from ..errors import InvalidInput
from .config import ArtifactConfig, config_of
from .model import owned_key

SWEEP_BATCH = 500
STAGING_MIN_AGE_S = 3600.0
"""Staged uploads younger than this are never removed, whatever the grace: a put in flight
still writes its staging file (a sweep with grace 0 must not take it away)."""


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What a sweep did: artifacts ``marked`` unreferenced (their grace started) and
    ``cleared`` (referenced again); ``deleted`` artifacts and their ``bytes_deleted``
    (dry run: what would go); ``objects_deleted``: objects removed from a file or S3
    backend; ``staging_removed``: staged uploads of dead clients; ``skipped``: 'deleting'
    rows of another backend than this store's, left for a store configured with it."""

    dry_run: bool
    marked: int = 0
    cleared: int = 0
    deleted: int = 0
    bytes_deleted: int = 0
    objects_deleted: int = 0
    staging_removed: int = 0
    skipped: int = 0
    deleted_ids: tuple[uuid.UUID, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return json_fields(self, leave_out=("deleted_ids",))


def mark_op(tenant: str | None) -> Op[tuple[int, int]]:
    """The mark phase for one tenant (``None``: every tenant): (marked, cleared)."""
    marked = cleared = 0
    while True:
        row = yield Q(query("artifacts_mark"), (SWEEP_BATCH, tenant), fetch="one", named=True)
        marked += int(row["marked"])
        cleared += int(row["cleared"])
        if int(row["marked"]) < SWEEP_BATCH:
            return marked, cleared


def _finish_deleting_op(
    config: ArtifactConfig, tenant: str | None
) -> Op[tuple[int, int, int, int]]:
    """Remove the objects of 'deleting' rows, each under its row lock; (deleted rows, their
    bytes, objects removed, skipped rows). The object is the one at the key derived from the
    row's tenant and sha256; a row that is not the one the library writes for that content
    (a tenant role's raw SQL can write any row of its tenant) governs no object: only the
    row goes."""
    deleted = size = objects = 0
    skipped: set[tuple[str, uuid.UUID]] = set()
    backend = config.backend
    while True:
        rows = yield Q(query("artifacts_deleting"), (tenant, SWEEP_BATCH), named=True)
        todo = [r for r in rows if (r["tenant_id"], r["artifact_id"]) not in skipped]
        if not todo:
            return deleted, size, objects, len(skipped)
        for row in todo:
            ident = (row["tenant_id"], row["artifact_id"])
            if backend is None or backend.name != row["backend"]:
                skipped.add(ident)
                continue
            key = owned_key(row["tenant_id"], row["artifact_id"], row["sha256"])
            yield Tx.BEGIN
            (still,) = yield Q(query("artifact_lock_delete"), ident, fetch="one")
            if still:
                if key is not None:
                    removed = yield Call(backend.delete, (key,))
                    objects += int(bool(removed))
                (gone,) = yield Q(query("artifact_forget"), ident, fetch="one")
                deleted += int(bool(gone))
                size += int(row["size_bytes"]) if gone else 0
            yield Tx.COMMIT


@dataclass(frozen=True, slots=True)
class Erased:
    """What :func:`erase_op` did: artifacts ``deleted`` (rows and their bytes, every
    backend) and their ``bytes``; ``kept``: queued ones a live reference still needed;
    ``skipped``: 'deleting' rows of another backend than the store's (left queued as
    'deleting' for a store configured with it)."""

    deleted: int = 0
    bytes: int = 0
    kept: int = 0
    skipped: int = 0


def erase_op(config: ArtifactConfig, tenant: str | None) -> Op[Erased]:
    """Erase what purges queued (``shardstore.artifact_erasures``) for ``tenant`` (None:
    every tenant the connection sees): each queued artifact that no live reference needs
    is deleted with its bytes (postgres: row and chunks in one transaction; file, s3: the
    row marked 'deleting' in the transaction that takes it off the queue, then its object
    and row removed as a sweep removes them), then every 'deleting' row of the tenant is
    finished. Idempotent and resumable: a run killed at any point leaves each artifact
    queued, 'deleting' or gone, and the next run (a purge's re-run, or a sweep) finishes."""
    deleted = size = kept = 0
    while True:
        rows = yield Q(query("artifact_erasures"), (tenant, SWEEP_BATCH), named=True)
        for row in rows:
            yield Tx.BEGIN
            done = yield Q(
                query("artifact_erase"),
                (row["tenant_id"], row["artifact_id"]),
                named=True,
                fetch="one",
            )
            yield Tx.COMMIT
            if done["status"] == "deleted":
                deleted += 1
                size += int(done["size_bytes"])
            elif done["status"] == "kept":
                kept += 1
        if len(rows) < SWEEP_BATCH:
            break
    gone, gone_bytes, _objects, skipped = yield from _finish_deleting_op(config, tenant)
    return Erased(deleted + gone, size + gone_bytes, kept, skipped)


def sweep_op(
    config: ArtifactConfig,
    grace: timedelta,
    *,
    tenant: str | None = None,
    since: datetime | None = None,
    dry_run: bool = False,
) -> Op[SweepReport]:
    """One sweep (see the module docstring); ``tenant`` / ``since``: only that tenant's
    artifacts / only those marked at or after ``since`` (a purge's release)."""
    seconds = grace.total_seconds()
    if dry_run:
        rows = yield Q(
            query("artifacts_sweep"), (seconds, 1 << 30, tenant, since, True), named=True
        )
        return SweepReport(
            dry_run=True,
            deleted=len(rows),
            bytes_deleted=sum(int(r["size_bytes"]) for r in rows),
            deleted_ids=tuple(r["artifact_id"] for r in rows),
        )
    marked = cleared = 0
    erased = Erased()
    if since is None:
        # what a purge that died left queued is erased first, whatever the grace
        erased = yield from erase_op(config, tenant)
        marked, cleared = yield from mark_op(tenant)
    deleted = size = 0
    ids: list[uuid.UUID] = []
    while True:
        rows = yield Q(
            query("artifacts_sweep"), (seconds, SWEEP_BATCH, tenant, since, False), named=True
        )
        for r in rows:
            size += int(r["size_bytes"])
            ids.append(r["artifact_id"])
            deleted += int(bool(r["deleted"]))
        if len(rows) < SWEEP_BATCH:
            break
    gone, _size, objects, skipped = yield from _finish_deleting_op(config, tenant)
    staging = 0
    if config.backend is not None and since is None:
        staging = yield Call(config.backend.sweep_staging, (max(seconds, STAGING_MIN_AGE_S),))
    return SweepReport(
        dry_run=False,
        marked=marked,
        cleared=cleared,
        deleted=deleted + gone + erased.deleted,
        bytes_deleted=size + erased.bytes,
        objects_deleted=objects,
        staging_removed=int(staging),
        skipped=skipped + erased.skipped,
        deleted_ids=tuple(ids),
    )


def sweep_artifacts(
    store: StoreState, *, grace: timedelta | None = None, dry_run: bool = False
) -> Op[SweepReport]:
    """Mark artifacts without a live reference and delete those unreferenced for longer
    than ``grace`` (default: the store's ``artifact_grace``, one day), uploads that were
    never referenced included; ``dry_run`` reports what would go and changes nothing. A
    reference made while the sweep runs always wins: its artifact is not deleted.
    Artifacts a purge queued for erasure and did not finish (it was killed) are erased
    first, whatever the grace. ``maintain()`` runs this too."""
    config = config_of(store)
    if grace is None:
        grace = config.grace
    if not isinstance(grace, timedelta) or grace < timedelta(0):
        raise InvalidInput(f"grace must be a timedelta >= 0, not {validate.shown(grace)}")
    validate.flag(dry_run, "dry_run")
    return (yield from sweep_op(config, grace, dry_run=dry_run))


def purge_clock_op(tenant: str | None = None) -> Op[datetime]:
    """Before a purge of a subject, a tenant or by time: the tenant's artifacts (``None``:
    every tenant's) settled — those already without a live reference marked, stale marks
    of referenced ones cleared — then the database clock, which the purge's release
    compares marks with. What an unref, rewind or expiry released before the purge is thus
    marked before that clock and keeps its grace; a referenced artifact carries no mark the
    purge could mistake for older."""
    yield from mark_op(tenant)
    return (yield from clock_op())


def clock_op() -> Op[datetime]:
    """The database clock (a purge's start)."""
    (now,) = yield Q(query("artifact_clock"), fetch="one")
    return now  # type: ignore[no-any-return]


def release_op(
    store: StoreState,
    since: datetime,
    tenant: str | None = None,
    held: Sequence[uuid.UUID] | None = None,
) -> Op[SweepReport]:
    """After a purge: mark the artifacts it left without a live reference (marks after
    ``since``) — ``held`` (ids of ``tenant``'s artifacts the purged refs named), or else
    every artifact of ``tenant`` (``None``: of every tenant) — then delete now, in every
    backend, those marked since the purge started, whatever the grace period."""
    if held is None:
        yield from mark_op(tenant)
    else:
        assert tenant is not None
        yield Q(query("artifacts_released"), ([tenant] * len(held), list(held)), fetch="one")
    return (yield from sweep_op(config_of(store), timedelta(0), tenant=tenant, since=since))
