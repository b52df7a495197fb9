"""The key store: one small file per data key, in a directory of its own, outside the database.

Why here and not in a table: a backup of the database taken before a shred (``pg_dump``, a
copy of the data directory, a WAL archive) would keep a wrapped data key in a table, and the
key-encryption key, which outlives the shred, would still unwrap it. A file that a shred
unlinks is gone from every copy of the database, which never held it
(docs/decisions/0022-encryption-key-store.md).

Layout: ``<path>/keys/<scope hash>.key``, JSON ``{"v", "kid", "scope", "kek", "wrapped"}``, the
scope's current key; ``<path>/keys/<key id>.key`` (the same JSON), an older version of it that
a data-key rotation retired and that rows may still name until the rotation re-sealed them
(:mod:`shardstore.encryption.rotation`). ``"kek"`` names the key-encryption key that wrapped
the key, so that a store in the middle of a KEK rotation opens every file with the old or the
new KEK, and a repeated rotation skips the files already rewrapped.
A key is created by writing a temporary file, fsyncing it and hard-linking it to its final
name (``link`` fails if the name exists: two processes creating the key of one scope agree
on the first), then fsyncing the directory; a shred overwrites the file, fsyncs, unlinks it
and fsyncs the directory. Each step is atomic, so a crash leaves a scope with its key, or
with none (a zeroed file left by a crash between the overwrite and the unlink reads as
shredded, and the next shred or key creation removes it). Replacing a file (a rotation's new
version, a KEK rewrap) writes the new content to a temporary file, fsyncs it and renames it
over the old one, then fsyncs the directory: a crash leaves the old content or the new.
Shreds, rotations and rewraps of one key store take an exclusive ``flock`` on
``keys/.lock``, so that no rewrap writes back a key a concurrent shred destroyed.
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, Conflict, DecryptionFailed, InvalidInput, KeyShredded
from .provider import KeyProvider, aead

try:
    import fcntl
except ImportError:  # not POSIX: shreds, rotations and rewraps exclude each other in-process only
    fcntl = None  # type: ignore[assignment]

DATA_KEY_BYTES = 32
FORMAT_VERSION = 1
SCOPE_KINDS = ("subject", "session", "tenant")
MAX_SCOPE_CHARS = 1024
STALE_TEMP_SECONDS = 3600  # a temporary file this old belongs to a creator that died
LOCK_FILE = ".lock"
KID_SUFFIX_CHARS = 24  # hex digits of a key id's random part


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
        """The name of the scope's key files: a hash of the scope, so a file name reveals no
        tenant, subject or session."""
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


SCOPE_FILES_KEPT = 65_536
"""How many scopes' key file paths a key store keeps at most (then starts again)."""


