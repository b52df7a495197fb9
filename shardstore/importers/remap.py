"""New ids for an import beside existing data (``import_jsonl(..., remap_ids=True)``).

Every id that a row is found by is derived from the id in the file and an *import id*
(``import_id=``, else the ``export_id`` the file's export line carries): the same import
of the same file always gives the same ids, so a re-run after a crash recognises what it
already wrote (the session is there: complete, since a session is one transaction) and
writes nothing twice; two imports of one file under two import ids give two copies.

What follows the session id: the session's checkpoint ids (an artifact reference of a
checkpoint names it by id within the tenant, so the copy's must differ from the
original's), their ``parent_id``, run ids (runs are looked up by run id alone), fact ids
(unique per tenant), a fact's ``source_session_id`` when that session is in the file, a
turn reference's owner id (``"<session_id>:<turn_seq>"``), a fork's parent and the origins
of its copied turns when those sessions are in the file, and the owner id of a trajectory or
business-output reference (the owner is the caller's id, and the reference is found by it:
kept as it was, the copy's reference would merge into the original's row). Tenants,
subjects and idempotency keys (scoped by session) stay.

Artifact ids follow the content's address *here* (remapped or not): the same as the
file's for plaintext content in a plaintext store, another one where either side seals
artifacts (a sealed artifact is addressed by a keyed hash, so its id depends on the
scope's key). :meth:`IdMap.place_artifact` records each move, and every reference the file
makes to the artifact (``artifact_ref`` and ``artifact_link`` lines, ``ArtifactRef`` values
inside checkpoint state, tool calls and results and inside turn messages) names the new
id, sha256 and uri."""

from __future__ import annotations

import uuid
from typing import Any

from ..artifacts.model import MARKER, ArtifactRef
from ..core import jsoncodec, validate
from ..errors import InvalidInput

_NAMESPACE = uuid.UUID("0c7d3a52-95e1-4b8e-8f46-2f3c51d07a9e")
MAX_IMPORT_ID = 200


def import_id_of(value: object) -> str | None:
    """A caller's import id checked: None, or a non-empty string of at most 200 characters."""
    if value is None:
        return None
    return validate.text(value, "import_id", limit=MAX_IMPORT_ID)


class IdMap:
    """The id mapping of one remapped import (``IdMap(None)`` maps nothing: ids as in
    the file)."""

    def __init__(self, import_id: str | None) -> None:
        self.import_id = import_id
        self.sessions: dict[uuid.UUID, uuid.UUID] = {}  # sessions of the file met so far
        # artifacts stored here under another id than the file's: (tenant, id in the file)
        self.artifacts: dict[tuple[str, uuid.UUID], ArtifactRef] = {}

    @property
    def active(self) -> bool:
        """Whether ids are remapped."""
        return self.import_id is not None

    def _new(self, kind: str, old: uuid.UUID | str) -> uuid.UUID:
        assert self.import_id is not None
        return uuid.uuid5(_NAMESPACE, f"{self.import_id}\x00{kind}\x00{old}")

    def session(self, old: uuid.UUID) -> uuid.UUID:
        """The imported id of a session of the file."""
        if not self.active:
            return old
        new = self.sessions[old] = self._new("session", old)
        return new

    def source_session(self, old: uuid.UUID) -> uuid.UUID:
        """A session another row names (a fact's source, a fork's parent, the origin of
        copied turns): the copy when that session was in the file, else the id as it is
        (a session of this database, or none)."""
        return self.sessions.get(old, old)

    def owner(self, kind: str, old: str) -> str:
        """The imported owner id of a trajectory or business-output reference: a uuid
        derived from the import id, the owner type and the id in the file."""
        return str(self._new(f"owner\x00{kind}", old)) if self.active else old

    def checkpoint(self, old: uuid.UUID) -> uuid.UUID:
        """The imported id of a checkpoint (and of a checkpoint's parent)."""
        return self._new("checkpoint", old) if self.active else old

    def run(self, old: uuid.UUID) -> uuid.UUID:
        """The imported id of a run."""
        return self._new("run", old) if self.active else old

    def fact(self, old: uuid.UUID) -> uuid.UUID:
        """The imported id of a fact version."""
        return self._new("fact", old) if self.active else old

    def place_artifact(self, tenant: str, old: uuid.UUID, ref: ArtifactRef) -> None:
        """Artifact ``old`` of the file is ``ref`` here."""
        if ref.artifact_id != old:
            self.artifacts[(tenant, old)] = ref

    def artifact(self, tenant: str, old: uuid.UUID) -> uuid.UUID:
        """The id here of artifact ``old`` of the file (itself unless it was moved)."""
        ref = self.artifacts.get((tenant, old))
        return old if ref is None else ref.artifact_id

    def artifact_refs_in(self, tenant: str, value: Any) -> Any:
        """``value`` (a JSON value) with every ``ArtifactRef`` naming a moved artifact of
        ``tenant`` naming it here (its id, sha256 and uri); the other fields stay."""
        if not self.artifacts:
            return value
        return self._rewrite(tenant, value, 0)

    def artifact_refs_in_text(self, tenant: str, text: str | None) -> str | None:
        """As :meth:`artifact_refs_in`, for a value encoded as JSON text."""
        if text is None or not self.artifacts or MARKER not in text:
            return text
        out: str = jsoncodec.encode_json(self._rewrite(tenant, jsoncodec.loads(text), 0), "a value")
        return out

    def _rewrite(self, tenant: str, value: Any, depth: int) -> Any:
        if depth > 300:  # deeper than any value shardstore stores (the codec refuses those)
            return value
        if isinstance(value, list):
            return [self._rewrite(tenant, item, depth + 1) for item in value]
        if not isinstance(value, dict):
            return value
        out = {key: self._rewrite(tenant, item, depth + 1) for key, item in value.items()}
        fields = out.get(MARKER)
        if isinstance(fields, dict):
            try:
                moved = self.artifacts.get((tenant, uuid.UUID(str(fields.get("artifact_id")))))
            except ValueError:
                moved = None
            if moved is not None:
                out[MARKER] = {
                    **fields,
                    "artifact_id": str(moved.artifact_id),
                    "sha256": moved.sha256,
                    "uri": moved.uri,
                }
        return out


def needs_import_id(remap: bool, import_id: str | None, export_id: str | None) -> IdMap:
    """The mapping for an import: none without ``remap``; else by ``import_id``, or the
    file's ``export_id``; ``InvalidInput`` when neither is known."""
    if not remap:
        if import_id is not None:
            raise InvalidInput("import_id goes with remap_ids=True")
        return IdMap(None)
    chosen = import_id if import_id is not None else export_id
    if chosen is None:
        raise InvalidInput(
            "remap_ids needs an import_id: this file has no export line carrying one "
            "(format version 3 has); give import_id= (the same one again on a re-run)",
            cli="--remap-ids needs --import-id ID: this file has no export line carrying one "
            "(format version 3 has); give the same ID again on a re-run",
        )
    return IdMap(chosen)
