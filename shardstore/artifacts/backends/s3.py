"""Artifacts in an S3-compatible object store (the ``s3`` extra: boto3): objects at
``{prefix}{tenant}/sha256/ab/cd/{hash}`` in one bucket. Endpoint, region and credentials come
from boto3's usual sources (``AWS_ENDPOINT_URL`` for a server other than AWS, such as
SeaweedFS or MinIO).

Bytes are staged in a local spooled temporary file while they are hashed (memory up to 8 MiB,
then disk), then sent in one PUT with ``Content-MD5`` (the server refuses a body that does not
match) and the sha256 and MD5 as object metadata. Verification is a HEAD: the size, the
recorded sha256, and the server's ETag (the MD5 it computed of what it stored) equal to the
MD5 sent."""

from __future__ import annotations

import base64
import hashlib
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlparse

from ...errors import ConfigurationError, MissingDependency

_SPOOL = 8 << 20


@dataclass
class S3Staging:
    """A spooled temporary file and the MD5 of what was written to it."""

    file: Any = field(default_factory=lambda: tempfile.SpooledTemporaryFile(_SPOOL))  # noqa: SIM115
    md5: Any = field(default_factory=lambda: hashlib.md5(usedforsecurity=False))
    sha: Any = field(default_factory=hashlib.sha256)
    size: int = 0

    def write(self, data: bytes) -> None:
        """Append bytes."""
        self.file.write(data)
        self.md5.update(data)
        self.sha.update(data)
        self.size += len(data)

    def write_head(self, data: bytes) -> None:
        """Overwrite the first bytes (an encrypted artifact's header, known last), then
        hash the file again: the digests sent with the PUT must be of what is sent."""
        self.file.seek(0)
        self.file.write(data)
        self.file.seek(0)
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.sha = hashlib.sha256()
        while piece := self.file.read(1 << 20):
            self.md5.update(piece)
            self.sha.update(piece)
        self.file.seek(0, 2)

    def digest(self) -> tuple[str, int]:
        """The sha256 (hex) and size of the staged bytes."""
        return self.sha.hexdigest(), self.size

    def seal(self) -> None:
        """Nothing to flush: the file is local and temporary."""


class _Body:
    """A GET body with ``read(n)`` and ``close()``."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._body.read(None if n < 0 else n)
        return data

    def close(self) -> None:
        self._body.close()

    def __enter__(self) -> _Body:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class S3Backend:
    """Objects in ``bucket`` under ``prefix``."""

    bucket: str
    prefix: str
    client: Any = field(repr=False, compare=False)
    name: str = "s3"

    @classmethod
    def from_url(cls, url: str) -> S3Backend:
        """``s3://bucket/prefix`` (the prefix may be empty)."""
        try:
            import boto3
        except ImportError:
            raise MissingDependency(
                "artifacts='s3://...' needs boto3: pip install 'shardstore[s3]'",
                cli="--store s3://... needs boto3: pip install 'shardstore[s3]'",
            ) from None
        parsed = urlparse(url)
        if not parsed.netloc:
            write = "write s3://bucket/prefix"
            raise ConfigurationError(
                f"artifacts={url!r:.80}: {write}", cli=f"--store {url!r:.80}: {write}"
            )
        prefix = parsed.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return cls(parsed.netloc, prefix, boto3.client("s3"))

    def _key(self, key: str) -> str:
        return self.prefix + key

    def uri(self, key: str) -> str:
        """``s3://bucket/prefix/key``."""
        return f"s3://{self.bucket}/{self._key(key)}"

    def stage(self) -> S3Staging:
        """A spooled temporary file."""
        return S3Staging()

    def place(self, staging: S3Staging, key: str) -> None:
        """One PUT of the staged bytes, with Content-MD5 and the digests as metadata."""
        staging.file.seek(0)
        md5 = staging.md5.digest()
        self.client.put_object(
            Bucket=self.bucket,
            Key=self._key(key),
            Body=staging.file,
            ContentLength=staging.size,
            ContentMD5=base64.b64encode(md5).decode(),
            Metadata={"sha256": staging.sha.hexdigest(), "md5": md5.hex()},
        )

    def _head(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            head: dict[str, Any] = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return head

    def verify(self, key: str, sha256: str, size: int) -> bool:
        """HEAD: size, recorded sha256, and the server's ETag equal to the MD5 sent."""
        head = self._head(key)
        if head is None:
            return False
        meta = head.get("Metadata") or {}
        etag = str(head.get("ETag", "")).strip('"')
        return (
            int(head.get("ContentLength", -1)) == size
            and meta.get("sha256") == sha256
            and etag == meta.get("md5")
        )

    def open(self, key: str) -> IO[bytes]:
        """A GET body; ``FileNotFoundError`` if there is no object."""
        from botocore.exceptions import ClientError

        try:
            found = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(self.uri(key)) from None
            raise
        return _Body(found["Body"])  # type: ignore[return-value]

    def delete(self, key: str) -> bool:
        """DELETE (True if a HEAD found the object first)."""
        existed = self._head(key) is not None
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        return existed

    def discard(self, staging: S3Staging) -> None:
        """Close (and so remove) the spooled file."""
        staging.file.close()

    def sweep_staging(self, older_than_s: float) -> int:
        """Nothing: staging is a local temporary file that goes with its process."""
        return 0

    def keys(self) -> list[str]:
        """Every object key under the prefix."""
        found = []
        pages = self.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix):
            found += [o["Key"][len(self.prefix) :] for o in page.get("Contents", [])]
        return sorted(found)
