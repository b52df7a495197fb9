"""The command line with encryption at rest: one global way to name the key store
(``--key-store``/``--kek-file``, or ``$SHARDSTORE_KEY_STORE``/``$SHARDSTORE_KEK_FILE``) with
which every command reads and writes encrypted values; without it a sealed value is the
one-line ``EncryptionRequired`` error naming those options. ``export --decrypt`` writes
plaintext with a warning, ``import jsonl`` re-seals, ``purge subject --shred`` shreds."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.cli import main
from shardstore.encryption import LocalKeyProvider
from shardstore.importers.remap import IdMap

MARKER = "quokka-cli-6093"
TENANT = "enc-cli"


@pytest.fixture(scope="module")
def db(server_dsn: str, _databases: Any) -> Iterator[str]:
    """One database for the module (each test uses sessions of its own)."""
    name = _databases.take()
    yield make_conninfo(server_dsn, dbname=name)
    _databases.drop_later([name])


@pytest.fixture(scope="module")
def key_args(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    where = tmp_path_factory.mktemp("cli-keys")
    (where / "store").mkdir()  # the command line opens a key store, it does not start one
    return ["--key-store", str(where / "store"), "--kek-file", str(where / "kek")]


def _keys(key_args: list[str]) -> LocalKeyProvider:
    return LocalKeyProvider(key_args[1], key_file=key_args[3])


@pytest.fixture(scope="module")
def sealed(db: str, key_args: list[str]) -> uuid.UUID:
    """A session of subject ``ann`` written sealed: turns, a checkpoint, a fact."""
    with shardstore.connect(db, encryption=_keys(key_args)) as store:
        sid = store.create_session(TENANT, "ann")
        store.append_turns(sid, [{"role": "user", "content": f"{MARKER} {i}"} for i in range(4)])
        store.checkpoint(sid, {"plan": f"{MARKER} plan"})
        store.remember(TENANT, "ann", "likes", f"{MARKER} tea", source=(sid, 0))
    return sid


def _cli(capsys: pytest.CaptureFixture[str], dsn: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--dsn", dsn, *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _reads(sid: uuid.UUID) -> list[list[str]]:
    return [
        ["history", str(sid)],
        ["tail", str(sid)],
        ["context", str(sid), "--max-tokens", "2000"],
        ["checkpoints", str(sid)],
        ["facts", "--tenant", TENANT, "--subject", "ann"],
    ]


def test_every_reader_opens_with_the_key_store_and_refuses_without(
    db: str,
    key_args: list[str],
    sealed: uuid.UUID,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for argv in _reads(sealed):
        code, out, err = _cli(capsys, db, *argv, *key_args)  # options after the command too
        assert code == 0 and MARKER in out, (argv, err)
        code, out, err = _cli(capsys, db, *argv)
        assert code == 2, argv
        assert MARKER not in out + err
        assert err.count("\n") == 1 and "stored encrypted" in err and "--key-store" in err
        code, out, err = _cli(capsys, db, "--json", *argv)
        assert json.loads(err)["error"]["type"] == "EncryptionRequired"
    monkeypatch.setenv("SHARDSTORE_KEY_STORE", key_args[1])
    monkeypatch.setenv("SHARDSTORE_KEK_FILE", key_args[3])
    code, out, _ = _cli(capsys, db, "history", str(sealed))
    assert code == 0 and f"{MARKER} 3" in out


def test_export_decrypts_only_when_asked(
    db: str,
    key_args: list[str],
    sealed: uuid.UUID,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    plain, kept, never = tmp_path / "plain.jsonl", tmp_path / "kept.jsonl", tmp_path / "n"
    code, _, err = _cli(capsys, db, *key_args, "export", str(sealed), "-o", str(plain), "--decrypt")
    assert code == 0
    assert [line for line in err.splitlines() if "warning" in line] == [
        f"warning: {plain} holds the plaintext of encrypted values (--decrypt): protect it as "
        "the data itself, and delete it when done"
    ]
    assert json.loads(plain.read_text().splitlines()[0])["decrypted"] is True
    assert f"{MARKER} plan" in plain.read_text()
    code, _, err = _cli(capsys, db, *key_args, "export", str(sealed), "-o", str(kept))
    assert code == 0 and "warning" not in err and MARKER not in kept.read_text()
    code, _, err = _cli(capsys, db, "export", str(sealed), "-o", str(never), "--decrypt")
    assert code == 2 and "--decrypt" in err and "--key-store" in err and not never.exists()
    # the access report: readable with the key store, said to be sealed without it
    code, out, _ = _cli(
        capsys,
        db,
        *key_args,
        "export",
        "--subject",
        "ann",
        "-o",
        str(tmp_path / "s.jsonl"),
        "--report",
        "-",
    )
    assert code == 0 and f"{MARKER} tea" in out
    code, out, _ = _cli(
        capsys, db, "export", "--subject", "ann", "-o", str(tmp_path / "t.jsonl"), "--report", "-"
    )
    assert code == 0 and MARKER not in out and "encrypted at rest" in out


def test_import_reseals_under_the_configured_key_store(
    db: str,
    key_args: list[str],
    sealed: uuid.UUID,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    plain, kept = tmp_path / "plain.jsonl", tmp_path / "kept.jsonl"
    assert _cli(capsys, db, *key_args, "export", str(sealed), "-o", str(plain), "--decrypt")[0] == 0
    assert _cli(capsys, db, *key_args, "export", str(sealed), "-o", str(kept))[0] == 0
    (tmp_path / "other").mkdir()
    other = ["--key-store", str(tmp_path / "other"), "--kek-file", str(tmp_path / "other-kek")]
    code, out, err = _cli(capsys, db, *other, "import", "jsonl", str(plain), "--remap-ids")
    assert code == 0 and "imported 1 session" in out, err
    new = IdMap(json.loads(plain.read_text().splitlines()[0])["export_id"]).session(sealed)
    code, out, _ = _cli(capsys, db, *other, "history", str(new))
    assert code == 0 and f"{MARKER} 2" in out
    assert _cli(capsys, db, "history", str(new))[0] == 2  # stored sealed
    # a sealed file: with its own key store re-sealed for new ids; without one, refused
    code, out, err = _cli(capsys, db, *key_args, "import", "jsonl", str(kept), "--remap-ids")
    assert code == 0 and "imported 1 session" in out, err
    code, _, err = _cli(
        capsys, db, "import", "jsonl", str(kept), "--remap-ids", "--import-id", str(uuid.uuid4())
    )
    assert code == 2 and "encrypted values" in err and "--key-store" in err
    # ... and with another key store, its keys are missing: skipped and reported
    code, out, err = _cli(
        capsys,
        db,
        *other,
        "import",
        "jsonl",
        str(kept),
        "--remap-ids",
        "--import-id",
        str(uuid.uuid4()),
        "--on-error",
        "skip",
    )
    assert code == 0 and "imported 0 sessions" in out and "key store does not hold" in out


def test_shred_and_bad_key_configuration(
    db: str,
    key_args: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    with shardstore.connect(db, encryption=_keys(key_args)) as store:
        sid = store.create_session(TENANT, "zoe")
        store.append_turn(sid, {"role": "user", "content": MARKER})
    purge = ["purge", "subject", "--tenant", TENANT, "--subject", "zoe", "--shred", "--yes"]
    code, _, err = _cli(capsys, db, *purge)
    assert code == 2 and "--key-store" in err
    # after the command, with purge's earlier spelling of the key file option
    code, _, err = _cli(capsys, db, *purge, key_args[0], key_args[1], "--key-file", key_args[3])
    assert code == 0, err
    assert _cli(capsys, db, "history", str(sid), *key_args)[0] == 5  # purged
    # a key store or key file that cannot be used: typed one-line errors, no traceback;
    # a mistyped path starts no new key store or key-encryption key
    (tmp_path / "s").mkdir()
    for bad, why in (
        (["--key-store", "a\x00b"], "key store"),
        (["--key-store", str(tmp_path / "typo")], "no key store"),
        (["--key-store", str(tmp_path / "s"), "--kek-file", str(tmp_path)], "key"),
        (["--key-store", key_args[1], "--kek-file", str(tmp_path / "typo")], "does not exist"),
    ):
        code, _, err = _cli(capsys, db, *bad, "sessions", "--tenant", TENANT)
        assert code == 2 and err.startswith("error: ") and why in err, err
        assert "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "typo").exists()
    another = tmp_path / "another-kek"
    another.write_text("ab" * 32)
    wrong_kek = ["--key-store", key_args[1], "--kek-file", str(another)]
    code, _, err = _cli(capsys, db, *wrong_kek, "facts", "--tenant", TENANT, "--subject", "ann")
    assert code != 0 and "does not unwrap" in err and "Traceback" not in err


def test_artifacts_put_and_get_seal_and_open_with_the_key_store(
    capsys: pytest.CaptureFixture[str], db: str, key_args: list[str], tmp_path: Path
) -> None:
    source = tmp_path / "report.txt"
    source.write_bytes(f"{MARKER} artifact bytes".encode())
    put = ["artifacts", "put", str(source), "--tenant", TENANT]
    code, out, err = _cli(capsys, db, *key_args, "--json", *put)
    assert code == 0, err
    artifact_id = json.loads(out)["artifact_id"]
    assert _chunks_holding(db, MARKER.encode()) == 0  # sealed in the database
    back = tmp_path / "back.txt"
    get = ["artifacts", "get", artifact_id, "--tenant", TENANT]
    code, out, err = _cli(capsys, db, *key_args, *get, "-o", str(back))
    assert code == 0, err
    assert back.read_bytes() == source.read_bytes()
    code, out, err = _cli(capsys, db, *get)
    assert code == 2 and "--key-store" in err and MARKER not in out


def _chunks_holding(dsn: str, needle: bytes) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.artifact_chunks WHERE position(%s IN data) > 0",
            (needle,),
        ).fetchone()
    assert row is not None
    return int(row[0])
