"""The key store: one small file per data key, in a directory of its own, outside the database.

Why here and not in a table: a backup of the database taken before a shred (``pg_dump``, a
copy of the data directory, a WAL archive) would keep a wrapped data key in a table, and the
key-encryption key, which outlives the shred, would still unwrap it. A file that a shred
unlinks is gone from every copy of the database, which never held it
(docs/decisions/0022-encryption-key-store.md).

Layout: ``<path>/keys/<scope hash>.key``, JSON ``{"v", "kid", "scope", "kek", "wrapped"}``.
A key is created by writing a temporary file, fsyncing it and hard-linking it to its final
name (``link`` fails if the name exists: two processes creating the key of one scope agree
on the first), then fsyncing the directory; a shred overwrites the file, fsyncs, unlinks it
and fsyncs the directory. Each step is atomic, so a crash leaves a scope with its key, or
with none (a zeroed file left by a crash between the overwrite and the unlink reads as
shredded, and the next shred or key creation removes it).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, DecryptionFailed, InvalidInput, KeyShredded
from .provider import KeyProvider, aead

DATA_KEY_BYTES = 32
FORMAT_VERSION = 1
SCOPE_KINDS = ("subject", "session", "tenant")
MAX_SCOPE_CHARS = 1024
STALE_TEMP_SECONDS = 3600  # a temporary file this old belongs to a creator that died


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose data a data key protects: ``("subject", tenant, subject_id)``, ``("session",
    tenant, session_id)`` for a session without a subject, or ``("tenant", tenant, "")`` for
    a tenant's rows that name no subject."""

    kind: str
    tenant: str
    name: str

    def __post_init__(self) -> None:
        if self.kind not in SCOPE_KINDS:
            raise InvalidInput(f"a key scope is one of {SCOPE_KINDS}, not {self.kind!r}")
        for what, value in (("tenant", self.tenant), ("name", self.name)):
            if type(value) is not str or len(value) > MAX_SCOPE_CHARS:
                raise InvalidInput(
                    f"a key scope's {what} is a str of at most {MAX_SCOPE_CHARS} chars"
                )
        if not self.tenant or (self.kind != "tenant") != bool(self.name):
            raise InvalidInput(
                "a key scope names a tenant, and a subject or session unless it is a tenant's"
            )

    def canonical(self) -> bytes:
        """The scope as bytes that no other scope has."""
        return json.dumps([self.kind, self.tenant, self.name], ensure_ascii=True).encode()

    @property
    def file_stem(self) -> str:
        return hashlib.sha256(b"shardstore-scope\x00" + self.canonical()).hexdigest()[:40]


@dataclass(frozen=True, slots=True)
class DataKey:
    """An unwrapped data key: its id (stored beside every ciphertext), its scope and its AEAD."""

    kid: str
    scope: Scope
    aead: Any  # cryptography's AESGCM over the data key


