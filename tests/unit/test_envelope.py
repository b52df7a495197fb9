"""The sealed-value format, without a database: the associated data is the length-prefixed
tuple it documents (however the library builds it), a ciphertext is standard base64 (a
store written with one codec opens with the other), and a malformed ciphertext is
``DecryptionFailed`` whatever shape it has."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.encryption.envelope import NONCE_BYTES, Sealer, associated_data
from shardstore.errors import DecryptionFailed

parts = st.text(max_size=40)


def reference_associated_data(*parts: str) -> bytes:
    out = b"shardstore-ad/1"
    for part in parts:
        raw = part.encode("utf-8", "surrogatepass")
        out += len(raw).to_bytes(4, "big") + raw
    return out


@given(parts, parts, parts, parts)
def test_associated_data_is_the_length_prefixed_tuple(
    kind: str, tenant: str, origin: str, position: str
) -> None:
    assert associated_data(kind, tenant, origin, position) == reference_associated_data(
        kind, tenant, origin, position
    )


@given(st.tuples(parts, parts, parts, parts), st.tuples(parts, parts, parts, parts))
def test_two_places_never_share_associated_data(
    a: tuple[str, str, str, str], b: tuple[str, str, str, str]
) -> None:
    assert (associated_data(*a) == associated_data(*b)) == (a == b)


@pytest.fixture(scope="module")
def sealer_and_key(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    keys = LocalKeyProvider(tmp_path_factory.mktemp("keys"))
    return Sealer(keys), keys.key_for(Scope("session", "t1", str(uuid.uuid4())))


def test_a_ciphertext_is_standard_base64_of_nonce_and_body(sealer_and_key) -> None:  # type: ignore[no-untyped-def]
    sealer, key = sealer_and_key
    text = json.dumps({"role": "user", "content": "é \ud800 x" * 50})
    sealed = sealer.seal(key, "turn", "s", "7", text)
    raw = base64.b64decode(sealed["c"], validate=True)  # the standard library's codec
    ad = reference_associated_data("turn", key.scope.tenant, "s", "7")
    plain = key.aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], ad)
    assert plain.decode("utf-8", "surrogatepass") == text
    # and one encoded by the standard library opens
    again = dict(sealed, c=base64.b64encode(raw).decode("ascii"))
    assert sealer.open(again, "turn", "s", "7", "the value") == text


@pytest.mark.parametrize(
    "ciphertext",
    ["é" * 40, "QUJD====", " QUJD", "QUJD\n", "QUI", "", None, 12, ["QUJD"], {"c": 1}],
)
def test_a_malformed_ciphertext_is_decryption_failed(sealer_and_key, ciphertext) -> None:  # type: ignore[no-untyped-def]
    sealer, key = sealer_and_key
    sealed = sealer.seal(key, "turn", "s", "1", "{}")
    with pytest.raises(DecryptionFailed):
        sealer.open(dict(sealed, c=ciphertext), "turn", "s", "1", "the value")


def test_a_ciphertext_read_at_another_place_is_decryption_failed(sealer_and_key) -> None:  # type: ignore[no-untyped-def]
    sealer, key = sealer_and_key
    sealed = sealer.seal(key, "turn", "s", "1", "{}")
    for place in (("turn", "s", "2"), ("turn", "t", "1"), ("checkpoint", "s", "1")):
        with pytest.raises(DecryptionFailed):
            sealer.open(sealed, *place, "the value")
    assert sealer.open(sealed, "turn", "s", "1", "the value") == "{}"
