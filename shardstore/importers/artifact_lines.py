"""Artifacts in a ``shardstore.jsonl`` export (format version 3): the bytes a session's
turns, checkpoints and trajectories reference, and the references themselves.

An exported session is preceded by one ``artifact`` line per artifact it references that
the export has not written yet (each artifact once per file), followed by its bytes as
``artifact_part`` lines of base64 (at most :data:`PART` raw bytes each, so that no line
needs more memory than that); ``export_sessions(no_artifact_bytes=True)`` writes the
``artifact`` line alone (``"bytes": false``). The session's ``artifact_ref`` lines come
after its other state lines.

The importer checks each artifact's parts as they come (consecutive, base64, no more bytes
than announced) while hashing them into a spooled temporary file (memory-bound: at most
8 MiB of it in memory), and refuses the artifact when its size or sha256 differ from the
line (or its id is not the content's address in its tenant). The checked artifacts wait
for the session that follows them and are stored in its transaction with the store's own
put (``put_op``, into whatever backend the importing store uses; one already ready here
is not stored again), so a refused session takes its artifacts with it (on the postgres
backend entirely; an object backend may keep the object, at its content address, without
a row, which a re-run or a later put of the same content reuses). Artifacts after the last
session are stored in a transaction of their own. A reference is written in the session's
transaction by ``artifact_ref_v1`` (the artifact must be ready in the session's tenant);
one naming an artifact exported without bytes that this database does not hold is listed
in the report's ``skipped``.

Encryption at rest: an export of a store with ``encryption=`` writes each artifact's
sealed object as stored (``"sealed": true``, ``stored_bytes``, ``stored_sha256``) or, with
``decrypt=True``, its plaintext (``"decrypted": true``, the plain sha256); the line comes
after a first pass over those bytes, which tells their digest. The importer opens a sealed
artifact as it reads it, before anything is written, and stores every artifact with the
put of the importing store (sealed under the owning scope's key there when it encrypts),
so its id is its address here; :class:`~.remap.IdMap` carries the move to every reference
the file makes to it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..artifacts.config import config_of
from ..artifacts.model import artifact_id_for
from ..artifacts.ops import (
    MAX_CONTENT_TYPE,
    Sealing,
    check_sealing_op,
    put_op,
    raise_ref_status,
    read_op,
    read_stored_op,
    ref_from_row,
)
from ..artifacts.source import CHUNK, source
from ..core import validate
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q, relay
from ..encryption.artifacts import (
    FRAME_BYTES,
    HEADER_BYTES,
    MAGIC,
    ArtifactOpener,
    mac_key,
    refuse_sealed_bytes,
)
from ..encryption.envelope import Sealer
from ..encryption.keystore import DataKey, Scope
from ..encryption.turns import locked_subject_key_op, session_scope
from ..errors import ArtifactCorrupt, DecryptionFailed, ImportRejected, KeyShredded
from .fields import _int, _opt_instant, _opt_int, _text, _uuid
from .records import line, paged_op, record_lines
from .remap import IdMap

PART = 512 * 1024
"""Raw bytes per ``artifact_part`` line (about 700,000 characters of base64)."""
SPOOL = 8 << 20  # bytes of an artifact an import holds in memory before spilling to disk
REF_OWNERS = ("turn", "checkpoint", "trajectory")  # the session-scoped reference kinds
LOOSE_OWNERS = ("trajectory", "business_output")  # references that may name no session


# ---------------------------------------------------------------- export


class Written:
    """The artifacts an export has written (each goes into the file once): ids per
    tenant, so memory grows with distinct artifacts, not with turns. ``sealer``: the
    exporting store's, when it was connected with ``encryption=`` (its artifacts are
    sealed); ``decrypt``: their bytes go into the file opened, else as stored."""

    def __init__(self, with_bytes: bool, sealer: Sealer | None = None, decrypt: bool = False):
        self.with_bytes = with_bytes
        self.sealer = sealer
        self.decrypt = decrypt and sealer is not None
        self.seen: set[tuple[str, uuid.UUID]] = set()
        self.artifacts = 0
        self.refs = 0
        self.links = 0
        self.bytes = 0


def artifact_line(row: Mapping[str, Any], with_bytes: bool) -> dict[str, Any]:
    """The ``artifact`` line of an ``artifacts`` row (its parts follow when ``with_bytes``)."""
    size = int(row["size_bytes"])
    return {
        "kind": "artifact",
        "tenant_id": row["tenant_id"],
        "artifact_id": str(row["artifact_id"]),
        "sha256": row["sha256"],
        "size_bytes": size,
        "content_type": row["content_type"],
        "tokens": None if row["tokens"] is None else int(row["tokens"]),
        "required_for_resume": bool(row["required_for_resume"]),
        "created_at": row["created_at"].isoformat(),
        "bytes": with_bytes,
        "parts": -(-size // PART) if with_bytes else 0,
    }


def _reading(store: StoreState, row: Mapping[str, Any], written: Written) -> Op[None]:
    """The bytes an export writes of an artifact: as stored (plaintext, or sealed when
    the store encrypts and the export does not decrypt), or opened by the store's reader."""
    config, tenant, aid = config_of(store), row["tenant_id"], row["artifact_id"]
    if written.sealer is not None and not written.decrypt:
        return read_stored_op(config, tenant, aid)
    return read_op(config, tenant, aid, written.sealer)


