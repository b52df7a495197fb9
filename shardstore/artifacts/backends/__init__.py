"""Where artifact bytes live. The postgres backend is the default and is written as
operations (:mod:`shardstore.artifacts.ops`: the bytes go in the same transactions as the
rows); the object backends here (a local directory, an S3-compatible store) are plain
synchronous objects whose methods the operations call in ``Call`` steps (a worker thread
under asyncio). Every backend keeps an object at ``{tenant}/sha256/ab/cd/{hash}``
(:func:`shardstore.artifacts.model.object_key`)."""

from __future__ import annotations

from typing import IO, Any, Protocol

from ...errors import ConfigurationError


class Staging(Protocol):
    """Bytes being received, before their hash is known."""

    def write(self, data: bytes) -> None:
        """Append ``data`` to what was received so far."""
        ...

    def write_head(self, data: bytes) -> None:
        """Overwrite the first ``len(data)`` bytes written (an encrypted artifact's header,
        which is known only after the content)."""

    def digest(self) -> tuple[str, int]:
        """The sha256 (hex) and size of the staged bytes (after :meth:`seal`)."""

    def seal(self) -> None:
        """All bytes written: make them durable."""


class ObjectBackend(Protocol):
    """An object store the artifact protocol drives (docs/artifacts.md): stage the bytes,
    place them at their key atomically, verify what is stored, read, delete."""

    @property
    def name(self) -> str:
        """``file`` or ``s3``."""

    def uri(self, key: str) -> str:
        """The URI of the object at ``key``."""

    def stage(self) -> Staging:
        """A new staging area (a temporary file)."""

    def place(self, staging: Any, key: str) -> None:
        """Make the staged bytes the object at ``key``, atomically (a reader sees the old
        object, none, or the whole new one); the staging area stays until discarded."""

    def verify(self, key: str, sha256: str, size: int) -> bool:
        """Whether the object at ``key`` holds exactly ``size`` bytes with this sha256."""

    def open(self, key: str) -> IO[bytes]:
        """The object for reading; ``FileNotFoundError`` if there is none."""

    def delete(self, key: str) -> bool:
        """Remove the object (True if there was one); idempotent."""

    def discard(self, staging: Any) -> None:
        """Remove a staging area."""

    def sweep_staging(self, older_than_s: float) -> int:
        """Remove staging areas older than this (left by clients that died mid-upload);
        returns how many."""

    def keys(self) -> list[str]:
        """Every object key stored (tests and ``artifacts ls``; may be slow)."""


def open_backend(url: str) -> ObjectBackend | None:
    """The backend for ``connect(artifacts=...)``: None for ``"postgres"`` (the database
    itself), a directory for ``file:///dir``, an S3 bucket (and prefix) for
    ``s3://bucket/prefix`` (the ``s3`` extra; endpoint and credentials from the usual
    ``AWS_*`` variables, ``AWS_ENDPOINT_URL`` for an S3-compatible server)."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError(
            "artifacts must be 'postgres', 'file:///a/directory' or 's3://bucket/prefix'"
        )
    if url == "postgres":
        return None
    if url.startswith("file://"):
        from .file import FileBackend

        return FileBackend.from_url(url)
    if url.startswith("s3://"):
        from .s3 import S3Backend

        return S3Backend.from_url(url)
    use = "use 'postgres', 'file:///a/directory' or 's3://bucket/prefix'"
    raise ConfigurationError(f"artifacts={url!r:.80}: {use}", cli=f"--store {url!r:.80}: {use}")
