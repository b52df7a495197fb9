"""Sealed values: AES-256-GCM under a data key, with associated data naming where the value
belongs, stored as a small JSON object in place of the plaintext.

A sealed value is ``{"ss_enc": 1, "k": key id, "c": base64(nonce || ciphertext+tag)}``, plus
``"o"`` (the session that wrote it) for a turn, which a fork reads from its ancestors, and
``"e"`` (the rewind epoch it was written in, when not 0) for a turn. No
message, checkpoint state or fact value can look like one: a message needs ``role`` or
``type``, and the others are read only where a sealed value is expected.

The associated data is ``(kind, tenant, origin, position)``, length-prefixed: the tenant of
the data key's scope, the session (or tenant) the value was written for and its position in
it (a turn's ``turn_seq``, a checkpoint's id, a fact's id and version). A ciphertext copied
to another row, position, session or tenant therefore fails to authenticate, and reading it
raises :class:`~shardstore.errors.DecryptionFailed`.
"""

from __future__ import annotations

import binascii
import json
import secrets
from collections.abc import Callable
from functools import lru_cache
from typing import Any, ParamSpec

try:
    # a turn's ciphertext is decoded on every read of it: the SIMD codec takes ~0.5 us for
    # a 2 kB ciphertext where the standard library's takes ~5 us, most of opening a turn
    from pybase64 import b64decode, b64encode
except ImportError:  # pragma: no cover - the encryption extra installs it
    from base64 import b64decode, b64encode  # type: ignore[assignment]

import msgspec

from ..errors import DecryptionFailed, EncryptionRequired, PlaintextRefused
from .keystore import DataKey, KeyStore
from .provider import aead

MARK = "ss_enc"
VERSION = 1
NONCE_BYTES = 12
# a sealed value's JSON (str and int fields only): msgspec writes it several times faster
# than json, once per sealed turn appended
_json_text = msgspec.json.Encoder().encode


def associated_data(kind: str, tenant: str, origin: str, position: str) -> bytes:
    """The bytes a ciphertext is bound to; each part length-prefixed, so no two tuples meet."""
    return _place_prefix(kind, tenant, origin) + _length_prefixed(position)


def _length_prefixed(part: str) -> bytes:
    raw = part.encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(4, "big") + raw


@lru_cache(maxsize=4096)
def _place_prefix(kind: str, tenant: str, origin: str) -> bytes:
    # the same for every turn a read opens: built once, not once per turn
    return b"shardstore-ad/1" + b"".join(_length_prefixed(p) for p in (kind, tenant, origin))


# the fields a sealed value may have: the mark, the key id, the ciphertext, the writing
# session of a turn ("o") and the rewind epoch a turn was sealed in ("e")
_SEALED_FIELDS = frozenset({MARK, "k", "c", "o", "e"})


def is_sealed(value: Any) -> bool:
    """Whether ``value`` has the shape of a sealed value (not whether it is genuine): the
    mark, a key id, a ciphertext and no field a sealed value does not have (so that a
    caller's message that happens to carry an ``ss_enc`` field is not taken for one)."""
    return (
        type(value) is dict
        and value.get(MARK) == VERSION
        and "k" in value
        and "c" in value
        and _SEALED_FIELDS.issuperset(value)
    )


def refuse_sealed(value: Any, what: str) -> None:
    """For a store connected without ``encryption=``: :class:`EncryptionRequired` when
    ``value`` is sealed, so that a sealed value is never returned as if it were the data."""
    if is_sealed(value):
        raise EncryptionRequired(
            f"{what} is stored encrypted; connect with encryption= and the key store holding "
            "its data key (shardstore.connect(dsn, encryption=LocalKeyProvider(path))) to "
            "read it",
            cli=f"{what} is stored encrypted; the command line cannot read encrypted values "
            "yet (use the Python API with connect(encryption=...))",
        )


P = ParamSpec("P")


def envelope_text(sealed: dict[str, Any]) -> str:
    """A sealed value as the JSON text to store."""
    try:
        return _json_text(sealed).decode("utf-8")
    except UnicodeEncodeError:  # an origin with a lone surrogate: json escapes it
        return json.dumps(sealed, separators=(",", ":"))


def _as_text(seal: Callable[P, dict[str, Any]]) -> Callable[P, str]:
    def seal_text(*args: P.args, **kwargs: P.kwargs) -> str:
        return envelope_text(seal(*args, **kwargs))

    seal_text.__doc__ = ":meth:`seal` as the JSON text to store (:func:`envelope_text`)."
    return seal_text


class Sealer:
    """Seals and opens values with the data keys of a :class:`KeyStore`."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        # the head each session had after this store's last append to it, by session id:
        # (tenant, subject, next turn_seq, rewind epoch); see encryption/turns.py
        self.heads: dict[Any, tuple[str, str | None, int, int]] = {}

    def seal(
        self,
        key: DataKey,
        kind: str,
        origin: str,
        position: str,
        plaintext: str,
        *,
        with_origin: bool = False,
        epoch: int = 0,
    ) -> dict[str, Any]:
        """``plaintext`` sealed under ``key``, bound to ``(kind, key's tenant, origin,
        position)``; ``epoch`` (a turn's rewind epoch, already part of ``position``) is
        recorded in clear as ``"e"`` when not 0, so that turns sealed before epochs existed
        keep their shape."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        ad = associated_data(kind, key.scope.tenant, origin, position)
        body = key.aead.encrypt(nonce, plaintext.encode("utf-8", "surrogatepass"), ad)
        sealed: dict[str, Any] = {MARK: VERSION, "k": key.kid}
        if with_origin:
            sealed["o"] = origin
        if epoch:
            sealed["e"] = epoch
        sealed["c"] = b64encode(nonce + body).decode("ascii")
        return sealed

    seal_text = _as_text(seal)

    def open(
        self,
        value: Any,
        kind: str,
        origin: str,
        position: str,
        what: str,
        *,
        memo: dict[str, DataKey] | None = None,
    ) -> str:
        """The plaintext of a sealed ``value`` read where ``(kind, origin, position)`` says;
        :class:`PlaintextRefused` for a value that is not sealed, :class:`KeyShredded` when
        its key is gone, :class:`DecryptionFailed` when it does not belong here. ``memo``:
        the keys already looked up by the same read (a key store lookup checks the key's
        file; once per read is enough to see a shred by then)."""
        if not is_sealed(value):
            raise PlaintextRefused(
                f"{what} is stored in plaintext, but this store reads encrypted values only; "
                "it is not returned"
            )
        kid = value.get("k")
        key = memo.get(kid) if memo is not None and type(kid) is str else None
        if key is None:
            key = self.keys.key(kid)
            if memo is not None:
                memo[kid] = key
        try:
            raw = b64decode(value.get("c"), validate=True)
        except (TypeError, ValueError, binascii.Error):
            raise DecryptionFailed(f"{what}: the ciphertext is malformed") from None
        ad = associated_data(kind, key.scope.tenant, origin, position)
        try:
            plain: bytes = key.aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], ad)
        except Exception as exc:
            _aes_gcm, invalid_tag = aead()  # looked up on failure only: ~3 us a call
            if not isinstance(exc, invalid_tag | ValueError):
                raise
            raise DecryptionFailed(
                f"{what} does not authenticate where it is stored (altered, or copied from "
                "another row, position, session or tenant); nothing of it is returned"
            ) from None
        return plain.decode("utf-8", "surrogatepass")