def _measure_op(store: StoreState, row: Mapping[str, Any], written: Written) -> Op[tuple[str, int]]:
    """A first pass over the bytes the export will write: their sha256 and size (the
    line announces both before its parts; one pass more keeps memory at one chunk)."""
    digest = hashlib.sha256()
    size = 0

    def count(pieces: Any) -> Op[None]:
        nonlocal size
        for piece in pieces:
            digest.update(piece)
            size += len(piece)
        return
        yield  # a generator that yields nothing

    yield from relay(_reading(store, row, written), count)
    return digest.hexdigest(), size


def _parts_op(store: StoreState, row: Mapping[str, Any], written: Written, write: Any) -> Op[int]:
    """The artifact's bytes as ``artifact_part`` lines, read chunk by chunk (the store's
    read checks them against their sha256 at the end); returns the parts written."""
    aid = str(row["artifact_id"])
    parts = 0
    carry = b""  # bytes short of a whole part: stored chunks need not be PART-aligned

    def split(data: bytes, final: bool) -> list[str]:
        nonlocal parts, carry
        lines = []
        at = 0
        while len(data) - at >= PART or (final and at < len(data)):
            text = base64.b64encode(data[at : at + PART]).decode("ascii")
            part = {"kind": "artifact_part", "artifact_id": aid, "n": parts, "data": text}
            lines.append(line(part))
            parts += 1
            at += PART
        carry = data[at:]
        return lines

    def emit(pieces: Any) -> Op[None]:
        lines: list[str] = []
        for piece in pieces:
            lines += split(carry + piece, False)
        if lines:
            yield Call(write, (lines,))

    yield from relay(_reading(store, row, written), emit)
    rest = split(carry, True)
    if rest:
        yield Call(write, (rest,))
    return parts


