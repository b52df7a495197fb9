"""References that turns and checkpoints carry: found in a value (``{"$shardstore.artifact":
{...}}`` dicts, cards included) or given, written in the caller's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q
from ..errors import ArtifactNotFound, InvalidInput
from .config import config_of
from .model import MARKER, ArtifactRef
from .ops import raise_ref_status, ref_from_row


def _marked(value: Any, depth: int = 0) -> Iterator[Any]:
    if depth > 300:  # jsoncodec refuses deeper values anyway
        return
    if isinstance(value, dict):
        if MARKER in value:
            yield value[MARKER]
        for item in value.values():
            yield from _marked(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _marked(item, depth + 1)


def has_marker(value: Any) -> bool:
    """Whether a dict inside ``value`` holds the reference key."""
    return next(_marked(value), None) is not None


def wanted(state: Any, given: Any) -> dict[uuid.UUID, bool]:
    """Artifact id -> required_for_resume, for the refs in ``state`` and those ``given`` (a
    list of ArtifactRef, or None); ``InvalidInput`` for anything else."""
    found: dict[uuid.UUID, bool] = {}
    if given is not None and (
        not isinstance(given, list | tuple) or not all(isinstance(r, ArtifactRef) for r in given)
    ):
        raise InvalidInput("artifacts must be a list of ArtifactRef (or None)")
    refs: list[ArtifactRef] = list(given or [])
    refs += [ArtifactRef.from_json(v) for v in _marked(state)]
    for ref in refs:
        found[ref.artifact_id] = found.get(ref.artifact_id, False) or ref.required_for_resume
    return found


def ref_checkpoint_op(
    tenant: str, session_id: uuid.UUID, checkpoint_id: uuid.UUID, links: dict[uuid.UUID, bool]
) -> Op[None]:
    """Reference each artifact from the checkpoint (in the caller's transaction: refused
    refs raise and the checkpoint goes too)."""
    ids = sorted(links)
    (status,) = yield Q(
        query("artifact_ref_many"),
        (
            tenant,
            ids,
            "checkpoint",
            [str(checkpoint_id)] * len(ids),
            session_id,
            [None] * len(ids),
            [links[i] for i in ids],
        ),
        fetch="one",
    )
    raise_ref_status(status, tenant, f"named by checkpoint {checkpoint_id}")


def ref_turns_op(
    tenant: str, session_id: uuid.UUID, per_turn: Sequence[tuple[int, uuid.UUID]]
) -> Op[None]:
    """Reference artifacts from turns: (turn_seq, artifact_id) pairs."""
    if not per_turn:
        return
    (status,) = yield Q(
        query("artifact_ref_many"),
        (
            tenant,
            [aid for _seq, aid in per_turn],
            "turn",
            [f"{session_id}:{seq}" for seq, _aid in per_turn],
            session_id,
            [seq for seq, _aid in per_turn],
            [False] * len(per_turn),
        ),
        fetch="one",
    )
    raise_ref_status(status, tenant, f"offloaded by session {session_id}")


def checkpoint_refs_op(
    store: StoreState, session_id: uuid.UUID, checkpoint_id: uuid.UUID
) -> Op[list[ArtifactRef]]:
    """The artifacts a checkpoint references (its state's and the given ones); a required
    one that is not ready raises ``ArtifactNotFound`` (the sweep protocol never lets that
    happen while the checkpoint exists)."""
    rows = yield Q(query("artifact_checkpoint_refs"), (session_id, str(checkpoint_id)), named=True)
    config = config_of(store)
    for row in rows:
        if row["required_for_resume"] and row["state"] != "ready":
            raise ArtifactNotFound(
                f"artifact {row['artifact_id']}, required to resume checkpoint "
                f"{checkpoint_id}, is {row['state']}"
            )
    return [ref_from_row(config, r) for r in rows]
