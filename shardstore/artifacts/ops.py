"""The artifact store's operations and store methods: put (upload, verify, then make
visible), read, reference, unreference, list.

The protocol (docs/artifacts.md, "How it works", explains the race it wins): bytes are
uploaded first and become visible ('ready') only after their stored hash was verified; a
reference can only name a ready artifact and is written in one statement that also marks
the artifact row, so a sweep racing it either sees the reference or finds the row changed
and leaves it. A put that dies leaves an unreferenced row (or only staged bytes) that the
sweep collects.

* postgres backend: the chunks, their verification and the row go in one transaction; a
  client that dies mid-upload leaves nothing.
* object backends (file, s3): the bytes are staged while hashed, the row is claimed
  ('uploading', committed), then, holding the row's lock, the object is placed at its key,
  read back and verified, and the row becomes 'ready' (with the owner's reference, if
  given) in that transaction.

Each public function whose first parameter is ``store`` is a store method (bound in
``Store`` and ``AsyncStore``)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core import validate
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Emit, Op, Q, Sleep, Try, Tx, collect
from ..encryption.artifacts import (
    FRAME_BYTES,
    HEADER_BYTES,
    MAGIC,
    ArtifactOpener,
    ArtifactSealer,
    is_sealed_bytes,
    refuse_sealed_bytes,
)
from ..encryption.envelope import Sealer
from ..encryption.keystore import DataKey, Scope
from ..errors import (
    ArtifactCorrupt,
    ArtifactNotFound,
    ConfigurationError,
    Conflict,
    InvalidInput,
    KeyShredded,
    PlaintextRefused,
    SessionNotFound,
    SessionPurged,
)
from .backends import ObjectBackend
from .config import ArtifactConfig, config_of
from .model import (
    OWNER_TYPES,
    ArtifactInfo,
    ArtifactRef,
    artifact_id_for,
    object_key,
    owned_key,
)
from .source import CHUNK, Source, next_chunk_op, rewind, source

_CLAIM_ATTEMPTS = 5
MAX_CONTENT_TYPE = 255


def _named(name: str, params: Any, fetch: Any = "all", **kw: Any) -> Q:
    return Q(query(name), params, fetch=fetch, named=True, **kw)


def uri_for(config: ArtifactConfig, backend: str, key: str) -> str:
    """The URI of an object: the configured backend's own form, else ``shardstore://``."""
    if config.backend is not None and config.backend.name == backend:
        return config.backend.uri(key)
    return f"shardstore://{backend}/{key}"


def ref_from_row(config: ArtifactConfig, row: Mapping[str, Any]) -> ArtifactRef:
    """An ArtifactRef from an ``artifacts`` row (its URI derived from the row's tenant and
    sha256, never from the stored ``object_key``)."""
    return ArtifactRef(
        artifact_id=row["artifact_id"],
        uri=uri_for(config, row["backend"], object_key(row["tenant_id"], row["sha256"])),
        sha256=row["sha256"],
        content_type=row["content_type"],
        size_bytes=int(row["size_bytes"]),
        schema_version=int(row["schema_version"]),
        required_for_resume=bool(row["required_for_resume"]),
        tokens=None if row["tokens"] is None else int(row["tokens"]),
    )


# ---------------------------------------------------------------- owners


def owner_args(owner_type: Any, owner_id: Any) -> tuple[str, str, uuid.UUID | None, int | None]:
    """(owner_type, owner_id, session_id, turn_seq) for a reference. A turn is named
    ``"<session_id>:<turn_seq>"``, a checkpoint by its id; trajectories and business
    outputs by any id of up to 512 characters."""
    kind = validate.choice(owner_type, "owner_type", OWNER_TYPES)
    text = validate.text(owner_id, "owner_id", limit=validate.MAX_KEY_CHARS)
    if kind == "turn":
        sid, sep, seq = text.rpartition(":")
        if not sep or not seq.isdigit() or len(seq) > 18:
            raise InvalidInput(f"a turn owner_id is '<session_id>:<turn_seq>', not {text!r:.80}")
        session = validate.session_id(sid)
        return kind, f"{session}:{int(seq)}", session, int(seq)
    if kind == "checkpoint":
        cid = validate.uuid_value(text, "owner_id (a checkpoint id)")
        return kind, str(cid), None, None
    return kind, text, None, None


def turn_owner(session_id: uuid.UUID, turn_seq: int) -> str:
    """The owner_id of a turn."""
    return f"{session_id}:{turn_seq}"


def raise_ref_status(status: str, tenant: str, what: str) -> None:
    """The typed error for a refused reference (nothing was written)."""
    if status == "ok":
        return
    if status == "missing":
        raise ArtifactNotFound(f"no ready artifact {what} in tenant {tenant!r:.80}")
    if status == "purged":
        raise SessionPurged(f"the session of {what} was purged")
    raise ArtifactNotFound(f"the owner of the reference ({what}) does not exist in this tenant")


