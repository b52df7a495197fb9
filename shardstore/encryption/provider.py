"""Key-encryption keys: the :class:`KeyProvider` protocol and the local provider.

A provider wraps and unwraps *data keys*; it never hands out its own key. A KMS-backed
provider implements :meth:`KeyProvider.wrap` / :meth:`KeyProvider.unwrap` as calls of the
KMS's encrypt and decrypt (the master key never leaves the KMS); :class:`LocalKek` does the
same with a 256-bit key read from a key file or an environment variable.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError, DecryptionFailed, MissingDependency

KEK_BYTES = 32
NONCE_BYTES = 12
DEFAULT_KEY_ENV = "SHARDSTORE_KEK"
MAX_KEK_FILE_BYTES = 4096


@runtime_checkable
class KeyProvider(Protocol):
    """Wraps and unwraps data keys under a key-encryption key (KEK) the library never sees.

    ``key_id`` names the KEK (recorded beside every wrapped key, so that a rotation can tell
    which keys still need rewrapping). ``wrap(data_key, context)`` returns opaque bytes that
    only ``unwrap(wrapped, context)`` with the same ``context`` turns back into ``data_key``;
    ``unwrap`` raises :class:`~shardstore.errors.DecryptionFailed` (or lets the KMS's error
    propagate) for anything else. ``context`` binds a wrapped key to the scope it belongs to
    (a KMS's encryption context / additional authenticated data)."""

    @property
    def key_id(self) -> str:
        """A stable name of the KEK (never the key itself), stored beside each wrapped key."""
        ...

    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        """``data_key`` sealed under the KEK and bound to ``context``; opaque bytes."""
        ...

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        """The data key ``wrap`` sealed with this ``context``; raises for another context,
        another KEK or altered bytes, never returns a wrong key."""
        ...


def aead() -> tuple[Any, type[Exception]]:
    """``cryptography``'s AESGCM class and its InvalidTag error, imported on first use so
    that ``import shardstore`` needs no cryptography; ``MissingDependency`` without it."""
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise MissingDependency(
            "encryption needs the cryptography package: pip install 'shardstore[encryption]'"
        ) from None
    return AESGCM, InvalidTag


def parse_kek(raw: bytes, where: str) -> bytes:
    """A KEK from its stored form: 32 raw bytes, or 64 hex digits, or base64 of 32 bytes
    (surrounding whitespace ignored)."""
    if len(raw) == KEK_BYTES:
        return raw
    text = raw.strip()
    for decode in (bytes.fromhex, base64.b64decode):
        try:
            key = decode(text.decode("ascii"))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            continue
        if len(key) == KEK_BYTES:
            return key
    raise ConfigurationError(
        f"the key-encryption key in {where} is not 32 bytes (raw, 64 hex digits or base64)"
    )


class LocalKek:
    """A :class:`KeyProvider` holding a 256-bit KEK in this process: AES-256-GCM wraps each
    data key with a fresh nonce and the wrap context as associated data."""

    def __init__(self, kek: bytes) -> None:
        if type(kek) is not bytes or len(kek) != KEK_BYTES:
            raise ConfigurationError("a local key-encryption key is exactly 32 bytes")
        aes_gcm, self._invalid_tag = aead()
        self._aead = aes_gcm(kek)
        # a fingerprint, not the key: which KEK wrapped a stored key
        self._key_id = "local:" + hashlib.sha256(b"shardstore-kek\x00" + kek).hexdigest()[:16]

    @property
    def key_id(self) -> str:
        """``local:`` and 16 hex digits of a hash of the KEK: which KEK wrapped a key,
        without revealing it."""
        return self._key_id

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, create: bool = False) -> LocalKek:
        """The KEK in ``path``; with ``create``, a new random one written there (mode 0600,
        created exclusively, so two processes never write two keys) when the file is absent."""
        if not isinstance(path, str | os.PathLike) or not str(path) or "\x00" in str(path):
            raise ConfigurationError("the key-encryption key file must be a non-empty path")
        file = Path(path)
        try:
            if create and not file.exists():
                file.parent.mkdir(parents=True, exist_ok=True)
                try:
                    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:
                    pass
                else:
                    with os.fdopen(fd, "wb") as out:
                        out.write(base64.b64encode(secrets.token_bytes(KEK_BYTES)) + b"\n")
                        out.flush()
                        os.fsync(out.fileno())
            with open(file, "rb") as handle:
                # a key is 32 bytes, at most 44 characters of base64 or 64 hex digits with
                # whitespace: a large file is not a key, and is not read whole
                raw = handle.read(MAX_KEK_FILE_BYTES + 1)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(
                f"cannot read the key-encryption key file {file}: {exc}"
            ) from None
        if len(raw) > MAX_KEK_FILE_BYTES:
            raise ConfigurationError(f"{file} is not a key-encryption key (too large)")
        return cls(parse_kek(raw, str(file)))

    @classmethod
    def from_env(cls, name: str = DEFAULT_KEY_ENV) -> LocalKek | None:
        """The KEK in environment variable ``name`` (hex or base64), None when it is unset."""
        value = os.environ.get(name)
        if value is None:
            return None
        if len(value) > MAX_KEK_FILE_BYTES:
            raise ConfigurationError(f"${name} is not a key-encryption key (too long)")
        return cls(parse_kek(value.encode("utf-8", "surrogateescape"), f"${name}"))

    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        """AES-256-GCM of ``data_key`` under the KEK with ``context`` as associated data,
        a fresh random nonce in front."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        body: bytes = self._aead.encrypt(nonce, data_key, context)
        return nonce + body

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        """The data key ``wrap`` sealed for ``context``; ``DecryptionFailed`` when the tag
        does not verify (another KEK or context, altered or truncated bytes)."""
        try:
            key: bytes = self._aead.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], context)
        except (self._invalid_tag, ValueError):
            raise DecryptionFailed(
                "a wrapped data key does not unwrap under this key-encryption key "
                "(another KEK, or the key file was altered or moved to another scope)"
            ) from None
        return key
