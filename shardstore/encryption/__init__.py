"""Encryption at rest with per-subject data keys (opt-in: ``connect(dsn, encryption=...)``).

* :class:`KeyProvider`: wraps and unwraps data keys under a key-encryption key (KEK) the
  library never sees; a KMS implements it with its encrypt/decrypt calls.
* :class:`KeyStore`: the wrapped data keys, one file per scope in a directory outside the
  database, so that shredding a key reaches every backup of the database
  (:mod:`shardstore.encryption.keystore`).
* :class:`LocalKeyProvider`: a key store at ``path`` whose KEK comes from a key file or an
  environment variable: ``shardstore.connect(dsn, encryption=LocalKeyProvider(path))``.

What is encrypted, what stays clear and what a backup still reveals: docs/security.md,
"Encryption at rest"; why so: docs/decisions/0022-encryption-key-store.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigurationError
from .envelope import Sealer, is_sealed
from .keystore import DataKey, KeyStore, RewrapReport, Scope
from .provider import DEFAULT_KEY_ENV, KeyProvider, LocalKek

__all__ = [
    "DEFAULT_KEY_ENV",
    "DataKey",
    "KeyProvider",
    "KeyStore",
    "LocalKek",
    "LocalKeyProvider",
    "RewrapReport",
    "Scope",
    "Sealer",
    "is_sealed",
    "sealer_for",
]

KEK_FILE_NAME = "kek"


class LocalKeyProvider(KeyStore):
    """The local key store at ``path`` (created if absent), its data keys wrapped by a local
    KEK: read from ``key_file`` when given (created, 0600, if absent), else from the
    environment variable ``key_env`` (hex or base64 of 32 bytes) when set, else from
    ``<path>/kek`` (created on first use). Keep the KEK apart from the key store in
    production (a key file elsewhere, or the variable); the default is for one machine.

    ``previous_key_files``: KEK files that may still wrap some data keys (a KEK rotation
    that did not finish); used to unwrap those only. :meth:`rotate_kek` rotates the KEK."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        key_file: str | os.PathLike[str] | None = None,
        key_env: str = DEFAULT_KEY_ENV,
        previous_key_files: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        if not isinstance(path, str | os.PathLike) or not str(path) or "\x00" in str(path):
            raise ConfigurationError("LocalKeyProvider(path): path must be a non-empty path")
        if key_file is not None and (
            not isinstance(key_file, str | os.PathLike) or not str(key_file)
        ):
            raise ConfigurationError("key_file must be a non-empty path or None")
        if type(key_env) is not str or not key_env or "\x00" in key_env or "=" in key_env:
            raise ConfigurationError("key_env must name an environment variable")
        kek: LocalKek | None
        if key_file is not None:
            kek = LocalKek.from_file(key_file, create=True)
        else:
            kek = LocalKek.from_env(key_env)
            if kek is None:
                kek = LocalKek.from_file(Path(path) / KEK_FILE_NAME, create=True)
        if isinstance(previous_key_files, str | bytes | os.PathLike) or not isinstance(
            previous_key_files, Sequence
        ):
            raise ConfigurationError("previous_key_files must be a list of key file paths")
        previous = [LocalKek.from_file(f) for f in previous_key_files]
        super().__init__(path, kek, previous=previous)

    def rotate_kek(self, new_key_file: str | os.PathLike[str]) -> RewrapReport:
        """Rotate the key-encryption key: every data key of the store is rewrapped under
        the KEK in ``new_key_file`` (created, 0600, when absent), one file at a time,
        crash-safe; no database row is rewritten. From then on this store wraps with the
        new KEK and the old one opens no key file. After a crash, open the store with the
        new key file and the old one in ``previous_key_files`` and call again: it finishes
        (files already rewrapped are skipped). Keys shredded before stay shredded."""
        report = self.rewrap(LocalKek.from_file(new_key_file, create=True))
        self.forget_previous()
        return report


def sealer_for(encryption: object) -> Sealer | None:
    """The sealer of ``connect(encryption=...)``'s value: None for None, else it must be a
    :class:`KeyStore` (a :class:`LocalKeyProvider`, or a key store over any provider)."""
    if encryption is None:
        return None
    if not isinstance(encryption, KeyStore):
        raise ConfigurationError(
            "encryption must be a shardstore.encryption.LocalKeyProvider or KeyStore, not "
            f"{type(encryption).__name__}"
        )
    return Sealer(encryption)