def ref_op(
    tenant: str,
    artifact_id: uuid.UUID,
    kind: str,
    owner_id: str,
    session: uuid.UUID | None,
    turn: int | None,
    required: bool,
    expires_at: datetime | None,
) -> Op[None]:
    """One reference, in one statement (``artifact_ref_v1``)."""
    (status,) = yield Q(
        query("artifact_ref"),
        (tenant, artifact_id, kind, owner_id, session, turn, required, expires_at),
        fetch="one",
    )
    raise_ref_status(status, tenant, f"{artifact_id} for {kind} {owner_id}")


# ---------------------------------------------------------------- sealing keys

_RESEAL_ATTEMPTS = 4


class _StaleSealingKey(Conflict):
    """Internal: the bytes were sealed under a data-key version that a rotation replaced
    before they were linked to their session; nothing was linked. A ``Conflict``
    (retryable) wherever it reaches a caller."""


@dataclass(frozen=True, slots=True)
class Sealing:
    """The data key an artifact's bytes are sealed under and, when it is a session's key
    (the session's subject's, else its own), that session. A data-key rotation locks the
    rows of its scope's sessions ``FOR UPDATE`` for its final check and keeps the retired
    versions while an artifact linked to one of them is stored, so a link of freshly sealed
    bytes to their session checks the key under that row's lock (:func:`check_sealing_op`).
    ``session`` None: the tenant's key, which no rotation replaces."""

    sealer: Sealer
    key: DataKey
    session: uuid.UUID | None


def check_sealing_op(
    sealing: Sealing | None, what: str, again: str = "nothing was linked, store it again"
) -> Op[None]:
    """In the transaction that links sealed bytes to their session, before the link: lock
    the session row ``FOR KEY SHARE`` (held to the commit; it conflicts only with a
    rotation's final check) and read the scope's current key. Guarantees that the link
    never outlives the version the bytes were sealed under: a link that locks before a
    rotation's final check commits before it, so the rotation sees the link and keeps that
    version; one that locks after reads the version the rotation made current, and a
    mismatch raises ``Conflict`` (retryable; nothing is linked) instead of linking bytes
    whose key the rotation may shred. Nothing to check for ``None`` or the tenant's key.
    ``again``: what the error tells the caller to do."""
    if sealing is None or sealing.session is None:
        return
    from ..encryption.turns import locked_session_key_op

    current = yield from locked_session_key_op(sealing.sealer, sealing.session)
    if current.kid != sealing.key.kid:
        raise _StaleSealingKey(
            f"the data key of session {sealing.session} was rotated while {what} was "
            f"sealed under its previous version; {again}"
        )


def _still_current_op(sealing: Sealing | None, what: str) -> Op[None]:
    """The same comparison without the lock, before work that a stale key would waste (a
    claim, a placement); :func:`check_sealing_op` decides."""
    if sealing is None or sealing.session is None:
        return
    current = yield Call(sealing.sealer.keys.key_for, (sealing.key.scope,))
    if current is None or current.kid != sealing.key.kid:
        raise _StaleSealingKey(
            f"the data key of session {sealing.session} was rotated while {what} was "
            "sealed under its previous version; nothing was stored, store it again"
        )


# ---------------------------------------------------------------- put


@dataclass(frozen=True, slots=True)
class _Put:
    """What a put stores and for whom (validated arguments), whichever backend takes it."""

    tenant: str
    src: Source
    content_type: str
    tokens: int | None
    required: bool
    owner: tuple[str, str, uuid.UUID | None, int | None] | None
    config: ArtifactConfig
    key: DataKey | None = None
    """The owning scope's data key: the bytes are sealed under it (None: stored as given)."""
    sealing: Sealing | None = None
    """Where ``key`` came from, when the put links the bytes to their session (``owner``):
    the link's transaction checks that ``key`` is still the scope's current version."""


def _refuse_magic(piece: bytes, first: bool) -> None:
    # a plaintext artifact that began like a sealed one would read back as "encrypted"
    if first and is_sealed_bytes(piece):
        raise InvalidInput(
            "data begins with the bytes that mark an encrypted artifact; a store without "
            "encryption= does not store it (wrap or prefix it)"
        )