def _artifact_rows_op(
    store: StoreState, rows: Sequence[Mapping[str, Any]], written: Written, write: Any
) -> Op[None]:
    """The ``artifact`` lines (and parts) of the rows this export has not written yet."""
    for row in rows:
        key = (row["tenant_id"], row["artifact_id"])
        if key in written.seen:
            continue
        written.seen.add(key)
        head = artifact_line(row, written.with_bytes)
        if written.with_bytes and written.sealer is not None:
            # the line says the sha256 and size of what its parts hold: the plaintext's
            # (decrypted) or the sealed object's, which only a pass over them tells
            sha, size = yield from _measure_op(store, row, written)
            if written.decrypt:
                head.update(sha256=sha, decrypted=True)
            else:
                head.update(sealed=True, stored_bytes=size, stored_sha256=sha)
            head["parts"] = -(-size // PART)
        yield Call(write, ([line(head)],))
        if written.with_bytes:
            parts = yield from _parts_op(store, row, written, write)
            assert parts == head["parts"], (parts, head["parts"])
            written.bytes += int(row["size_bytes"])
        written.artifacts += 1


def _refs_writer(store: StoreState, written: Written, write: Any, tenant: str | None = None) -> Any:
    """A pager's page handler for references: with ``tenant`` (references of no session,
    whose artifacts no session line brought) the artifacts they name first."""

    def each(rows: Sequence[Mapping[str, Any]]) -> Op[None]:
        if tenant is not None:
            named = sorted({r["artifact_id"] for r in rows})
            found = yield Q(query("export_sessionless_artifacts"), (tenant, named), named=True)
            yield from _artifact_rows_op(store, found, written, write)
        yield Call(write, (record_lines("artifact_ref", rows),))
        written.refs += len(rows)

    return each


def _ref_cursor(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "turn": -1 if row["turn_seq"] is None else row["turn_seq"],
        "type": row["owner_type"],
        "owner": row["owner_id"],
        "artifact": row["artifact_id"],
    }


def _ref_params(**scope: Any) -> dict[str, Any]:
    """A reference pager's first parameters: before every (turn, type, owner, artifact)."""
    return {**scope, "turn": -2, "type": "", "owner": "", "artifact": uuid.UUID(int=0)}


def export_artifacts_op(
    store: StoreState, sid: uuid.UUID, written: Written, write: Any
) -> Op[None]:
    """The ``artifact`` lines (and parts) of the ready artifacts the session references
    or is linked to that this export has not written yet, a page at a time, in the
    caller's snapshot."""

    def each(rows: Sequence[Mapping[str, Any]]) -> Op[None]:
        yield from _artifact_rows_op(store, rows, written, write)

    params = {"sid": sid, "after": uuid.UUID(int=0)}
    yield from paged_op(
        "export_session_artifacts", params, lambda r: {"after": r["artifact_id"]}, each
    )


def export_refs_op(store: StoreState, sid: uuid.UUID, written: Written, write: Any) -> Op[None]:
    """The session's ``artifact_ref`` lines, a page at a time."""
    each = _refs_writer(store, written, write)
    yield from paged_op("export_session_refs", _ref_params(sid=sid), _ref_cursor, each)


def export_loose_refs_op(store: StoreState, tenant: str, written: Written, write: Any) -> Op[None]:
    """The tenant's references that name no session (business outputs, trajectories of
    no session), a page at a time in the caller's snapshot, each page preceded by the
    artifacts it names that the file does not hold yet."""
    each = _refs_writer(store, written, write, tenant)
    yield from paged_op("export_sessionless_refs", _ref_params(tenant=tenant), _ref_cursor, each)


def export_links_op(sid: uuid.UUID, written: Written, write: Any) -> Op[None]:
    """The session's ``artifact_link`` lines: links no reference of it backs any more."""
    rows = yield Q(query("export_session_links"), (sid,), named=True)
    if rows:
        yield Call(write, (record_lines("artifact_link", rows),))
        written.links += len(rows)


# ---------------------------------------------------------------- import


@dataclass(frozen=True, slots=True)
class Carried:
    """What a file said of an artifact: whether its bytes came with it."""

    with_bytes: bool


def _check(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise ImportRejected(f"{where}: {what}")


class Spool:
    """An artifact's bytes as its parts arrive: hashed, counted, spooled to a temporary
    file past :data:`SPOOL` bytes."""

    def __init__(self) -> None:
        self.file: Any = tempfile.SpooledTemporaryFile(max_size=SPOOL)  # noqa: SIM115
        self.digest = hashlib.sha256()
        self.size = 0

    def add(self, data: bytes) -> None:
        """One part's bytes."""
        self.digest.update(data)
        self.size += len(data)
        self.file.write(data)

    def rewind(self) -> Any:
        """The spooled bytes, readable from the start."""
        self.file.seek(0)
        return self.file

    def close(self) -> None:
        """Drop the spooled bytes."""
        self.file.close()


def _hex(doc: dict[str, Any], name: str, where: str) -> str:
    value = doc.get(name)
    _check(
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value),
        where,
        f"{name} must be 64 lowercase hex digits",
    )
    assert isinstance(value, str)
    return value


def _head(doc: dict[str, Any], where: str, addressed: bool) -> tuple[str, uuid.UUID, str, int, str]:
    """The line's tenant, artifact id, sha256, size and content type, checked; with
    ``addressed`` (plaintext as a plaintext store stores it) the id must be the address of
    that sha256 in the tenant. A sealed or decrypted artifact's id is its keyed address in
    the exporting store, which no sha256 on the line shows."""
    tenant = _text(doc, "tenant_id", where)
    aid = _uuid(doc.get("artifact_id"), where, "artifact_id")
    sha = _hex(doc, "sha256", where)
    _check(
        not addressed or aid == artifact_id_for(tenant, sha),
        where,
        f"artifact_id {aid} is not the address of that content in tenant "
        f"{validate.shown(tenant, 60)}",
    )
    size = _int(doc.get("size_bytes"), where, "size_bytes")
    ctype = _text(doc, "content_type", where, MAX_CONTENT_TYPE)
    return tenant, aid, sha, size, ctype


@dataclass(slots=True)
class Pending:
    """An artifact read and checked, its plaintext spooled (``sha256``: the plaintext's),
    waiting for the transaction of the session that follows it in the file (so that a
    session refused takes its artifacts with it)."""

    where: str
    tenant: str
    artifact_id: uuid.UUID
    sha256: str
    content_type: str
    tokens: int | None
    required: bool
    spool: Spool


def _flag(doc: dict[str, Any], name: str, where: str) -> bool:
    value = doc.get(name, False)
    _check(type(value) is bool, where, f"{name} must be true or false")
    return bool(value)


def _spool_parts_op(reader: Any, aid: uuid.UUID, parts: int, size: int, where: str) -> Op[Spool]:
    """The ``parts`` artifact_part lines after an artifact line, checked (consecutive,
    base64, whole parts but the last, no more than ``size`` bytes) and spooled."""
    spool = Spool()
    try:
        for n in range(parts):
            item = yield from reader.next_op()
            if item is None:
                raise ImportRejected(f"{where}: the file ends inside artifact {aid}")
            number, part = item
            at = f"line {number}"
            _check(
                part["kind"] == "artifact_part"
                and part.get("artifact_id") == str(aid)
                and part.get("n") == n,
                at,
                f"part {n} of artifact {aid} expected",
            )
            data = part.get("data")
            _check(
                isinstance(data, str) and len(data) <= 4 * (PART // 3 + 1),
                at,
                f"data must be base64 of at most {PART} bytes",
            )
            try:
                raw = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise ImportRejected(f"{at}: data is not base64") from None
            _check(
                len(raw) <= PART and (len(raw) == PART or n == parts - 1),
                at,
                f"a part holds {PART} bytes (the last one up to that)",
            )
            spool.add(raw)
            _check(spool.size <= size, at, f"more bytes than artifact {aid} announces")
    except BaseException:
        spool.close()
        raise
    return spool


def _opened(
    sealer: Sealer, sealed: Spool, tenant: str, aid: uuid.UUID, address: str, size: int, where: str
) -> Spool:
    """The plaintext of a sealed artifact of the file, opened for the tenant and id the
    file gives it, under this store's key store, into a spool of its own: its header must
    be sealed under a data key of ``tenant`` for ``aid``, every frame must open, and the
    plaintext must match ``address`` (the keyed hash) and ``size``."""
    opener = ArtifactOpener(sealer.keys, tenant, aid, address, size)
    plain = Spool()
    try:
        stored = sealed.rewind()
        opener.header(stored.read(HEADER_BYTES))
        while frame := stored.read(FRAME_BYTES):
            plain.add(opener.frame(frame))
        opener.finish()
    except KeyShredded as exc:
        plain.close()
        raise KeyShredded(
            f"{where}: {exc} (sealed with a data key this key store does not hold: another "
            "key store, or shredded)"
        ) from None
    except (DecryptionFailed, ArtifactCorrupt) as exc:
        plain.close()
        raise DecryptionFailed(f"{where}: {exc}") from None
    except BaseException:
        plain.close()
        raise
    return plain


def read_artifact_op(
    reader: Any,
    doc: dict[str, Any],
    where: str,
    carried: dict[Any, Carried],
    sealer: Sealer | None = None,
) -> Op[Pending | None]:
    """One ``artifact`` line and its parts, checked (consecutive parts, base64, the size
    and sha256 announced, the id the content's address in its tenant when the line is
    plaintext of a plaintext store) with the plaintext spooled: the artifact to store, or
    None when the file carries no bytes.

    A sealed artifact (``"sealed": true``: the object as the exporting store keeps it) is
    opened here, before anything is written, with this store's key store (``sealer``) for
    the tenant and id the file gives it: ``EncryptionRequired`` on a store without
    ``encryption=``, ``KeyShredded`` when the key store lacks its data key,
    ``DecryptionFailed`` when it is sealed for another tenant or artifact, or altered."""
    sealed = _flag(doc, "sealed", where)
    decrypted = _flag(doc, "decrypted", where)
    _check(not (sealed and decrypted), where, "an artifact is sealed or decrypted, not both")
    tenant, aid, sha, size, ctype = _head(doc, where, addressed=not (sealed or decrypted))
    tokens = _opt_int(doc.get("tokens"), where, "tokens")
    required = _flag(doc, "required_for_resume", where)
    with_bytes = doc.get("bytes")
    _check(type(with_bytes) is bool, where, "bytes must be true or false")
    parts = _int(doc.get("parts"), where, "parts")
    if not with_bytes:
        _check(parts == 0, where, "an artifact without bytes has no parts")
        carried[(tenant, aid)] = Carried(False)
        return None
    if not sealed:
        _check(parts == -(-size // PART), where, f"{size} bytes come in {-(-size // PART)} parts")
        spool = yield from _spool_parts_op(reader, aid, parts, size, where)
        if spool.size != size or spool.digest.hexdigest() != sha:
            spool.close()
            raise ImportRejected(
                f"{where}: the bytes of artifact {aid} do not match its size and sha256"
            )
        carried[(tenant, aid)] = Carried(True)
        return Pending(where, tenant, aid, sha, ctype, tokens, required, spool)
    if sealer is None:
        refuse_sealed_bytes(MAGIC, f"{where}: artifact {aid}")
    assert sealer is not None
    stored = _int(doc.get("stored_bytes"), where, "stored_bytes")
    stored_sha = _hex(doc, "stored_sha256", where)
    _check(stored >= HEADER_BYTES, where, "a sealed artifact holds its header at least")
    _check(parts == -(-stored // PART), where, f"{stored} bytes come in {-(-stored // PART)} parts")
    spool = yield from _spool_parts_op(reader, aid, parts, stored, where)
    try:
        _check(
            spool.size == stored and spool.digest.hexdigest() == stored_sha,
            where,
            f"the sealed bytes of artifact {aid} do not match stored_bytes and stored_sha256",
        )
        plain = _opened(sealer, spool, tenant, aid, sha, size, where)
    finally:
        spool.close()
    carried[(tenant, aid)] = Carried(True)
    return Pending(where, tenant, aid, plain.digest.hexdigest(), ctype, tokens, required, plain)


@dataclass(frozen=True, slots=True)
class Owner:
    """The session here whose data key seals the artifacts stored in its transaction."""

    tenant: str
    subject: str | None
    session_id: uuid.UUID


def _target_op(
    store: StoreState, item: Pending, owner: Owner | None, subject_key: DataKey | None = None
) -> Op[tuple[DataKey | None, uuid.UUID]]:
    """The key an artifact is sealed under here (None: a store without encryption) and its
    id here: the address of its plaintext sha256, or of its keyed hash under that key (the
    session's, for a session of its tenant, else the tenant's). ``subject_key``: the
    owner's subject key as read under the subject's lock, used for the session's key."""
    sealer = store.ctx.sealer
    if sealer is None:
        return None, artifact_id_for(item.tenant, item.sha256)
    if owner is not None and owner.tenant == item.tenant:
        scope = session_scope(item.tenant, owner.subject, owner.session_id)
        key = subject_key or (yield Call(sealer.keys.key_for, (scope,)))
    else:
        key = yield Call(sealer.keys.key_for, (Scope("tenant", item.tenant, ""),))
    assert key is not None
    mac = hmac.new(mac_key(key), digestmod=hashlib.sha256)
    spool = item.spool.rewind()
    while piece := spool.read(CHUNK):
        mac.update(piece)
    return key, artifact_id_for(item.tenant, mac.hexdigest())


def _subject_sealing_op(store: StoreState, owner: Owner | None) -> Op[Sealing | None]:
    """Before the session's artifacts are sealed under its subject's key: the subject's fact
    lock, taken shared and held to the session's commit (a rotation of that key takes it
    exclusively for its final check, which so waits for the session's transaction), and
    the key read under it, for :func:`check_sealing_op` to compare once they are stored.
    None when nothing needs it: no encryption, or a session of no subject (its own key: no
    rotation can name a session before its transaction commits)."""
    sealer = store.ctx.sealer
    if sealer is None or owner is None or owner.subject is None:
        return None
    key = yield from locked_subject_key_op(sealer, owner.tenant, owner.subject)
    return Sealing(sealer, key, owner.session_id)


def store_artifacts_op(
    store: StoreState,
    pending: list[Pending],
    ids: IdMap,
    owner: Owner | None = None,
    store_missing: bool = True,
) -> Op[int]:
    """Store the pending artifacts (in the caller's transaction, the session's), each
    with the store's own put into its configured backend, sealed under the owning scope's
    data key when this store encrypts (``owner``'s session key, else the tenant's); returns
    how many were stored (an artifact this database holds ready already is not stored
    again). Each one's id here goes into ``ids`` (references to it are remapped when it
    differs from the file's). ``store_missing=False`` (a session found complete from an
    earlier run) records the ids of those here and stores nothing. The spools are closed
    and the list emptied.

    Under a subject's key, the artifacts are stored only if that key's version is still
    current after they were (checked under the session row's lock): a data-key rotation
    that made a new version current meanwhile raises ``Conflict`` (retryable), and the
    caller's transaction, the whole session, is rolled back; a re-run of the import stores
    them under the new version (docs/decisions/0024-key-rotation.md)."""
    stored = 0
    config = config_of(store)
    try:
        sealing = (yield from _subject_sealing_op(store, owner)) if store_missing else None
        under_subject = False  # whether the session links bytes sealed under that key
        for item in pending:
            under_subject = under_subject or (owner is not None and owner.tenant == item.tenant)
            subject_key = None if sealing is None else sealing.key
            key, target = yield from _target_op(store, item, owner, subject_key)
            there = yield Q(query("artifact_get"), (item.tenant, target), fetch="one", named=True)
            if there is not None and there["state"] == "ready":
                # a re-run, or the same content already here: stored once
                ids.place_artifact(item.tenant, item.artifact_id, ref_from_row(config, there))
                continue
            if not store_missing:
                continue
            src = source(item.spool.rewind())
            ref = yield from put_op(
                config, item.tenant, src, item.content_type, item.tokens, item.required, key=key
            )
            _check(
                ref.artifact_id == target,
                item.where,
                f"artifact {item.artifact_id} was stored under another id",
            )
            ids.place_artifact(item.tenant, item.artifact_id, ref)
            stored += 1
        if sealing is not None and under_subject:
            again = "nothing of the session was imported; run the import again"
            yield from check_sealing_op(sealing, "an imported artifact", again)
    finally:
        discard(pending)
    return stored


def discard(pending: list[Pending]) -> None:
    """Drop pending artifacts' spooled bytes."""
    for item in pending:
        item.spool.close()
    pending.clear()


def import_ref_op(
    doc: dict[str, Any],
    where: str,
    *,
    old_sid: uuid.UUID | None,
    sid: uuid.UUID | None,
    tenant: str,
    head: int,
    checkpoints: set[uuid.UUID],
    ids: IdMap,
    carried: Mapping[Any, Carried],
) -> Op[str | None]:
    """One ``artifact_ref`` line, written in the caller's transaction (a session's, or,
    with ``sid`` None, one of a reference naming no session: a business output or a
    trajectory of no session): None when written, else why it was not (an artifact
    exported without bytes that this database does not hold). ``ImportRejected`` for a
    line naming an owner the session lacks. Under remapped ids a trajectory's or business
    output's owner id is remapped too, so the copy's reference is a row of its own."""
    named = _uuid(doc.get("artifact_id"), where, "artifact_id")
    aid = ids.artifact(tenant, named)
    kind = doc.get("owner_type")
    kinds = REF_OWNERS if sid is not None else LOOSE_OWNERS
    _check(kind in kinds, where, f"owner_type must be one of {', '.join(kinds)}")
    owner = _text(doc, "owner_id", where, validate.MAX_KEY_CHARS)
    required = doc.get("required_for_resume", False)
    _check(type(required) is bool, where, "required_for_resume must be true or false")
    expires = _opt_instant(doc.get("expires_at"), where, "expires_at")
    turn = doc.get("turn_seq")
    if kind == "turn":
        _check(
            type(turn) is int and 0 <= turn < head,
            where,
            "turn_seq must name a turn of the session",
        )
        _check(
            owner == f"{old_sid}:{turn}", where, "a turn's owner_id is '<session_id>:<turn_seq>'"
        )
        owner = f"{sid}:{turn}"
    elif kind == "checkpoint":
        cid = _uuid(owner, where, "owner_id")
        _check(cid in checkpoints, where, f"checkpoint {cid} is not one of the session's")
        owner = str(ids.checkpoint(cid))
        turn = None
    else:
        _check(turn is None, where, f"a {kind} reference has no turn_seq")
        owner = ids.owner(str(kind), owner)
    (status,) = yield Q(
        query("artifact_ref"),
        (tenant, aid, kind, owner, sid, turn, required, expires),
        fetch="one",
    )
    if status == "missing":
        why = _not_here(carried, tenant, named, f"reference of {kind} {owner}")
        if why is not None:
            return why
    try:
        raise_ref_status(status, tenant, f"{aid} for {kind} {owner}")
    except Exception as exc:
        raise ImportRejected(f"{where}: {exc}") from None
    return None


def _not_here(carried: Mapping[Any, Carried], tenant: str, aid: uuid.UUID, what: str) -> str | None:
    """Why a record naming an artifact this database lacks is left out, when the file
    carried the artifact without its bytes (else None: the file is wrong)."""
    said = carried.get((tenant, aid))
    if said is None or not said.with_bytes:
        return (
            f"{what} to artifact {aid}: exported without its bytes, and this database does "
            "not hold it"
        )
    return None


def import_link_op(
    doc: dict[str, Any],
    where: str,
    sid: uuid.UUID,
    tenant: str,
    carried: Mapping[Any, Carried],
    ids: IdMap,
) -> Op[str | None]:
    """One ``artifact_link`` line of a session (the session linked to an artifact that no
    reference of it backs: a purge of the session erases the artifact all the same),
    written in its transaction: None when written, else why not."""
    named = _uuid(doc.get("artifact_id"), where, "artifact_id")
    aid = ids.artifact(tenant, named)
    params = {"sid": sid, "tenant": tenant, "artifact": aid}
    row = yield Q(query("import_artifact_link"), params, fetch="one")
    if row is not None:
        return None
    there = yield Q(query("import_artifact_there"), (tenant, aid), fetch="one")
    if there is not None:
        return None  # linked already (a link is kept once)
    return _not_here(carried, tenant, named, f"link of session {sid}")