def _wrap_context(kid: str, scope: Scope) -> bytes:
    return b"shardstore-dek/1\x00" + kid.encode("ascii") + b"\x00" + scope.canonical()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class KeyStore:
    """Data keys per scope, wrapped by ``provider``, in files under ``path`` (created if
    absent). Safe to share between threads and between processes on one file system.

    Guarantees: a scope has at most one data key at a time; :meth:`shred` destroys it
    durably (it returns after the unlink reached the directory's fsync), after which no
    process reading this store, in this process or another, unwraps it again (each use
    checks the file; a cached key is dropped when its file is gone); a key id names one key
    for ever (a scope shredded and used again gets a new id)."""

    def __init__(self, path: str | os.PathLike[str], provider: KeyProvider) -> None:
        if not isinstance(provider, KeyProvider):
            raise ConfigurationError("provider must implement shardstore.encryption.KeyProvider")
        if not isinstance(path, str | os.PathLike) or not str(path) or "\x00" in str(path):
            raise ConfigurationError("the key store path must be a non-empty path")
        self.path = Path(path)
        self.provider = provider
        self._keys_dir = self.path / "keys"
        try:
            self._keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot open the key store at {self.path}: {exc}") from None
        self._lock = threading.Lock()
        self._by_kid: dict[str, tuple[tuple[int, int], DataKey]] = {}
        self._sweep_temporaries()

    # ------------------------------------------------------------ files

    def _file(self, stem: str) -> Path:
        return self._keys_dir / f"{stem}.key"

    def _sweep_temporaries(self) -> None:
        now = time.time()
        for tmp in self._keys_dir.glob("*.tmp"):
            try:
                if now - tmp.stat().st_mtime > STALE_TEMP_SECONDS:
                    tmp.unlink()
            except OSError:
                pass

    def _read(self, file: Path) -> tuple[tuple[int, int], dict[str, Any]] | None:
        """The parsed file and its identity (inode, mtime), None when absent or zeroed (a
        shred interrupted between its overwrite and its unlink)."""
        try:
            with open(file, "rb") as handle:
                st = os.fstat(handle.fileno())
                raw = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DecryptionFailed(f"the key file {file} cannot be read: {exc}") from None
        if not raw.strip(b"\x00"):
            return None
        try:
            doc = json.loads(raw)
            if type(doc) is not dict or doc.get("v") != FORMAT_VERSION:
                raise ValueError
        except ValueError:
            raise DecryptionFailed(f"the key file {file} is not a shardstore key") from None
        return (st.st_ino, st.st_mtime_ns), doc

    def _unwrap(self, doc: dict[str, Any], file: Path) -> DataKey:
        try:
            kid = doc["kid"]
            scope = Scope(*doc["scope"])
            wrapped = base64.b64decode(doc["wrapped"], validate=True)
        except (KeyError, TypeError, ValueError, binascii.Error, InvalidInput):
            raise DecryptionFailed(f"the key file {file} is malformed") from None
        if type(kid) is not str:
            raise DecryptionFailed(f"the key file {file} is malformed")
        if file.name != f"{scope.file_stem}.key" or not kid.startswith(scope.file_stem + "."):
            raise DecryptionFailed(f"the key file {file} holds the key of another scope")
        key = self.provider.unwrap(wrapped, _wrap_context(kid, scope))
        if len(key) != DATA_KEY_BYTES:
            raise DecryptionFailed(f"the key in {file} unwrapped to {len(key)} bytes, not 32")
        aes_gcm, _invalid_tag = aead()
        return DataKey(kid, scope, aes_gcm(key))

    # ------------------------------------------------------------ keys

    def key(self, kid: str) -> DataKey:
        """The data key named ``kid``; :class:`KeyShredded` when it no longer exists."""
        if type(kid) is not str or "." not in kid or len(kid) > 100:
            raise DecryptionFailed("a ciphertext names no valid key id")
        stem = kid.split(".", 1)[0]
        if not stem.isalnum():
            raise DecryptionFailed("a ciphertext names no valid key id")
        file = self._file(stem)
        try:
            st = os.stat(file)
        except FileNotFoundError:
            self._by_kid.pop(kid, None)
            raise KeyShredded(f"data key {kid} was shredded; what it encrypted is gone") from None
        cached = self._by_kid.get(kid)
        if cached is not None and cached[0] == (st.st_ino, st.st_mtime_ns):
            return cached[1]
        found = self._read(file)
        if found is None or found[1].get("kid") != kid:
            self._by_kid.pop(kid, None)
            raise KeyShredded(f"data key {kid} was shredded; what it encrypted is gone")
        key = self._unwrap(found[1], file)
        self._by_kid[kid] = (found[0], key)
        return key

    def key_for(self, scope: Scope, *, create: bool = True) -> DataKey | None:
        """The current data key of ``scope``, created (durably, before it is returned) when it
        has none and ``create``; None when it has none and not ``create``."""
        file = self._file(scope.file_stem)
        found = self._read(file)
        if found is not None:
            kid = found[1].get("kid")
            cached = self._by_kid.get(kid) if type(kid) is str else None
            if cached is not None and cached[0] == found[0]:
                return cached[1]
            key = self._unwrap(found[1], file)
            self._by_kid[key.kid] = (found[0], key)
            return key
        if not create:
            return None
        with self._lock:
            return self._create(scope, file)

    def _create(self, scope: Scope, file: Path) -> DataKey:
        if file.exists() and self._read(file) is None:
            file.unlink(missing_ok=True)  # a zeroed file: a shred that crashed before its unlink
        kid = f"{scope.file_stem}.{secrets.token_hex(12)}"
        data_key = secrets.token_bytes(DATA_KEY_BYTES)
        doc = {
            "v": FORMAT_VERSION,
            "kid": kid,
            "scope": [scope.kind, scope.tenant, scope.name],
            "kek": self.provider.key_id,
            "wrapped": base64.b64encode(
                self.provider.wrap(data_key, _wrap_context(kid, scope))
            ).decode("ascii"),
        }
        tmp = self._keys_dir / f"{scope.file_stem}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(json.dumps(doc).encode("ascii"))
                out.flush()
                os.fsync(out.fileno())
            # link() fails when another process created this scope's key first: use that one
            with contextlib.suppress(FileExistsError):
                os.link(tmp, file)
            _fsync_dir(self._keys_dir)
        finally:
            tmp.unlink(missing_ok=True)
        found = self._read(file)
        if found is None:
            raise KeyShredded(f"the data key of {scope} was shredded while it was being created")
        key = self._unwrap(found[1], file)
        self._by_kid[key.kid] = (found[0], key)
        return key

    def shred(self, scope: Scope) -> str | None:
        """Destroy the data key of ``scope`` durably; returns its id (None when it had
        none). Idempotent; a crash midway leaves the key destroyed or intact, and a repeat
        finishes the job."""
        file = self._file(scope.file_stem)
        with self._lock:
            try:
                found = self._read(file)
            except DecryptionFailed:
                found = None
            kid = found[1].get("kid") if found is not None else None
            try:
                size = file.stat().st_size
            except FileNotFoundError:
                return None
            # best effort against recovery of the unlinked blocks on a plain file system (a
            # copy-on-write or journaling one may keep old blocks; docs/security.md says so)
            with open(file, "r+b") as handle:
                handle.write(b"\x00" * size)
                handle.flush()
                os.fsync(handle.fileno())
            file.unlink(missing_ok=True)
            _fsync_dir(self._keys_dir)
            for cached_kid in [k for k in self._by_kid if k.startswith(scope.file_stem + ".")]:
                self._by_kid.pop(cached_kid, None)
            return kid if type(kid) is str else None