def _put_postgres_sealed_op(put: _Put) -> Op[ArtifactRef]:
    """The postgres put of a sealed artifact: frames as chunks 1..n while they stream, the
    header (known once the content address is) as chunk 0, all in one transaction."""
    assert put.key is not None
    tenant, src, config = put.tenant, put.src, put.config
    sealing = ArtifactSealer(put.key)
    upload = uuid.uuid4()
    digests: list[str] = [""]
    yield Tx.BEGIN
    while True:
        piece = yield from next_chunk_op(src)
        if not piece:
            break
        frame = sealing.frame(piece)
        digests.append(hashlib.sha256(frame).hexdigest())
        yield Q(
            query("artifact_chunk_put"), (upload, len(digests) - 1, tenant, frame), fetch="none"
        )
    sha = sealing.address()
    aid = artifact_id_for(tenant, sha)
    key = object_key(tenant, sha)
    header = sealing.header(tenant, aid)
    digests[0] = hashlib.sha256(header).hexdigest()
    yield Q(query("artifact_chunk_put"), (upload, 0, tenant, header), fetch="none")
    if put.owner is not None:
        yield from check_sealing_op(put.sealing, f"artifact {aid}")
    row = yield _named(
        "artifact_commit_pg",
        (
            tenant,
            aid,
            sha,
            sealing.size,
            put.content_type,
            key,
            upload,
            digests,
            put.tokens,
            put.required,
        ),
        fetch="one",
    )
    return (yield from _committed_pg_op(put, config, aid, sha, key, row))


def _committed_pg_op(
    put: _Put, config: ArtifactConfig, aid: uuid.UUID, sha: str, key: str, row: Any
) -> Op[ArtifactRef]:
    if row["status"] == "corrupt":
        raise ArtifactCorrupt(f"the stored chunks of {aid} do not match what was sent")
    if row["status"] == "busy":
        raise Conflict(f"artifact {aid} is being stored or removed in another backend; retry")
    owner = put.owner
    if owner is not None:
        yield from ref_op(
            put.tenant, aid, owner[0], owner[1], owner[2], owner[3], put.required, None
        )
    yield Tx.COMMIT
    return _made_ref(config, aid, sha, key, row)


def _put_postgres_op(put: _Put) -> Op[ArtifactRef]:
    if put.key is not None:
        return (yield from _put_postgres_sealed_op(put))
    tenant, src, content_type, tokens = put.tenant, put.src, put.content_type, put.tokens
    required, config = put.required, put.config
    upload = uuid.uuid4()
    digest = hashlib.sha256()
    digests: list[str] = []
    size = 0
    yield Tx.BEGIN
    while True:
        piece = yield from next_chunk_op(src)
        if not piece:
            break
        _refuse_magic(piece, not digests)
        digest.update(piece)
        digests.append(hashlib.sha256(piece).hexdigest())
        yield Q(
            query("artifact_chunk_put"), (upload, len(digests) - 1, tenant, piece), fetch="none"
        )
        size += len(piece)
    sha = digest.hexdigest()
    aid = artifact_id_for(tenant, sha)
    key = object_key(tenant, sha)
    row = yield _named(
        "artifact_commit_pg",
        (tenant, aid, sha, size, content_type, key, upload, digests, tokens, required),
        fetch="one",
    )
    return (yield from _committed_pg_op(put, config, aid, sha, key, row))


def _made_ref(
    config: ArtifactConfig, aid: uuid.UUID, sha: str, key: str, row: Mapping[str, Any]
) -> ArtifactRef:
    return ArtifactRef(
        artifact_id=aid,
        uri=uri_for(config, row["backend"], key),
        sha256=sha,
        content_type=row["content_type"],
        size_bytes=int(row["size_bytes"]),
        required_for_resume=bool(row["required_for_resume"]),
        tokens=None if row["tokens"] is None else int(row["tokens"]),
    )


