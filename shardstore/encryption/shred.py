"""Crypto-shredding: destroying the data keys of a session, a subject or a tenant in the key
store (every version, durably) before a purge deletes their rows, so that every copy of the
database taken before (backups, WAL archives) holds only ciphertext nobody can open. Only a
store that may act for the tenant may shred (the key store is files outside the database,
which row security cannot guard)."""

from __future__ import annotations

import uuid

from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q
from ..errors import AccessDenied, ConfigurationError, InvalidInput, SessionNotFound
from .envelope import Sealer
from .keystore import Scope
from .rotation import may_act_for_op


def shred_session_op(store: StoreState, sid: uuid.UUID, dry_run: bool) -> Op[tuple[str, ...]]:
    """Destroy a subject-less session's data key (nothing on a dry run); the ids destroyed.
    A tombstone (a purge that crashed after its shred, then finished) shreds again: a no-op
    or the rest of the job."""
    sealer = _sealer_for_shred(store, "the session's data key")
    owner = yield Q(query("rotation_session_owner"), {"sid": sid}, fetch="one", named=True)
    if owner is None:
        raise SessionNotFound(f"session {sid} does not exist")
    if owner["subject_id"] is not None:
        raise InvalidInput(
            f"session {sid} belongs to subject {owner['subject_id']!r}: its values are sealed "
            "under the subject's data key, which the subject's other sessions share; shred it "
            "with purge_subject(..., shred=True), or purge the session without shred",
            cli=f"session {sid} belongs to subject {owner['subject_id']!r}, whose data key its "
            "other sessions share: use 'purge subject --shred', or drop --shred",
        )
    tenant = str(owner["tenant_id"])
    yield from _may_shred_op(store, tenant)
    if dry_run:
        return ()
    kids = yield Call(sealer.keys.shred_all, (Scope("session", tenant, str(sid)),))
    return tuple(str(k) for k in kids)


def _sealer_for_shred(store: StoreState, whose: str) -> Sealer:
    sealer = store.ctx.sealer
    if sealer is None:
        raise ConfigurationError(
            f"shred=True needs a store connected with encryption= (the key store holding {whose})",
            cli=f"--shred needs --key-store (the key store holding {whose})",
        )
    return sealer


def _may_shred_op(store: StoreState, tenant: str) -> Op[None]:
    """``AccessDenied`` unless this store may destroy ``tenant``'s keys: not a store bound
    to another tenant nor one whose role is bound (the key store is files, outside row
    security), and a connection that row security lets act for ``tenant``."""
    bound = store.connector.tenant
    _setting, role_bound, _distributed = yield Q(query("rls_store_binding"), fetch="one")
    if role_bound or (bound is not None and bound != tenant):
        raise AccessDenied(
            "only an operator's store, or one bound to this tenant, may shred its keys"
        )
    yield from may_act_for_op(store, tenant, "shred this tenant's keys")


def shred_subject_op(
    store: StoreState, tenant: str, subject: str, dry_run: bool
) -> Op[tuple[str, ...]]:
    """Destroy the subject's data key, every version (nothing on a dry run); their ids."""
    sealer = _sealer_for_shred(store, "the subject's data key")
    yield from _may_shred_op(store, tenant)
    if dry_run:
        return ()
    kids = yield Call(sealer.keys.shred_all, (Scope("subject", tenant, subject),))
    return tuple(str(k) for k in kids)


def shred_tenant_op(store: StoreState, tenant: str, dry_run: bool) -> Op[tuple[str, ...]]:
    """Destroy every data key of ``tenant`` (nothing on a dry run); their ids."""
    sealer = _sealer_for_shred(store, "the tenant's data keys")
    yield from _may_shred_op(store, tenant)
    if dry_run:
        return ()
    kids: list[str] = []
    scopes = yield Call(sealer.keys.scopes, (tenant,))
    for scope in scopes:
        gone = yield Call(sealer.keys.shred_all, (scope,))
        kids += [str(k) for k in gone]
    return tuple(kids)
