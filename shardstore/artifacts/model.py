"""What the artifact store hands out: :class:`ArtifactRef` (the small, JSON-able reference a
turn, a checkpoint or a span carries instead of the bytes) and :class:`ArtifactInfo` (a
listing row), plus the naming rules every backend shares."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core import validate
from ..core.rows import json_fields
from ..errors import InvalidInput

SCHEMA_VERSION = 1
MARKER = "$shardstore.artifact"
"""The key of the JSON form of a reference (and of an offload card): ``{MARKER: {...}}``."""
_NAMESPACE = uuid.UUID("5d6f3c2e-7a41-4f0b-9a51-0c2b9e7d4a13")
OWNER_TYPES = ("turn", "checkpoint", "trajectory", "business_output")
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_MAX_TENANT_SEGMENT = 128


def artifact_id_for(tenant_id: str, sha256: str) -> uuid.UUID:
    """The artifact id of some content in a tenant: the same content in the same tenant
    always gets the same id (so it is stored once); the id reveals nothing of the digest."""
    return uuid.uuid5(_NAMESPACE, f"{tenant_id}\x00{sha256}")


def tenant_segment(tenant_id: str) -> str:
    """The tenant as one safe path segment: characters outside ``[A-Za-z0-9_-]`` are written
    as ``%XX`` (UTF-8), so ``.``, ``..`` and ``/`` cannot name another directory; a segment
    that would be longer than 128 characters is ``~`` + the sha256 of the tenant id."""
    out = "".join(
        ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        for ch in tenant_id
    )
    if len(out) > _MAX_TENANT_SEGMENT:
        return "~" + hashlib.sha256(tenant_id.encode("utf-8", "surrogatepass")).hexdigest()
    return out


def object_key(tenant_id: str, sha256: str) -> str:
    """``{tenant}/sha256/ab/cd/{hash}``: where a backend keeps the object."""
    return f"{tenant_segment(tenant_id)}/sha256/{sha256[:2]}/{sha256[2:4]}/{sha256}"


def owned_key(tenant_id: str, artifact_id: uuid.UUID, sha256: str) -> str | None:
    """The key of the object an ``artifacts`` row governs, derived from the row's tenant and
    sha256 (never from its stored ``object_key``, which a tenant role with raw SQL can
    write): None unless the row is the one the library writes for that content in that
    tenant (``artifact_id == artifact_id_for(tenant_id, sha256)``), so a row of one tenant
    never names another tenant's object, and of the rows of a tenant only one governs each
    object (only it may read or delete it)."""
    if artifact_id != artifact_id_for(tenant_id, sha256):
        return None
    return object_key(tenant_id, sha256)


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """A reference to stored bytes. ``artifact_id`` is the same for the same content in the
    same tenant; ``sha256`` (hex) and ``size_bytes`` describe the bytes exactly; ``uri`` says
    where the backend holds them; ``required_for_resume``: a checkpoint naming it keeps it
    alive for as long as the checkpoint can be restored. ``tokens``: for offloaded text, an
    estimate of its token count (UTF-8 bytes / 4, rounded up; it is never tokenized on the
    append path), so that a context budget can decide whether to expand it; else None."""

    artifact_id: uuid.UUID
    uri: str
    sha256: str
    content_type: str
    size_bytes: int
    schema_version: int = SCHEMA_VERSION
    required_for_resume: bool = False
    tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``{"$shardstore.artifact": {...}}`` (put it in a checkpoint's state:
        :meth:`Store.checkpoint` finds it and references the artifact)."""
        return {MARKER: self.fields()}

    def fields(self) -> dict[str, Any]:
        """The fields as JSON values."""
        return json_fields(
            self,
            artifact_id=str(self.artifact_id),
        )

    @classmethod
    def from_json(cls, value: Any) -> ArtifactRef:
        """A reference from its JSON form (or its fields); ``InvalidInput`` otherwise."""
        if isinstance(value, Mapping) and MARKER in value:
            value = value[MARKER]
        if not isinstance(value, Mapping):
            raise InvalidInput(f"not an artifact reference: {validate.shown(value)}")
        try:
            tokens = value.get("tokens")
            ref = cls(
                artifact_id=uuid.UUID(str(value["artifact_id"])),
                uri=str(value["uri"]),
                sha256=str(value["sha256"]),
                content_type=str(value["content_type"]),
                size_bytes=int(value["size_bytes"]),
                schema_version=int(value.get("schema_version", SCHEMA_VERSION)),
                required_for_resume=bool(value.get("required_for_resume", False)),
                tokens=None if tokens is None else int(tokens),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(
                f"not an artifact reference ({exc}): {validate.shown(value)}"
            ) from None
        return ref


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """One artifact as ``list_artifacts`` shows it: its reference, its state (``uploading``,
    ``ready``, ``deleting``), when it was stored, since when it has had no live reference
    (None: it has one) and how many live references it has."""

    tenant_id: str
    ref: ArtifactRef
    state: str
    backend: str
    created_at: datetime
    unreferenced_since: datetime | None
    live_refs: int