def _put_object_op(backend: ObjectBackend, put: _Put) -> Op[ArtifactRef]:
    tenant, src, content_type, tokens = put.tenant, put.src, put.content_type, put.tokens
    required, owner, config = put.required, put.owner, put.config
    staging = yield Call(backend.stage)
    try:
        digest = hashlib.sha256()
        size = 0
        sealing = None if put.key is None else ArtifactSealer(put.key)
        if sealing is not None:
            # room for the header, written once the content address is known
            yield Call(staging.write, (b"\x00" * HEADER_BYTES,))
        while True:
            piece = yield from next_chunk_op(src)
            if not piece:
                break
            if sealing is not None:
                yield Call(staging.write, (sealing.frame(piece),))
                continue
            _refuse_magic(piece, size == 0)
            digest.update(piece)
            size += len(piece)
            yield Call(staging.write, (piece,))
        if sealing is None:
            sha = digest.hexdigest()
            aid = artifact_id_for(tenant, sha)
            yield Call(staging.seal)
            stored_sha, stored_size = sha, size
        else:
            sha, size = sealing.address(), sealing.size
            aid = artifact_id_for(tenant, sha)
            yield Call(staging.write_head, (sealing.header(tenant, aid),))
            yield Call(staging.seal)
            # the object is the sealed bytes: verified against their own digest
            stored_sha, stored_size = yield Call(staging.digest)
        key = object_key(tenant, sha)
        if owner is not None:
            yield from _still_current_op(put.sealing, f"artifact {aid}")
        claim = (tenant, aid, sha, size, content_type, backend.name, key, tokens, required)
        for attempt in range(_CLAIM_ATTEMPTS):
            row = yield _named("artifact_claim", claim, fetch="one")
            if row["status"] == "busy":
                yield Sleep(0.05 * (attempt + 1))
                continue
            if row["status"] == "existing":
                if owner is not None:
                    yield Tx.BEGIN
                    yield from check_sealing_op(put.sealing, f"artifact {aid}")
                    yield from ref_op(tenant, aid, *owner, required, None)
                    yield Tx.COMMIT
                return _made_ref(config, aid, sha, key, row)
            yield Tx.BEGIN
            (state,) = yield Q(query("artifact_lock_upload"), (tenant, aid), fetch="one")
            if state == "uploading":
                # at the key derived here, whatever the row says: a row taken over from a
                # dead put or a sweep may carry a key a tenant role wrote
                yield Call(backend.place, (staging, key))
                ok = yield Call(backend.verify, (key, stored_sha, stored_size))
                if not ok:
                    raise ArtifactCorrupt(
                        f"the object stored for {aid} does not match its sha256 and size"
                    )
                yield Q(query("artifact_mark_ready"), (tenant, aid), fetch="one")
            if state in ("uploading", "ready"):
                if owner is not None:
                    # the lock is taken last, so a rotation's final check waits for the
                    # link and the commit only, never for the placement
                    yield from check_sealing_op(put.sealing, f"artifact {aid}")
                    yield from ref_op(tenant, aid, *owner, required, None)
                yield Tx.COMMIT
                return _made_ref(config, aid, sha, key, row)
            yield Tx.COMMIT  # gone or being deleted meanwhile: claim again
        raise Conflict(f"artifact {aid} kept changing while it was stored; retry")
    finally:
        backend.discard(staging)  # a local file: no step needed, and none may run here


def put_op(
    config: ArtifactConfig,
    tenant: str,
    src: Source,
    content_type: str,
    tokens: int | None = None,
    required: bool = False,
    owner: tuple[str, str, uuid.UUID | None, int | None] | None = None,
    key: DataKey | None = None,
    sealing: Sealing | None = None,
) -> Op[ArtifactRef]:
    """Store the bytes of ``src`` in the configured backend (validated arguments); sealed
    under ``key`` when given (:mod:`shardstore.encryption.artifacts`). ``sealing`` (where
    ``key`` came from) with an ``owner``: the link to the owner's session checks that
    ``key`` is still the current version (:func:`check_sealing_op`; ``Conflict`` and
    nothing linked otherwise)."""
    put = _Put(tenant, src, content_type, tokens, required, owner, config, key, sealing)
    if config.backend is None:
        return (yield from _put_postgres_op(put))
    return (yield from _put_object_op(config.backend, put))


def _owner(value: Any) -> tuple[str, str, uuid.UUID | None, int | None] | None:
    if value is None:
        return None
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise InvalidInput(
            f"owner must be (owner_type, owner_id) or None, not {validate.shown(value)}"
        )
    return owner_args(value[0], value[1])


def put_artifact(
    store: StoreState,
    tenant_id: str,
    data: bytes | str | Any,
    *,
    content_type: str,
    required_for_resume: bool = False,
    owner: tuple[str, str] | None = None,
) -> Op[ArtifactRef]:
    """Store ``data`` (bytes, a str as UTF-8, or a binary file object, read 1 MiB at a time
    and never held whole in memory) as an artifact of ``tenant_id`` and return its
    reference. The same content in the same tenant is stored once: every put of it returns
    the same ``artifact_id``. The bytes are verified against their sha256 where they are
    stored before the artifact can be referenced.

    ``owner``: ``(owner_type, owner_id)`` (as for :meth:`ref_artifact`) references it in the
    same transaction as it becomes visible. Without an owner the artifact is kept for the
    store's ``artifact_grace`` (default one day) and then swept unless referenced.
    ``InvalidInput`` for bad arguments; ``ArtifactCorrupt`` if the stored bytes do not verify
    (nothing references them).

    On a store connected with ``encryption=`` the bytes are sealed before they leave the
    client, under the owner's session key (a ``turn`` or ``checkpoint`` owner: its
    session's subject key, else the session's own) or else the tenant's key, bound to the
    tenant and the artifact id; the content address (``sha256`` of the reference) is then
    a keyed hash, so equal content is stored once per key, never linked across keys
    (docs/artifacts.md, "Encryption"). An owner this tenant does not have is refused
    before anything is stored."""
    tenant = validate.text(tenant_id, "tenant_id")
    ctype = validate.text(content_type, "content_type", limit=MAX_CONTENT_TYPE)
    required = validate.flag(required_for_resume, "required_for_resume")
    who = _owner(owner)
    src = source(data)
    config = config_of(store)
    sealer = store.ctx.sealer
    if sealer is None:
        return (yield from put_op(config, tenant, src, ctype, None, required, who))
    session = who[2] if who is not None and who[0] == "turn" else None
    checkpoint = uuid.UUID(who[1]) if who is not None and who[0] == "checkpoint" else None
    if who is None:  # the tenant's key: no rotation replaces it, nothing is linked
        sealing = yield from sealing_op(sealer, tenant, None)
        return (yield from put_op(config, tenant, src, ctype, None, required, None, sealing.key))

    def put_linked(sealing: Sealing) -> Op[ArtifactRef]:
        return put_op(config, tenant, src, ctype, None, required, who, sealing.key, sealing)

    return (yield from resealing_op(sealer, tenant, session, checkpoint, src, put_linked))


