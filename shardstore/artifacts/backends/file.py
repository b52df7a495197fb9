"""Artifacts in a local directory: ``{root}/{tenant}/sha256/ab/cd/{hash}``, staged in
``{root}/.staging/`` (same file system, so placing is a hard link and a rename)."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import unquote, urlparse

from ...core.durable import fsync_dir
from ...errors import ConfigurationError

_STAGING = ".staging"
_READ = 1 << 20


@dataclass
class FileStaging:
    """A staging file, written then fsynced."""

    path: Path
    handle: IO[bytes] | None = field(default=None, repr=False)

    def write(self, data: bytes) -> None:
        """Append bytes."""
        assert self.handle is not None
        self.handle.write(data)

    def write_head(self, data: bytes) -> None:
        """Overwrite the first bytes (an encrypted artifact's header, known last)."""
        assert self.handle is not None
        self.handle.seek(0)
        self.handle.write(data)
        self.handle.seek(0, os.SEEK_END)

    def digest(self) -> tuple[str, int]:
        """The sha256 (hex) and size of the staged bytes, read back once sealed."""
        digest = hashlib.sha256()
        size = 0
        with open(self.path, "rb") as f:
            while piece := f.read(_READ):
                digest.update(piece)
                size += len(piece)
        return digest.hexdigest(), size

    def seal(self) -> None:
        """Flush and fsync; the file is complete."""
        if self.handle is not None:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
            self.handle = None


@dataclass(frozen=True)
class FileBackend:
    """Objects as files under ``root``."""

    root: Path
    name: str = "file"

    @classmethod
    def from_url(cls, url: str) -> FileBackend:
        """``file:///absolute/dir`` (created if missing)."""
        parsed = urlparse(url)
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            write = "write file:///an/absolute/directory"
            raise ConfigurationError(
                f"artifacts={url!r:.80}: {write}", cli=f"--store {url!r:.80}: {write}"
            )
        root = Path(unquote(parsed.path))
        try:
            (root / _STAGING).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"artifacts directory {root}: {exc}") from None
        return cls(root)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not parts or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise ValueError(f"bad object key {key!r}")
        return self.root.joinpath(*parts)

    def uri(self, key: str) -> str:
        """``file://`` + the object's absolute path."""
        return self._path(key).as_uri()

    def stage(self) -> FileStaging:
        """A new file in the staging directory."""
        path = self.root / _STAGING / f"{uuid.uuid4().hex}.part"
        return FileStaging(path, open(path, "xb"))

    def place(self, staging: FileStaging, key: str) -> None:
        """Hard-link the staging file beside the target and rename it over the target."""
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        os.link(staging.path, tmp)
        os.replace(tmp, target)
        fsync_dir(target.parent)

    def verify(self, key: str, sha256: str, size: int) -> bool:
        """Read the object back and hash it."""
        digest = hashlib.sha256()
        total = 0
        try:
            with open(self._path(key), "rb") as f:
                while piece := f.read(_READ):
                    digest.update(piece)
                    total += len(piece)
        except FileNotFoundError:
            return False
        return total == size and digest.hexdigest() == sha256

    def open(self, key: str) -> IO[bytes]:
        """The file, opened for reading."""
        return open(self._path(key), "rb")

    def delete(self, key: str) -> bool:
        """Unlink the file (True if it was there)."""
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            return False
        return True

    def discard(self, staging: FileStaging) -> None:
        """Close and unlink a staging file."""
        if staging.handle is not None:
            staging.handle.close()
            staging.handle = None
        staging.path.unlink(missing_ok=True)

    def sweep_staging(self, older_than_s: float) -> int:
        """Unlink staging files (and placement temporaries) not modified for this long."""
        limit = time.time() - older_than_s
        removed = 0
        candidates = list((self.root / _STAGING).glob("*.part"))
        candidates += [p for p in self.root.rglob(".*.tmp") if p.is_file()]
        for path in candidates:
            try:
                if path.stat().st_mtime < limit:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed

    def keys(self) -> list[str]:
        """Every object file's key."""
        found = []
        for path in self.root.rglob("*"):
            rel = path.relative_to(self.root)
            if path.is_file() and not any(p.startswith(".") for p in rel.parts):
                found.append("/".join(rel.parts))
        return sorted(found)