class KeyStore:
    """Data keys per scope, wrapped by ``provider``, in files under ``path`` (created if
    absent). Safe to share between threads and between processes on one file system.

    Guarantees: a scope has at most one data key at a time; :meth:`shred` destroys it
    durably (it returns after the unlink reached the directory's fsync), after which no
    process reading this store, in this process or another, unwraps it again (each use
    checks the file; a cached key is dropped when its file is gone); a key id names one key
    for ever (a scope shredded and used again gets a new id)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        provider: KeyProvider,
        *,
        previous: Sequence[KeyProvider] = (),
    ) -> None:
        if not isinstance(provider, KeyProvider):
            raise ConfigurationError("provider must implement shardstore.encryption.KeyProvider")
        if isinstance(previous, str | bytes) or not all(
            isinstance(p, KeyProvider) for p in previous
        ):
            raise ConfigurationError("previous must be a sequence of KeyProviders")
        if not isinstance(path, str | os.PathLike) or not str(path) or "\x00" in str(path):
            raise ConfigurationError("the key store path must be a non-empty path")
        self.path = Path(path)
        self.provider = provider
        # KEKs that may still have wrapped some files (a KEK rotation not yet finished): used
        # to unwrap only, never to wrap
        self.previous = tuple(previous)
        self._keys_dir = self.path / "keys"
        try:
            self._keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot open the key store at {self.path}: {exc}") from None
        self._lock = threading.Lock()
        # kid -> (the file it was read from, that file's identity then, the key)
        self._by_kid: dict[str, tuple[Path, tuple[int, int], DataKey]] = {}
        # scope file -> (its identity when read, the current key it held): key_for checks a
        # scope it has read with one stat() instead of reading and parsing the file again
        self._current: dict[Path, tuple[tuple[int, int], DataKey]] = {}
        # each scope's key file, so that the check at every use is one stat, not a hash of
        # the scope and a path built anew (a sealed append's client time)
        self._scope_files: dict[Scope, Path] = {}
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

    def _provider_for(self, doc: dict[str, Any], file: Path) -> KeyProvider:
        """The provider whose KEK wrapped the key in ``doc`` (by the ``"kek"`` it records)."""
        kek = doc.get("kek")
        for provider in (self.provider, *self.previous):
            if provider.key_id == kek:
                return provider
        if not self.previous:
            # a provider whose key id changed (or a file without one): let unwrap decide
            return self.provider
        raise DecryptionFailed(
            f"the key file {file} is wrapped by key-encryption key {kek!r}, which this key "
            "store was not given (pass it in previous= while a KEK rotation is unfinished)"
        )

    def _parse(self, doc: dict[str, Any], file: Path) -> tuple[str, Scope, bytes]:
        try:
            kid = doc["kid"]
            scope = Scope(*doc["scope"])
            wrapped = base64.b64decode(doc["wrapped"], validate=True)
        except (KeyError, TypeError, ValueError, binascii.Error, InvalidInput):
            raise DecryptionFailed(f"the key file {file} is malformed") from None
        if type(kid) is not str:
            raise DecryptionFailed(f"the key file {file} is malformed")
        if file.name not in (f"{scope.file_stem}.key", f"{kid}.key") or not kid.startswith(
            scope.file_stem + "."
        ):
            raise DecryptionFailed(f"the key file {file} holds the key of another scope")
        return kid, scope, wrapped

    def _unwrap_raw(self, doc: dict[str, Any], file: Path) -> tuple[str, Scope, bytes]:
        kid, scope, wrapped = self._parse(doc, file)
        key = self._provider_for(doc, file).unwrap(wrapped, _wrap_context(kid, scope))
        if len(key) != DATA_KEY_BYTES:
            raise DecryptionFailed(f"the key in {file} unwrapped to {len(key)} bytes, not 32")
        return kid, scope, key

    def _unwrap(self, doc: dict[str, Any], file: Path) -> DataKey:
        kid, scope, key = self._unwrap_raw(doc, file)
        aes_gcm, _invalid_tag = aead()
        return DataKey(kid, scope, aes_gcm(key))

    def _doc(self, kid: str, scope: Scope, data_key: bytes, provider: KeyProvider) -> bytes:
        doc = {
            "v": FORMAT_VERSION,
            "kid": kid,
            "scope": [scope.kind, scope.tenant, scope.name],
            "kek": provider.key_id,
            "wrapped": base64.b64encode(provider.wrap(data_key, _wrap_context(kid, scope))).decode(
                "ascii"
            ),
        }
        return json.dumps(doc).encode("ascii")

    def _write_temp(self, stem: str, content: bytes) -> Path:
        """``content`` in a new temporary file of the keys folder, fsynced."""
        tmp = self._keys_dir / f"{stem}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(content)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def _replace(self, file: Path, stem: str, content: bytes) -> None:
        """``file`` holds ``content`` afterwards, whole (written beside it, fsynced, renamed
        over it, the folder fsynced): a crash leaves the old content or the new."""
        tmp = self._write_temp(stem, content)
        try:
            os.replace(tmp, file)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self._keys_dir)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """This store's shreds, rotations and rewraps, one at a time across threads and
        processes (a ``flock`` on ``keys/.lock``, released by the kernel if the holder dies)."""
        with self._lock:
            fd = os.open(self._keys_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def rotating(self, scope: Scope) -> Iterator[None]:
        """Held for the whole of a data-key rotation of ``scope`` (a ``flock`` on
        ``keys/<scope>.rotating``): a second rotation of the same scope, in this process or
        another, gets :class:`~shardstore.errors.Conflict` instead of racing the first."""
        fd = os.open(self._keys_dir / f"{scope.file_stem}.rotating", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Conflict(
                    "the data key of this subject or session is being rotated already; "
                    "retry when that rotation has finished"
                ) from None
            yield
        finally:
            os.close(fd)

    def _remember(self, file: Path, ident: tuple[int, int], key: DataKey) -> DataKey:
        self._by_kid[key.kid] = (file, ident, key)
        return key

    def _cached(self, kid: str) -> DataKey | None:
        cached = self._by_kid.get(kid)
        if cached is None:
            return None
        file, ident, key = cached
        try:
            st = os.stat(file)
        except FileNotFoundError:
            self._by_kid.pop(kid, None)
            return None
        if (st.st_ino, st.st_mtime_ns) != ident:
            return None  # changed: the caller reads the file again
        return key

    def _opened(self, file: Path, found: tuple[tuple[int, int], dict[str, Any]]) -> DataKey:
        """The key of a file just read. A key id names one data key for ever, so a key
        already unwrapped is reused when its file changed but still holds that id (a KEK
        rewrap by another process): a process that has not been given the new KEK yet goes
        on with the keys it holds. A file that no longer holds the id (shredded, zeroed)
        never reaches here."""
        kid = found[1].get("kid")
        cached = self._by_kid.get(kid) if type(kid) is str else None
        if cached is not None and cached[0] == file:
            return self._remember(file, found[0], cached[2])
        return self._remember(file, found[0], self._unwrap(found[1], file))

    # ------------------------------------------------------------ keys

    def key(self, kid: str) -> DataKey:
        """The data key named ``kid`` (its scope's current version or a retired one still
        kept); :class:`KeyShredded` when it no longer exists."""
        if type(kid) is not str or "." not in kid or len(kid) > 100:
            raise DecryptionFailed("a ciphertext names no valid key id")
        stem, suffix = kid.split(".", 1)
        if not stem.isalnum() or not suffix.isalnum():
            raise DecryptionFailed("a ciphertext names no valid key id")
        cached = self._cached(kid)
        if cached is not None:
            return cached
        for file in (self._file(stem), self._keys_dir / f"{kid}.key"):
            found = self._read(file)
            if found is not None and found[1].get("kid") == kid:
                return self._opened(file, found)
        self._by_kid.pop(kid, None)
        raise KeyShredded(f"data key {kid} was shredded; what it encrypted is gone")

    def key_for(self, scope: Scope, *, create: bool = True) -> DataKey | None:
        """The current data key of ``scope``, created (durably, before it is returned) when it
        has none and ``create``; None when it has none and not ``create``. The file is
        checked at every call (a stat; read again when it changed), so a rotation's new
        version is used from the moment it is renamed in, and a shred is seen at once."""
        file = self._scope_files.get(scope)
        if file is None:
            if len(self._scope_files) >= SCOPE_FILES_KEPT:
                self._scope_files.clear()
            file = self._scope_files[scope] = self._file(scope.file_stem)
        known = self._current.get(file)
        if known is not None:
            try:
                st = os.stat(file)
            except FileNotFoundError:
                st = None
            if st is not None and (st.st_ino, st.st_mtime_ns) == known[0]:
                return known[1]
            self._current.pop(file, None)
        found = self._read(file)
        if found is not None:
            key = self._opened(file, found)
            self._current[file] = (found[0], key)
            return key
        if not create:
            return None
        with self._lock:
            return self._create(scope, file)

    def _create(self, scope: Scope, file: Path) -> DataKey:
        if file.exists() and self._read(file) is None:
            file.unlink(missing_ok=True)  # a zeroed file: a shred that crashed before its unlink
        kid = f"{scope.file_stem}.{secrets.token_hex(KID_SUFFIX_CHARS // 2)}"
        content = self._doc(kid, scope, secrets.token_bytes(DATA_KEY_BYTES), self.provider)
        tmp = self._write_temp(scope.file_stem, content)
        try:
            # link() fails when another process created this scope's key first: use that one
            with contextlib.suppress(FileExistsError):
                os.link(tmp, file)
            _fsync_dir(self._keys_dir)
        finally:
            tmp.unlink(missing_ok=True)
        found = self._read(file)
        if found is None:
            raise KeyShredded(f"the data key of {scope} was shredded while it was being created")
        return self._remember(file, found[0], self._unwrap(found[1], file))

    def retired(self, scope: Scope) -> list[str]:
        """The ids of the older versions of ``scope``'s key still kept (a data-key rotation
        retired them; rows may still name them until it re-sealed them), oldest file first."""
        current = self._read(self._file(scope.file_stem))
        current_kid = current[1].get("kid") if current is not None else None
        kids = []
        for file in sorted(self._keys_dir.glob(f"{scope.file_stem}.*.key")):
            found = self._read(file)
            kid = found[1].get("kid") if found is not None else None
            if type(kid) is str and file.name == f"{kid}.key" and kid != current_kid:
                kids.append(kid)
        return kids

    def rotate(self, scope: Scope) -> tuple[DataKey, list[str]]:
        """A new current version of ``scope``'s data key; returns it and the ids of the
        retired versions (the one it replaced among them), which stay readable until
        :meth:`shred_retired`. Durable before it returns, and every later
        :meth:`key_for` (in any process) returns the new version. ``KeyShredded`` when the
        scope has no key (nothing to rotate).

        Steps: the current file is copied to ``<old kid>.key`` (temporary file, fsync,
        link), then the new version replaces the current file (temporary file, fsync,
        rename), each followed by an fsync of the directory. A crash leaves the old version
        current (and perhaps its copy, harmless), or the new one current with the old one
        retired."""
        file = self._file(scope.file_stem)
        with self._exclusive():
            found = self._read(file)
            if found is None:
                raise KeyShredded(f"{scope} has no data key to rotate")
            old = self._unwrap(found[1], file)
            retired_file = self._keys_dir / f"{old.kid}.key"
            tmp = self._write_temp(scope.file_stem, json.dumps(found[1]).encode("ascii"))
            try:
                with contextlib.suppress(FileExistsError):  # a repeat after a crash
                    os.link(tmp, retired_file)
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_dir(self._keys_dir)
            kid = f"{scope.file_stem}.{secrets.token_hex(KID_SUFFIX_CHARS // 2)}"
            content = self._doc(kid, scope, secrets.token_bytes(DATA_KEY_BYTES), self.provider)
            self._replace(file, scope.file_stem, content)
            found = self._read(file)
            assert found is not None
            new = self._remember(file, found[0], self._unwrap(found[1], file))
        return new, self.retired(scope)

    def _destroy(self, file: Path) -> None:
        """Overwrite ``file`` with zeros, fsync, unlink (no directory fsync: the caller's)."""
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            return
        # best effort against recovery of the unlinked blocks on a plain file system (a
        # copy-on-write or journaling one may keep old blocks; docs/security.md says so)
        with open(file, "r+b") as handle:
            handle.write(b"\x00" * size)
            handle.flush()
            os.fsync(handle.fileno())
        file.unlink(missing_ok=True)

    def shred_retired(self, scope: Scope, kids: Sequence[str] | None = None) -> list[str]:
        """Destroy retired versions of ``scope``'s key (those in ``kids``, else all);
        never the current one. Returns the ids destroyed."""
        with self._exclusive():
            gone = []
            for kid in self.retired(scope):
                if kids is not None and kid not in kids:
                    continue
                self._destroy(self._keys_dir / f"{kid}.key")
                self._by_kid.pop(kid, None)
                gone.append(kid)
            if gone:
                _fsync_dir(self._keys_dir)
            return gone

    def shred_all(self, scope: Scope) -> list[str]:
        """Destroy every version of ``scope``'s data key durably (retired ones first, then
        the current one); returns their ids. Idempotent; a crash midway leaves each version
        destroyed or intact, and a repeat finishes the job."""
        file = self._file(scope.file_stem)
        with self._exclusive():
            gone = []
            for old in self._keys_dir.glob(f"{scope.file_stem}.*.key"):
                try:
                    found = self._read(old)
                except DecryptionFailed:
                    found = None
                kid = found[1].get("kid") if found is not None else None
                self._destroy(old)
                if type(kid) is str:
                    gone.append(kid)
            try:
                found = self._read(file)
            except DecryptionFailed:
                found = None
            kid = found[1].get("kid") if found is not None else None
            if file.exists():
                self._destroy(file)
                if type(kid) is str and kid not in gone:
                    gone.insert(0, kid)
            _fsync_dir(self._keys_dir)
            for cached_kid in [k for k in self._by_kid if k.startswith(scope.file_stem + ".")]:
                self._by_kid.pop(cached_kid, None)
            return gone

    def shred(self, scope: Scope) -> str | None:
        """Destroy the data key of ``scope`` (every version of it) durably; returns its
        current id (None when it had none). Idempotent; a crash midway leaves the key
        destroyed or intact, and a repeat finishes the job."""
        current = None
        with contextlib.suppress(DecryptionFailed):
            found = self._read(self._file(scope.file_stem))
            current = found[1].get("kid") if found is not None else None
        gone = self.shred_all(scope)
        if type(current) is str:
            return current
        return gone[0] if gone else None

    def scopes(self, tenant: str | None = None) -> list[Scope]:
        """The scopes with a key in this store (of ``tenant`` only, when given): each key
        file records its scope, so this reads every file."""
        found: set[Scope] = set()
        for file in self._keys_dir.glob("*.key"):
            try:
                read = self._read(file)
                if read is None:
                    continue
                _kid, scope, _wrapped = self._parse(read[1], file)
            except DecryptionFailed:
                continue
            if tenant is None or scope.tenant == tenant:
                found.add(scope)
        return sorted(found, key=lambda s: (s.kind, s.tenant, s.name))

    # ------------------------------------------------------------ KEK rotation

    def rewrap(self, new_provider: KeyProvider) -> RewrapReport:
        """Rewrap every data key of this store (current and retired versions) under
        ``new_provider``'s KEK, then use it for every later key; no database row changes
        (rows name data keys, which stay the same). The old KEK opens no key file afterwards.

        Each file is rewritten on its own (temporary file, fsync, rename over it, directory
        fsync), under the store's lock, so a concurrent shred is never undone. A file
        already wrapped by ``new_provider`` is skipped: after a crash, open the store with
        both KEKs (``previous=[old provider]``) and call again to finish. A shredded key
        stays shredded (only existing files are rewritten)."""
        if not isinstance(new_provider, KeyProvider):
            raise ConfigurationError(
                "new_provider must implement shardstore.encryption.KeyProvider"
            )
        done = skipped = 0
        for file in sorted(self._keys_dir.glob("*.key")):
            with self._exclusive():
                found = self._read(file)
                if found is None:
                    continue  # shredded meanwhile
                if found[1].get("kek") == new_provider.key_id:
                    skipped += 1
                    continue
                kid, scope, data_key = self._unwrap_raw(found[1], file)
                self._replace(file, scope.file_stem, self._doc(kid, scope, data_key, new_provider))
                done += 1
        with self._lock:
            old = self.provider
            if old.key_id != new_provider.key_id:
                self.previous = tuple(
                    p for p in (*self.previous, old) if p.key_id != new_provider.key_id
                )
            self.provider = new_provider
            self._by_kid.clear()
        return RewrapReport(rewrapped=done, already=skipped, kek=new_provider.key_id)

    def forget_previous(self) -> None:
        """Stop accepting the previous KEKs (after a finished :meth:`rewrap`)."""
        with self._lock:
            self.previous = ()


@dataclass(frozen=True, slots=True)
class RewrapReport:
    """What :meth:`KeyStore.rewrap` did: files rewrapped now, files already under the new
    KEK (a repeated call), and the new KEK's id."""

    rewrapped: int
    already: int
    kek: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {"rewrapped": self.rewrapped, "already": self.already, "kek": self.kek}