def resealing_op(
    sealer: Sealer,
    tenant: str,
    session: uuid.UUID | None,
    checkpoint: uuid.UUID | None,
    src: Source,
    put_linked: Callable[[Sealing], Op[ArtifactRef]],
) -> Op[ArtifactRef]:
    """``put_linked(sealing)``: the bytes of ``src`` sealed under the owner's current key and
    linked to its session (checked by :func:`check_sealing_op`), done again under the new
    version when a rotation replaced the key meanwhile: bytes in memory are sealed again, a
    file object (read once) gets ``Conflict``; after a few rotations in a row, ``Conflict``
    (retryable)."""
    for _attempt in range(_RESEAL_ATTEMPTS):
        sealing = yield from sealing_op(sealer, tenant, session, checkpoint)
        try:
            ref: ArtifactRef = yield Try(put_linked(sealing))
            return ref
        except _StaleSealingKey:
            if not rewind(src):
                raise
    raise Conflict("the owner's data key kept being rotated while the artifact was stored; retry")


def sealing_op(
    sealer: Sealer,
    tenant: str,
    session: uuid.UUID | None,
    checkpoint: uuid.UUID | None = None,
) -> Op[Sealing]:
    """The data key an artifact's bytes are sealed under, with the session it belongs to
    (None for the tenant's), for the link's check (:func:`check_sealing_op`): the session's
    key (its subject's, else the session's own) when the artifact belongs to a session
    (``session``, or the session of ``checkpoint``), else the tenant's. ``SessionNotFound`` /
    ``SessionPurged`` / ``ArtifactNotFound`` for an owner this tenant does not have, before
    any byte is stored."""
    from ..encryption.turns import session_scope

    if checkpoint is not None:
        found = yield _named("artifact_checkpoint_session", (tenant, checkpoint), fetch="one")
        if found is None:
            raise ArtifactNotFound(f"no checkpoint {checkpoint} in tenant {tenant!r:.80}")
        session = found["session_id"]
    scope = Scope("tenant", tenant, "")
    if session is not None:
        owners = yield _named("session_owners", (session,), fetch="one")
        if owners is None or owners["tenant_id"] != tenant:
            raise SessionNotFound(f"session {session} does not exist in tenant {tenant!r:.80}")
        if owners["purged"]:
            raise SessionPurged(f"session {session} was purged")
        scope = session_scope(tenant, owners["subject_id"], session)
    key = yield Call(sealer.keys.key_for, (scope,))
    assert key is not None
    return Sealing(sealer, key, session)


# ---------------------------------------------------------------- read


def _row_op(tenant: str, artifact_id: uuid.UUID) -> Op[Mapping[str, Any]]:
    row = yield _named("artifact_get", (tenant, artifact_id), fetch="one")
    if row is None or row["state"] != "ready":
        raise ArtifactNotFound(f"no artifact {artifact_id} in tenant {tenant!r:.80}")
    return row  # type: ignore[no-any-return]


