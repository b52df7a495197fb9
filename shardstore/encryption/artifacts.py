"""Artifact bytes under encryption: sealed one chunk at a time, bound to their tenant and
artifact id, addressed by a keyed hash.

A sealed artifact is stored as a header followed by frames:

* **frames**: the plaintext cut into chunks of :data:`CHUNK` bytes, each sealed with
  AES-256-GCM under a fresh random *content key* of this upload, with the chunk's index as
  both nonce and associated data (a content key seals one upload only, so an index never
  repeats under it). A frame moved to another index, or taken from another upload, fails.
* **header** (:data:`HEADER_BYTES`, space-padded): :data:`MAGIC`, then JSON ``{"k": key
  id, "c": ...}``: the content key, the number of frames and the plaintext size, sealed
  under the owning scope's data key with associated data ``("artifact", tenant, artifact
  id, "content-key")``. The header is written last (the artifact id is known only once
  every byte was seen), at the start of the object (object backends) or as chunk 0
  (postgres backend; frames are chunks 1..n).

So a header copied to another artifact or tenant does not open (``DecryptionFailed``
before any byte is returned), frames copied between artifacts do not open under the
other's content key, and a truncated or extended object fails the frame count. Memory is
constant: one chunk in, one frame out.

**Content address.** A plaintext sha256 in the row would tell anyone holding a backup
which artifacts (and which tenants' artifacts) hold equal bytes, and would confirm a
guessed content. Sealed artifacts are addressed instead by HMAC-SHA256 of the plaintext
under a MAC key derived from the owning scope's data key: equal bytes in one scope are
still stored once, equal bytes in two scopes are two artifacts that nothing links, and
once the scope's key is shredded the address is a random-looking string. The row's
``sha256`` column and ``ArtifactRef.sha256`` hold this keyed hash; ``size_bytes`` stays
the plaintext size.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import uuid
from typing import Any

from ..errors import ArtifactCorrupt, DecryptionFailed, EncryptionRequired, PlaintextRefused
from .envelope import NONCE_BYTES, associated_data
from .keystore import DataKey, KeyStore
from .provider import aead

MAGIC = b"\x89SSART1\n"
"""The first bytes of every sealed artifact (PNG-style: a high byte, a name, a newline)."""
HEADER_BYTES = 512
CHUNK = 1 << 20
"""Plaintext bytes per frame (the artifact store's chunk size)."""
TAG_BYTES = 16
FRAME_BYTES = CHUNK + TAG_BYTES
"""Stored bytes of every frame but the last."""
CONTENT_KEY_BYTES = 32
KIND = "artifact"
_MAC_NONCE = b"\xff" * NONCE_BYTES
_MAC_AD = b"shardstore-artifact-mac/1"
_FRAME_AD = b"shardstore-artifact-frame/1"


def mac_key(key: DataKey) -> bytes:
    """The MAC key of a scope, derived from its data key: AES-GCM's keystream at a nonce
    that random 96-bit nonces never take in practice (the key store exposes only the AEAD,
    not the key bytes). Deterministic, so equal content in one scope has one address."""
    out: bytes = key.aead.encrypt(_MAC_NONCE, b"\x00" * 32, _MAC_AD)
    return out[:32]


def _frame_nonce(index: int) -> bytes:
    return index.to_bytes(NONCE_BYTES, "big")


def _frame_ad(index: int) -> bytes:
    return _FRAME_AD + index.to_bytes(8, "big")


def _header_ad(tenant: str, artifact_id: uuid.UUID) -> bytes:
    return associated_data(KIND, tenant, str(artifact_id), "content-key")


def is_sealed_bytes(head: bytes) -> bool:
    """Whether stored bytes begin as a sealed artifact does."""
    return head[: len(MAGIC)] == MAGIC


def refuse_sealed_bytes(head: bytes, what: str) -> None:
    """For a store connected without ``encryption=``: ``EncryptionRequired`` when stored
    bytes are sealed (they are never returned as if they were the content)."""
    if is_sealed_bytes(head):
        raise EncryptionRequired(
            f"{what} is stored encrypted; connect with encryption= and the key store holding "
            "its data key (shardstore.connect(dsn, encryption=LocalKeyProvider(path))) to "
            "read it",
            cli=f"{what} is stored encrypted; the command line cannot read encrypted "
            "artifacts yet (use the Python API with connect(encryption=...))",
        )


class ArtifactSealer:
    """Seals one upload: :meth:`frame` for each chunk in order, then :meth:`address` and
    :meth:`header` once the content is complete."""

    def __init__(self, key: DataKey) -> None:
        aes_gcm, _invalid = aead()
        self.key = key
        # held only for this upload: the header wraps it under the data key
        self._content_key = secrets.token_bytes(CONTENT_KEY_BYTES)
        self._content = aes_gcm(self._content_key)
        self._mac = hmac.new(mac_key(key), digestmod=hashlib.sha256)
        self.frames = 0
        self.size = 0

    def frame(self, piece: bytes) -> bytes:
        """The next chunk, sealed."""
        index = self.frames
        self._mac.update(piece)
        self.frames += 1
        self.size += len(piece)
        sealed: bytes = self._content.encrypt(_frame_nonce(index), piece, _frame_ad(index))
        return sealed

    def address(self) -> str:
        """The content address (hex): the keyed hash of every byte framed so far."""
        return self._mac.hexdigest()

    def header(self, tenant: str, artifact_id: uuid.UUID) -> bytes:
        """The header binding this upload's content key to ``(tenant, artifact_id)``."""
        body = self._content_key + self.frames.to_bytes(8, "big") + self.size.to_bytes(8, "big")
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self.key.aead.encrypt(nonce, body, _header_ad(tenant, artifact_id))
        doc = {"k": self.key.kid, "c": base64.b64encode(nonce + sealed).decode("ascii")}
        raw = MAGIC + json.dumps(doc, separators=(",", ":")).encode("ascii")
        assert len(raw) <= HEADER_BYTES
        return raw + b" " * (HEADER_BYTES - len(raw))


class ArtifactOpener:
    """Opens one stored artifact read as ``(tenant, artifact_id)`` whose row says
    ``address`` and ``size``: :meth:`header` first, then :meth:`frame` for each frame in
    order, then :meth:`finish`."""

    def __init__(
        self, keys: KeyStore, tenant: str, artifact_id: uuid.UUID, address: str, size: int
    ) -> None:
        self.keys = keys
        self.tenant = tenant
        self.artifact_id = artifact_id
        self.address = address
        self.size = size
        self.what = f"artifact {artifact_id}"
        self._content: Any = None
        self._mac: Any = None
        self.frames = 0
        self._seen = 0
        self._seen_bytes = 0

    def header(self, head: bytes) -> None:
        """Check and open the header; ``PlaintextRefused`` for bytes that are not sealed,
        ``KeyShredded`` when the data key is gone, ``DecryptionFailed`` when the header
        belongs to another artifact or tenant."""
        if not is_sealed_bytes(head):
            raise PlaintextRefused(
                f"{self.what} is stored in plaintext, but this store reads encrypted "
                "artifacts only; it is not returned"
            )
        try:
            doc = json.loads(head[len(MAGIC) :].rstrip(b" "))
            kid = doc["k"]
            raw = base64.b64decode(doc["c"], validate=True)
        except (ValueError, TypeError, KeyError, binascii.Error):
            raise DecryptionFailed(f"{self.what}: its header is malformed") from None
        if type(kid) is not str:
            raise DecryptionFailed(f"{self.what}: its header is malformed")
        key = self.keys.key(kid)
        if key.scope.tenant != self.tenant:
            raise DecryptionFailed(
                f"{self.what} is sealed under another tenant's key; nothing of it is returned"
            )
        _aes, invalid_tag = aead()
        try:
            body = key.aead.decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], _header_ad(self.tenant, self.artifact_id)
            )
        except (invalid_tag, ValueError):
            raise DecryptionFailed(
                f"{self.what} does not authenticate where it is stored (altered, or copied "
                "from another artifact or tenant); nothing of it is returned"
            ) from None
        if len(body) != CONTENT_KEY_BYTES + 16:
            raise DecryptionFailed(f"{self.what}: its header is malformed")
        self.frames = int.from_bytes(body[CONTENT_KEY_BYTES : CONTENT_KEY_BYTES + 8], "big")
        size = int.from_bytes(body[CONTENT_KEY_BYTES + 8 :], "big")
        if size != self.size:
            raise ArtifactCorrupt(f"{self.what} does not match its size")
        aes_gcm, _invalid = aead()
        self._content = aes_gcm(body[:CONTENT_KEY_BYTES])
        self._mac = hmac.new(mac_key(key), digestmod=hashlib.sha256)

    def frame(self, sealed: bytes) -> bytes:
        """The plaintext of the next frame (``DecryptionFailed`` if it is not the one the
        header's upload sealed at this index)."""
        assert self._content is not None
        index = self._seen
        if index >= self.frames:
            raise DecryptionFailed(f"{self.what} holds more frames than it was sealed with")
        _aes, invalid_tag = aead()
        try:
            plain: bytes = self._content.decrypt(_frame_nonce(index), sealed, _frame_ad(index))
        except (invalid_tag, ValueError):
            raise DecryptionFailed(
                f"{self.what}: chunk {index} does not authenticate (altered, moved or taken "
                "from another artifact)"
            ) from None
        self._seen += 1
        self._seen_bytes += len(plain)
        self._mac.update(plain)
        return plain

    def finish(self) -> None:
        """Every frame was read and the content matches its address."""
        if self._seen != self.frames:
            raise DecryptionFailed(f"{self.what} is truncated (frames missing)")
        if self._seen_bytes != self.size or not hmac.compare_digest(
            self._mac.hexdigest(), self.address
        ):
            raise ArtifactCorrupt(f"{self.what} does not match its content address and size")
