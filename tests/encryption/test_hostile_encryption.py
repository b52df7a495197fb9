"""Hostile input on encryption's arguments and files: bad key-store paths and types, corrupt,
truncated, oversized and wrong-size key files, garbage in the KEK variable, tampered key
files and envelopes, and wrong ``shred=`` values. Each is a typed error from
shardstore.errors, and nothing is half-written."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.encryption.provider import LocalKek
from shardstore.errors import (
    ConfigurationError,
    DecryptionFailed,
    InvalidInput,
    InvalidMessage,
    TurnTooLarge,
)
from tests.encryption.conftest import raw


def test_bad_paths_and_types_are_configuration_errors(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    paths: list[Any] = [None, 3, b"/tmp/x", "", ["x"], "bad\x00path", a_file / "below"]
    for path in paths:
        with pytest.raises(ConfigurationError):
            LocalKeyProvider(path)
    for key_file in (3, "", "bad\x00kek", a_file / "below", tmp_path):
        with pytest.raises(ConfigurationError):
            LocalKeyProvider(tmp_path / "ks", key_file=key_file)
    for key_env in (3, "", "A=B", "A\x00B", None):
        with pytest.raises(ConfigurationError):
            LocalKeyProvider(tmp_path / "ks", key_env=key_env)  # type: ignore[arg-type]
    for value in ("keys", 3, object(), tmp_path):
        with pytest.raises(ConfigurationError):
            shardstore.connect(None, encryption=value)
    with pytest.raises(ConfigurationError):
        LocalKek(b"short")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not a key at all",
        b"\xff\xfe\x00garbage",
        b"x" * 31,  # raw, a byte short
        b"x" * 33,  # raw, a byte long
        base64.b64encode(b"k" * 16),  # truncated: 16 bytes
        b"ab" * 31,  # 62 hex digits
        b"A" * 100_000,  # large: not read whole
    ],
    ids=["empty", "text", "binary", "31", "33", "b64-16", "hex-31", "large"],
)
def test_a_key_file_that_is_not_a_key_is_refused(tmp_path: Path, content: bytes) -> None:
    kek = tmp_path / "kek"
    kek.write_bytes(content)
    with pytest.raises(ConfigurationError):
        LocalKeyProvider(tmp_path / "ks", key_file=kek)
    assert kek.read_bytes() == content  # never overwritten


def test_garbage_in_the_kek_variable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for value in (
        "",
        "zz",
        "not base64!",
        "00" * 31,
        base64.b64encode(b"k" * 31).decode(),
        "é" * 5000,
    ):
        monkeypatch.setenv("SHARDSTORE_KEK", value)
        with pytest.raises(ConfigurationError):
            LocalKeyProvider(tmp_path / "ks")
    monkeypatch.setenv("SHARDSTORE_KEK", "11" * 32)
    assert LocalKeyProvider(tmp_path / "ks").provider.key_id.startswith("local:")
    assert not (tmp_path / "ks" / "kek").exists()  # the variable's key: no key file written


def _sealed_first_turn(enc: shardstore.Store, dsn: str) -> tuple[uuid.UUID, dict[str, Any]]:
    sid = enc.create_session(tenant_id="t1", subject_id=f"s-{uuid.uuid4().hex[:8]}")
    enc.append_turn(sid, {"role": "user", "content": "hello"})
    (message,) = raw(
        dsn, "SELECT message FROM shardstore.turn_buffer WHERE session_id = %s", (sid,)
    )[0]
    return sid, message


def test_tampered_key_files_and_envelopes_are_decryption_failures(
    enc_store: shardstore.Store, module_dsn: str, key_dir: Path
) -> None:
    sid, sealed = _sealed_first_turn(enc_store, module_dsn)
    assert enc_store.tail(sid)[0].message == {"role": "user", "content": "hello"}
    kid = sealed["k"]
    key_file = key_dir / "store" / "keys" / (kid.split(".")[0] + ".key")
    original = key_file.read_bytes()
    doc = json.loads(original)
    wrapped = base64.b64decode(doc["wrapped"])
    tampered: list[bytes] = [
        b"{not json",
        original[: len(original) // 2],  # truncated
        json.dumps({**doc, "v": 99}).encode(),
        json.dumps({**doc, "kid": 7}).encode(),
        json.dumps({**doc, "scope": ["subject", "t2", "someone"]}).encode(),
        json.dumps({**doc, "scope": "x"}).encode(),
        json.dumps({**doc, "wrapped": "%%%"}).encode(),
        json.dumps({**doc, "wrapped": base64.b64encode(wrapped[:-1] + b"\0").decode()}).encode(),
        json.dumps([1, 2]).encode(),
    ]
    # the store knows a key file by its inode and mtime; a file rewritten in place within one
    # tick of the kernel's coarse clock keeps its mtime, so each rewrite here moves it on
    mtime = key_file.stat().st_mtime_ns
    try:
        for step, content in enumerate(tampered, 1):
            key_file.write_bytes(content)
            os.utime(key_file, ns=(mtime + step * 1_000_000, mtime + step * 1_000_000))
            with pytest.raises(DecryptionFailed):
                enc_store.tail(sid)
    finally:
        key_file.write_bytes(original)
        os.utime(key_file, ns=(mtime - 1_000_000, mtime - 1_000_000))
    assert enc_store.tail(sid)[0].message == {"role": "user", "content": "hello"}

    envelopes: list[Any] = [
        {**sealed, "c": "%%% not base64"},
        {**sealed, "c": ""},
        {**sealed, "c": 5},
        {**sealed, "k": 5},
        {**sealed, "k": "../../../etc/passwd.x"},
        {**sealed, "k": "a" * 500 + ".b"},
        {**sealed, "k": "nodot"},
        {**sealed, "o": str(uuid.uuid4())},
        {**sealed, "o": ["x"]},
    ]
    for envelope in envelopes:
        raw(
            module_dsn,
            "UPDATE shardstore.turn_buffer SET message = %s::jsonb WHERE session_id = %s",
            (json.dumps(envelope), sid),
        )
        with pytest.raises(DecryptionFailed):
            enc_store.tail(sid)


def test_another_kek_opens_nothing(
    enc_store: shardstore.Store, module_dsn: str, key_dir: Path, tmp_path: Path
) -> None:
    sid, _sealed = _sealed_first_turn(enc_store, module_dsn)
    other = tmp_path / "other-kek"
    other.write_bytes(os.urandom(32))
    with (
        shardstore.connect(
            module_dsn, encryption=LocalKeyProvider(key_dir / "store", key_file=other)
        ) as wrong,
        pytest.raises(DecryptionFailed),
    ):
        wrong.tail(sid)


def test_wrong_shred_values_and_hostile_messages_write_nothing(
    module_dsn: str, keys: LocalKeyProvider, key_dir: Path
) -> None:
    enc_store = shardstore.connect(module_dsn, encryption=keys, chunk_max_bytes=8192)
    try:
        _wrong_values_write_nothing(enc_store, module_dsn, key_dir)
    finally:
        enc_store.close()


def _wrong_values_write_nothing(
    enc_store: shardstore.Store, module_dsn: str, key_dir: Path
) -> None:
    sid, sealed = _sealed_first_turn(enc_store, module_dsn)
    subject = enc_store.session(sid).subject_id
    assert subject is not None
    key_file = key_dir / "store" / "keys" / (sealed["k"].split(".")[0] + ".key")
    for shred in ("yes", 1, 0, None, [True], 1.0):
        with pytest.raises(InvalidInput):
            enc_store.purge_subject("t1", subject, shred=shred)
    assert key_file.exists() and enc_store.session(sid).turn_count == 1

    nested: Any = "x"
    for _ in range(10_000):
        nested = [nested]
    limit = enc_store.ctx.settings.chunk_max_bytes
    # under the cap as plaintext, over it once sealed (base64 and the envelope)
    large = {"role": "user", "content": "y" * (limit - 1_000)}
    for message, error in (
        ({"role": "user", "content": nested}, InvalidMessage),
        (large, TurnTooLarge),
        ("not a message", InvalidMessage),
    ):
        with pytest.raises(error):
            enc_store.append_turn(sid, message)
        with pytest.raises(error):
            enc_store.append_turns(sid, [{"role": "user", "content": "ok"}, message])
    assert enc_store.session(sid).turn_count == 1
    assert enc_store.tail(sid)[0].message == {"role": "user", "content": "hello"}