def read_op(
    config: ArtifactConfig, tenant: str, artifact_id: uuid.UUID, sealer: Sealer | None = None
) -> Op[None]:
    """Emit the artifact's bytes chunk by chunk (postgres: from one snapshot), then check
    them against its sha256 and size (``ArtifactCorrupt`` at the end otherwise).

    With ``sealer`` (a store connected with ``encryption=``) the stored bytes must be
    sealed: the header is opened before any byte is emitted (``DecryptionFailed`` when it
    belongs to another artifact or tenant, ``KeyShredded`` when its key is gone,
    ``PlaintextRefused`` for plaintext bytes), then each frame as it is read. Without one,
    sealed bytes are refused (``EncryptionRequired``) before any byte is emitted."""
    digest = hashlib.sha256()
    size = 0
    yield Tx.BEGIN_SNAPSHOT
    row = yield from _row_op(tenant, artifact_id)
    key = owned_key(tenant, artifact_id, row["sha256"])
    if key is None:  # not a row the library wrote: it names no bytes this tenant may read
        yield Tx.COMMIT
        raise ArtifactCorrupt(
            f"artifact {artifact_id} does not match its content address (tenant, sha256)"
        )
    what = f"artifact {artifact_id}"
    opener = (
        None
        if sealer is None
        else ArtifactOpener(sealer.keys, tenant, artifact_id, row["sha256"], int(row["size_bytes"]))
    )
    if row["backend"] == "postgres":
        chunks = (tenant, row["upload_id"])  # by tenant too: one shard on Citus
        (count,) = yield Q(query("artifact_chunk_count"), chunks, fetch="one")
        for chunk_no in range(int(count)):
            (data,) = yield Q(query("artifact_chunk_get"), (*chunks, chunk_no), fetch="one")
            piece = bytes(data)
            if opener is not None:
                if chunk_no == 0:
                    opener.header(piece)
                    continue
                piece = opener.frame(piece)
            elif chunk_no == 0:
                refuse_sealed_bytes(piece, what)
            digest.update(piece)
            size += len(piece)
            yield Emit([piece])
        yield Tx.COMMIT
        if opener is not None:
            if int(count) == 0:  # an empty plaintext artifact: sealed ones have a header
                raise PlaintextRefused(
                    f"{what} is stored in plaintext, but this store reads encrypted "
                    "artifacts only; it is not returned"
                )
            opener.finish()
            return
    else:
        yield Tx.COMMIT
        handle = yield from _open_object_op(config, row, artifact_id, key)
        try:
            if opener is not None:
                opener.header((yield from _read_exact_op(handle, HEADER_BYTES)))
                while piece := (yield from _read_exact_op(handle, FRAME_BYTES)):
                    yield Emit([opener.frame(piece)])
                opener.finish()
                return
            first = True
            while True:
                piece = yield Call(handle.read, (CHUNK,))
                if not piece:
                    break
                if first:
                    refuse_sealed_bytes(bytes(piece), what)
                    first = False
                digest.update(piece)
                size += len(piece)
                yield Emit([bytes(piece)])
        finally:
            handle.close()
    if size != int(row["size_bytes"]) or digest.hexdigest() != row["sha256"]:
        raise ArtifactCorrupt(f"artifact {artifact_id} does not match its sha256 and size")


def _open_object_op(config: ArtifactConfig, row: Any, artifact_id: uuid.UUID, key: str) -> Op[Any]:
    """The artifact's object opened in this store's backend (an object backend's row):
    ``ConfigurationError`` when the store uses another backend, ``ArtifactNotFound`` when the
    object is gone."""
    backend = config.backend
    if backend is None or backend.name != row["backend"]:
        stored = f"artifact {artifact_id} is stored in the {row['backend']} backend"
        uses = f"this store uses {config.url!r:.80}"
        raise ConfigurationError(
            f"{stored}; connect with artifacts= pointing at it ({uses})",
            cli=f"{stored}; give --store pointing at it ({uses})",
        )
    try:
        return (yield Call(backend.open, (key,)))
    except FileNotFoundError:
        raise ArtifactNotFound(
            f"artifact {artifact_id}: its object is gone from the backend"
        ) from None


def read_stored_op(config: ArtifactConfig, tenant: str, artifact_id: uuid.UUID) -> Op[None]:
    """Emit the artifact's bytes exactly as stored, unopened (a sealed artifact: its header
    and frames, as the object backends hold them), chunk by chunk (postgres: from one
    snapshot). Only a row the library wrote for this tenant is read (``ArtifactCorrupt``
    otherwise); nothing is checked against the content address, since sealed bytes are
    authenticated by whoever opens them (an export without ``decrypt``: the importer)."""
    yield Tx.BEGIN_SNAPSHOT
    row = yield from _row_op(tenant, artifact_id)
    key = owned_key(tenant, artifact_id, row["sha256"])
    if key is None:
        yield Tx.COMMIT
        raise ArtifactCorrupt(
            f"artifact {artifact_id} does not match its content address (tenant, sha256)"
        )
    if row["backend"] == "postgres":
        chunks = (tenant, row["upload_id"])
        (count,) = yield Q(query("artifact_chunk_count"), chunks, fetch="one")
        for chunk_no in range(int(count)):
            (data,) = yield Q(query("artifact_chunk_get"), (*chunks, chunk_no), fetch="one")
            yield Emit([bytes(data)])
        yield Tx.COMMIT
        return
    yield Tx.COMMIT
    handle = yield from _open_object_op(config, row, artifact_id, key)
    try:
        while piece := (yield Call(handle.read, (CHUNK,))):
            yield Emit([bytes(piece)])
    finally:
        handle.close()


def _read_exact_op(handle: Any, n: int) -> Op[bytes]:
    """``n`` bytes from ``handle``, fewer only at its end (a stream may return less)."""
    parts: list[bytes] = []
    have = 0
    while have < n:
        piece = yield Call(handle.read, (n - have,))
        if not piece:
            break
        parts.append(bytes(piece))
        have += len(piece)
    return b"".join(parts)


