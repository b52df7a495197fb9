"""Tenants under encryption and row-level security: a tenant's store opens its own sealed
values and nothing of another tenant's, whatever it is handed (another tenant's session id,
another tenant's ciphertext copied into its own rows); a tenant role's raw SQL sees only its
own tenant's ciphertext; and no key material (wrapped data keys, data keys, the KEK) is in
the database at all."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.encryption.keystore import _wrap_context
from shardstore.errors import DecryptionFailed, SessionNotFound
from shardstore.schema import rls
from tests.encryption.conftest import raw
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

MARKER = "lemur-marker-3141"


@pytest.fixture(scope="module")
def role(module_dsn: str) -> Iterator[str]:
    name = make_tenant_role(module_dsn)
    yield name
    drop_tenant_role(module_dsn, name)


def _all_rows_text(dsn: str) -> str:
    """Every row of every table of the database's shardstore schema, as text (bytea as hex)."""
    tables = raw(
        dsn,
        "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
        " WHERE schemaname = 'shardstore'",
    )
    return "\n".join(
        str(r[0]) for (table,) in tables for r in raw(dsn, f"SELECT t::text FROM {table} t")
    )


def test_tenants_read_only_their_own_and_no_key_is_in_the_database(
    enc_store: shardstore.Store, module_dsn: str, role: str, keys: LocalKeyProvider, key_dir: Path
) -> None:
    sids = {}
    for tenant in ("acme", "globex"):
        sid = enc_store.create_session(tenant_id=tenant, subject_id=f"{tenant}-person")
        enc_store.append_turns(
            sid, [{"role": "user", "content": f"{MARKER} {tenant} {i}"} for i in range(3)]
        )
        enc_store.checkpoint(sid, {"plan": f"{MARKER} {tenant}"})
        enc_store.remember(tenant, f"{tenant}-person", "k", f"{MARKER} {tenant}", source=(sid, 0))
        sids[tenant] = sid

    with as_tenant(module_dsn, role, "acme") as conn:
        store = rls.connect_tenant(conn, encryption=keys)
        try:
            assert store.tail(sids["acme"])[0].message["content"] == f"{MARKER} acme 0"
            store.append_turn(sids["acme"], {"role": "user", "content": f"{MARKER} by acme"})
            assert store.tail(sids["acme"], n=1)[0].message["content"] == f"{MARKER} by acme"
            assert store.restore(sids["acme"]).checkpoint.state == {"plan": f"{MARKER} acme"}
            assert store.recall("acme", "acme-person")[0].value == f"{MARKER} acme"
            for read in (
                lambda: store.tail(sids["globex"]),
                lambda: store.restore(sids["globex"]),
                lambda: list(store.history(sids["globex"])),
            ):
                with pytest.raises(SessionNotFound):
                    read()
            assert store.recall("globex", "globex-person") == []
            # the tenant's raw SQL: its own ciphertext only, never another tenant's
            seen = conn.execute(
                "SELECT DISTINCT tenant_id FROM shardstore.turn_buffer"
                " UNION SELECT DISTINCT tenant_id FROM shardstore.checkpoints"
                " UNION SELECT DISTINCT tenant_id FROM shardstore.facts"
            ).fetchall()
            assert seen == [("acme",)]
            own = conn.execute("SELECT message::text FROM shardstore.turn_buffer").fetchall()
            assert own and not any(MARKER in text for (text,) in own)

            # globex's ciphertext copied into acme's row (by someone who can write both):
            # acme's store opens nothing of it
            raw(
                module_dsn,
                "UPDATE shardstore.turn_buffer a SET message = g.message"
                "  FROM shardstore.turn_buffer g"
                " WHERE a.session_id = %s AND g.session_id = %s AND a.turn_seq = g.turn_seq",
                (sids["acme"], sids["globex"]),
            )
            with pytest.raises(DecryptionFailed):
                store.tail(sids["acme"])
        finally:
            store.close()
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        as_tenant(module_dsn, role, "acme") as conn,
    ):
        conn.execute("SELECT pg_read_file('/etc/hostname')")

    # no key material in any table: neither the wrapped data keys of the key store, nor the
    # data keys they wrap, nor the KEK, in any encoding
    secrets: list[str] = []
    for tenant in ("acme", "globex"):
        key = keys.key_for(Scope("subject", tenant, f"{tenant}-person"), create=False)
        assert key is not None
        doc = json.loads((key_dir / "store" / "keys" / f"{key.scope.file_stem}.key").read_text())
        data_key = keys.provider.unwrap(
            base64.b64decode(doc["wrapped"]), _wrap_context(key.kid, key.scope)
        )
        secrets += [doc["wrapped"], data_key.hex(), base64.b64encode(data_key).decode()]
    kek = base64.b64decode((key_dir / "kek").read_bytes().strip())
    secrets += [kek.hex(), base64.b64encode(kek).decode()]
    dumped = _all_rows_text(module_dsn)
    assert MARKER not in dumped
    for secret in secrets:
        assert secret not in dumped
        # bytea columns print as hex
        assert secret.encode().hex() not in dumped
