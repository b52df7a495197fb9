"""Keyed lexeme hashes: what full-text search stores and asks for where turns are sealed.

A sealed turn's text windows hold, instead of ``hashtext`` of each lexeme, a 32-bit HMAC of
the lexeme under a *search key* derived from the data key of the scope whose rows hold the
turn (its subject, or the session without one). The key never leaves the client: the client
hashes the lexemes of what it indexes and of every query, so the server stores and compares
opaque integers only, and two scopes give one word two unrelated hashes. When the data key
is shredded the search key is gone with it, and the hashes in every backup are unlinkable to
any word (docs/decisions/0025-encrypted-search.md).

Derivation: the data key is held only as its AEAD object (``DataKey.aead``), so the search
key is ``HMAC-SHA256(AES-GCM keystream of the data key at a fixed nonce, purpose label)``:
a pseudorandom function of the data key, labelled for this purpose only. The fixed nonce is
one no seal draws in practice (seals draw 96-bit random nonces, a collision has probability
2^-96 per seal) and it only ever encrypts zeros.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Iterable, Sequence

from .keystore import DataKey

#: the nonce of the derivation (12 bytes; see the module's docstring)
_DERIVE_NONCE = b"ss-lexkey/1\x00"
_DERIVE_AD = b"shardstore search key derivation/1"
_PURPOSE = b"shardstore keyed lexeme hashes/1"

_lock = threading.Lock()
# kid -> the keyed HMAC, ready to copy; dropped with the key file (callers always resolve
# the DataKey through the key store first, which raises KeyShredded once it is gone)
_hashers: dict[str, hmac.HMAC] = {}
_MAX_CACHED = 4096


def _hasher(key: DataKey) -> hmac.HMAC:
    found = _hashers.get(key.kid)
    if found is not None:
        return found
    stream = key.aead.encrypt(_DERIVE_NONCE, bytes(32), _DERIVE_AD)[:32]
    search_key = hmac.new(stream, _PURPOSE, hashlib.sha256).digest()
    made = hmac.new(search_key, digestmod=hashlib.sha256)
    with _lock:
        if len(_hashers) >= _MAX_CACHED:
            _hashers.clear()
        _hashers[key.kid] = made
    return made


def forget(kid: str) -> None:
    """Drop the cached search key of ``kid`` (after a shred in this process)."""
    with _lock:
        _hashers.pop(kid, None)


def lexeme_hash(key: DataKey, word: str) -> int:
    """The keyed hash of one lexeme under ``key``'s search key: a signed 32-bit integer, as
    ``turn_text.tsv`` holds them."""
    mac = _hasher(key).copy()
    mac.update(word.encode("utf-8", "surrogatepass"))
    return int.from_bytes(mac.digest()[:4], "big", signed=True)


def window_hashes(key: DataKey, words: Iterable[str]) -> list[int]:
    """A window's lexemes as its ``tsv``: the sorted distinct keyed hashes (two lexemes with
    one hash count as one, as with ``hashtext``)."""
    base = _hasher(key)
    out: set[int] = set()
    for word in words:
        mac = base.copy()
        mac.update(word.encode("utf-8", "surrogatepass"))
        out.add(int.from_bytes(mac.digest()[:4], "big", signed=True))
    return sorted(out)


def query_hashes(keys: Sequence[DataKey], words: Sequence[str]) -> list[int]:
    """The query's lexemes hashed under every key searched, key-major: key ``k``'s hashes
    are ``[k * len(words), (k + 1) * len(words))``, in ``words``' order
    (text_rank_keyed_v1's layout)."""
    raw = [word.encode("utf-8", "surrogatepass") for word in words]
    out: list[int] = []
    for key in keys:
        base = _hasher(key)
        for word in raw:
            mac = base.copy()
            mac.update(word)
            out.append(int.from_bytes(mac.digest()[:4], "big", signed=True))
    return out