def read_all_op(
    config: ArtifactConfig, tenant: str, artifact_id: uuid.UUID, sealer: Sealer | None = None
) -> Op[bytes]:
    """The artifact's bytes, whole (opened with ``sealer``, as :func:`read_op` says)."""
    pieces = yield from collect(read_op(config, tenant, artifact_id, sealer))
    return b"".join(pieces)


def _aid(value: Any) -> uuid.UUID:
    return validate.uuid_value(value, "artifact_id")


def get_artifact(store: StoreState, tenant_id: str, artifact_id: uuid.UUID | str) -> Op[bytes]:
    """The artifact's bytes, checked against its sha256 and size (``ArtifactCorrupt``
    otherwise). ``ArtifactNotFound`` if this tenant has no ready artifact of that id.
    Sealed bytes are opened with the store's key store (``DecryptionFailed`` when they
    belong to another artifact or tenant, ``KeyShredded`` once their key was shredded,
    ``PlaintextRefused`` for plaintext bytes on an encrypted store, ``EncryptionRequired``
    for sealed bytes on a store without ``encryption=``); nothing is returned then."""
    tenant = validate.text(tenant_id, "tenant_id")
    return (yield from read_all_op(config_of(store), tenant, _aid(artifact_id), store.ctx.sealer))


def open_artifact(store: StoreState, tenant_id: str, artifact_id: uuid.UUID | str) -> Op[None]:
    """The artifact as a readable binary stream (``read(n)``; asyncio: ``stream = await
    store.open_artifact(...)``, then ``await stream.read(n)``), fetched 1 MiB at a time;
    the sha256 is checked as the end is read. Holds a connection (postgres backend) until
    read to the end or closed."""
    tenant = validate.text(tenant_id, "tenant_id")
    yield from read_op(config_of(store), tenant, _aid(artifact_id), store.ctx.sealer)


# ---------------------------------------------------------------- references


def ref_artifact(
    store: StoreState,
    tenant_id: str,
    artifact_id: uuid.UUID | str,
    owner_type: str,
    owner_id: str,
    *,
    required_for_resume: bool = False,
    expires_at: datetime | None = None,
) -> Op[None]:
    """Record that ``(owner_type, owner_id)`` needs the artifact; one statement. While a
    live reference exists no sweep deletes the artifact. ``owner_type`` is ``turn`` (owner_id
    ``"<session_id>:<turn_seq>"``, an existing turn), ``checkpoint`` (a checkpoint id),
    ``trajectory`` or ``business_output`` (any id). A turn's or checkpoint's reference goes
    with it (purges, retention, rewind, keep_checkpoints). ``expires_at``: the reference
    stops counting then (a checkpoint's reference with ``required_for_resume`` counts while
    the checkpoint exists, whatever ``expires_at`` says). Repeating a reference keeps one.
    ``ArtifactNotFound`` for an artifact (or turn, checkpoint) this tenant does not have.

    On a store connected with ``encryption=``, a reference from a turn or checkpoint links
    the artifact to its session, and a data-key rotation of that session's scope keeps the
    versions that linked artifacts are sealed under. So bytes sealed under that scope's key
    are referenced only while the version they name is the current one, checked under the
    session row's lock in the reference's transaction (the lock a rotation's final check
    waits for, so it sees the reference): ``KeyShredded`` when that version was shredded,
    ``InvalidInput`` when a rotation retired it (it is shredded at the next rotation that
    finds nothing linked, and a reference cannot keep it; store the bytes again with
    ``put_artifact(..., owner=...)``); nothing is referenced then. Bytes sealed under
    another scope's key (the tenant's, which no rotation replaces, or another session's,
    whose own links keep it) are referenced as before."""
    tenant = validate.text(tenant_id, "tenant_id")
    aid = _aid(artifact_id)
    kind, oid, session, turn = owner_args(owner_type, owner_id)
    required = validate.flag(required_for_resume, "required_for_resume")
    expires = validate.optional_instant(expires_at, "expires_at")
    sealer = store.ctx.sealer
    if sealer is None or (session is None and kind != "checkpoint"):
        yield from ref_op(tenant, aid, kind, oid, session, turn, required, expires)
        return
    checkpoint = uuid.UUID(oid) if kind == "checkpoint" else None
    try:
        sealing = yield from sealing_op(sealer, tenant, session, checkpoint)
    except SessionNotFound:
        raise ArtifactNotFound(
            f"the owner of the reference ({kind} {oid}) does not exist in this tenant"
        ) from None
    kid = yield from _sealed_kid_op(config_of(store), tenant, aid)
    if kid is None or kid.split(".", 1)[0] != sealing.key.scope.file_stem:
        yield from ref_op(tenant, aid, kind, oid, session, turn, required, expires)
        return
    yield Tx.BEGIN
    yield from _check_sealed_kid_op(sealing, kid, aid)
    yield from ref_op(tenant, aid, kind, oid, session, turn, required, expires)
    yield Tx.COMMIT


def _sealed_kid_op(config: ArtifactConfig, tenant: str, artifact_id: uuid.UUID) -> Op[str | None]:
    """The data-key id in a sealed artifact's header, as its backend stores it; None for
    bytes that are not sealed (or a header that names no key: its read refuses it).
    ``ArtifactNotFound`` when this tenant has no ready artifact of that id."""
    yield Tx.BEGIN_SNAPSHOT
    row = yield from _row_op(tenant, artifact_id)
    key = owned_key(tenant, artifact_id, row["sha256"])
    if key is None:
        yield Tx.COMMIT
        return None
    if row["backend"] == "postgres":
        chunks = (tenant, row["upload_id"])
        first = yield Q(query("artifact_chunk_get"), (*chunks, 0), fetch="one")
        yield Tx.COMMIT
        head = b"" if first is None else bytes(first[0])[:HEADER_BYTES]
    else:
        yield Tx.COMMIT
        handle = yield from _open_object_op(config, row, artifact_id, key)
        try:
            head = yield from _read_exact_op(handle, HEADER_BYTES)
        finally:
            handle.close()
    if not is_sealed_bytes(head):
        return None
    try:
        kid = json.loads(head[len(MAGIC) :].rstrip(b" "))["k"]
    except (ValueError, TypeError, KeyError):
        return None
    return kid if type(kid) is str else None


def _check_sealed_kid_op(sealing: Sealing, kid: str, artifact_id: uuid.UUID) -> Op[None]:
    """In the reference's transaction: lock the session row ``FOR KEY SHARE`` and require
    ``kid`` (the version the bytes are sealed under, of the session's scope) to be the
    scope's current version. A retired version is not enough, even one a rotation kept: a
    rotation shreds every retired version after its final check commits, so a reference
    written between that commit and the shred would name shredded bytes."""
    from ..encryption.turns import locked_session_key_op

    assert sealing.session is not None
    current = yield from locked_session_key_op(sealing.sealer, sealing.session)
    if current.kid == kid:
        return
    try:
        sealing.sealer.keys.key(kid)
    except KeyShredded:
        raise KeyShredded(
            f"artifact {artifact_id} is sealed under a data key of session {sealing.session} "
            "that was shredded; nothing was referenced"
        ) from None
    raise InvalidInput(
        f"artifact {artifact_id} is sealed under a retired version of the data key of "
        f"session {sealing.session} (a rotation replaced it, and shreds it once nothing "
        "linked names it); nothing was referenced: store the bytes again with "
        "put_artifact(..., owner=...)"
    )


def unref_artifact(
    store: StoreState, tenant_id: str, artifact_id: uuid.UUID | str, owner_type: str, owner_id: str
) -> Op[bool]:
    """Remove one reference; True if it existed. An artifact left without a live reference
    is marked in the same statement and deleted by a sweep after ``artifact_grace`` (counted
    from this call)."""
    tenant = validate.text(tenant_id, "tenant_id")
    aid = _aid(artifact_id)
    kind, oid, _session, _turn = owner_args(owner_type, owner_id)
    (existed,) = yield Q(query("artifact_unref"), (tenant, aid, kind, oid), fetch="one")
    return bool(existed)


def list_artifacts(
    store: StoreState, tenant_id: str, *, state: str | None = None, limit: int | None = None
) -> Op[list[ArtifactInfo]]:
    """A tenant's artifacts, newest first (at most ``limit``; ``state``: only ``uploading``,
    ``ready`` or ``deleting`` ones), with their live reference counts."""
    tenant = validate.text(tenant_id, "tenant_id")
    if state is not None:
        validate.choice(state, "state", ("uploading", "ready", "deleting"))
    params = {"tenant": tenant, "state": state, "limit": validate.optional_count(limit, "limit")}
    rows = yield _named("artifact_list", params)
    config = config_of(store)
    return [
        ArtifactInfo(
            tenant_id=r["tenant_id"],
            ref=ref_from_row(config, r),
            state=r["state"],
            backend=r["backend"],
            created_at=r["created_at"],
            unreferenced_since=r["unreferenced_since"],
            live_refs=int(r["live_refs"]),
        )
        for r in rows
    ]


def session_tenant_op(session_id: uuid.UUID) -> Op[str]:
    """The tenant of a live session (``SessionNotFound`` / ``SessionPurged``)."""
    row = yield _named("artifact_session_tenant", (session_id,), fetch="one")
    if row is None:
        raise SessionNotFound(f"session {session_id} does not exist")
    if row["purged"]:
        raise SessionPurged(f"session {session_id} was purged")
    return str(row["tenant_id"])
