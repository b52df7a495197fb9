"""Encryption at rest across an export and an import.

A sealed value is bound to where it was written: its tenant (the data key's), its session
(or subject, for a fact) and its position (a turn's ``turn_seq``, a checkpoint's id, a
summary's chunk and turns, a fact's id and key; :mod:`shardstore.encryption.envelope`).

* An export with ``decrypt=True`` opens each value where it is stored, exactly as the
  store's readers do (a plaintext value where a sealed one belongs is refused, as they
  refuse it), and writes the plaintext.
* An import into a store connected with ``encryption=`` stores nothing in plaintext: a
  plaintext value is sealed for its new place, and a sealed one is first opened for the
  place it was written for (its ids in the file, under this store's key store, in the
  tenant of its record) and then sealed for its new place, so that a remapped import and
  an import into a database read with another key store both work. A sealed value whose
  data key this key store lacks (another key store, or shredded) is a ``KeyShredded``
  naming the line; one sealed for another tenant or place a ``DecryptionFailed``.
* An import into a store connected without ``encryption=`` refuses a sealed value with
  ``EncryptionRequired``: nothing sealed is stored where no reader could open it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core import jsoncodec
from ..encryption.envelope import MARK, Sealer, is_sealed
from ..encryption.keystore import DataKey, Scope
from ..encryption.places import (
    FACT_KIND,
    SUMMARY_KIND,
    checkpoint_kind,
    fact_position,
    summary_position,
)
from ..encryption.turns import TURN, recorded_epoch, session_scope, turn_position
from ..errors import DecryptionFailed, EncryptionRequired, KeyShredded

CHECKPOINT_PARTS = ("state", "tool_calls", "tool_results")


def parsed(value: Any) -> Any:
    """A stored value as a sealed value when it is one (a column holds a sealed value as
    its JSON text), else as it is."""
    if isinstance(value, str) and value.startswith("{") and MARK in value:
        try:
            loaded = jsoncodec.loads(value)
        except ValueError:
            return value
        return loaded if is_sealed(loaded) else value
    return value


def holds_sealed(doc: Mapping[str, Any]) -> bool:
    """Whether a line of the file holds a sealed value in one of its fields."""
    return any(is_sealed(parsed(value)) for value in doc.values())


def refuse_sealed_line(doc: Mapping[str, Any], at: str) -> None:
    """For an import into a store connected without ``encryption=``: ``EncryptionRequired``
    when the line holds a sealed value."""
    if holds_sealed(doc):
        raise EncryptionRequired(
            f"{at}: holds an encrypted value; import the file into a store connected with "
            "encryption= and the key store holding its data keys "
            "(shardstore.connect(dsn, encryption=LocalKeyProvider(path)))",
            cli=f"{at}: holds an encrypted value; give the key store holding its data keys "
            "(--key-store PATH or $SHARDSTORE_KEY_STORE)",
        )


def refuse_sealed_export(header: Mapping[str, Any], at: str) -> None:
    """For an import into a store connected without ``encryption=``: ``EncryptionRequired``
    at an export line that says its values are sealed, before anything is written."""
    if header.get("sealed") is True:
        raise EncryptionRequired(
            f"{at}: the export holds encrypted values (it was written by a store connected "
            "with encryption=, without decrypt=True); import it into a store connected with "
            "encryption= and the key store holding its data keys",
            cli=f"{at}: the export holds encrypted values; give the key store holding their "
            "data keys (--key-store PATH or $SHARDSTORE_KEY_STORE), or export with --decrypt",
        )


# ---------------------------------------------------------------- export


def open_checkpoint(sealer: Sealer, sid: uuid.UUID, row: Mapping[str, Any]) -> dict[str, Any]:
    """An export_checkpoints row with its sealed columns opened (JSON text, as stored)."""
    out = dict(row)
    cid = str(row["checkpoint_id"])
    for part in CHECKPOINT_PARTS:
        if row[part] is not None:
            where = f"the {part} of checkpoint {cid} of session {sid}"
            out[part] = sealer.open(parsed(row[part]), checkpoint_kind(part), str(sid), cid, where)
    return out


def open_summary_row(sealer: Sealer, sid: uuid.UUID, row: Mapping[str, Any]) -> dict[str, Any]:
    """An export_summaries row with its summary opened."""
    where = f"the summary of chunk {row['chunk_seq']} of session {sid}"
    position = summary_position(row["chunk_seq"], row["first_turn_seq"], row["last_turn_seq"])
    return {
        **row,
        "summary": sealer.open(parsed(row["summary"]), SUMMARY_KIND, str(sid), position, where),
    }


def open_fact_row(sealer: Sealer, row: Mapping[str, Any]) -> dict[str, Any]:
    """An export_facts row with its value opened (JSON text, as stored)."""
    where = f"the value of fact {row['key']!r} of subject {row['subject']!r} ({row['fact_id']})"
    position = fact_position(row["fact_id"], str(row["key"]))
    value = sealer.open(parsed(row["value"]), FACT_KIND, str(row["subject"]), position, where)
    return {**row, "value": value}


def shown_fact_rows(
    sealer: Sealer | None, rows: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Fact rows as the access report shows them: opened when the store has the key store;
    otherwise a sealed value stays sealed and the report says so."""
    if sealer is None:
        return list(rows)
    return [open_fact_row(sealer, row) if holds_sealed(row) else row for row in rows]


# ---------------------------------------------------------------- import


class Resealer:
    """Opens the sealed values of a file's records under the ids they were written for and
    seals values for the ids they are imported under, with one store's key store."""

    def __init__(self, sealer: Sealer) -> None:
        self.sealer = sealer

    def open(
        self, value: Any, tenant: str, kind: str, origin: str, position: str, what: str
    ) -> str:
        """The plaintext of a sealed ``value`` of a record of ``tenant``, written for
        ``(kind, origin, position)``."""
        kid = value.get("k")
        try:
            key = self.sealer.keys.key(kid)
        except KeyShredded:
            raise KeyShredded(
                f"{what} is sealed with data key {str(kid)[:60]}, which this key store does "
                "not hold (another key store, or shredded): it cannot be re-sealed"
            ) from None
        except DecryptionFailed as exc:
            raise DecryptionFailed(f"{what}: {exc}") from None
        if key.scope.tenant != tenant:
            raise DecryptionFailed(
                f"{what} is sealed with another tenant's data key; nothing of it is imported"
            )
        return self.sealer.open(value, kind, origin, position, what)

    def plaintext(
        self,
        value: Any,
        text: str,
        tenant: str,
        kind: str,
        origin: str,
        position: str,
        what: str,
    ) -> str:
        """``text`` (a value of the file encoded for storage) as plaintext: opened when
        ``value`` is sealed, else as it is."""
        value = parsed(value)
        if is_sealed(value):
            return self.open(value, tenant, kind, origin, position, what)
        return text

    def fact_text(
        self,
        value: Any,
        text: str,
        tenant: str,
        subject: str,
        key: str,
        old_id: uuid.UUID,
        new_id: uuid.UUID,
        what: str,
    ) -> str:
        """A fact's value, sealed for its id here under its subject's data key."""
        plain = self.plaintext(
            value, text, tenant, FACT_KIND, subject, fact_position(old_id, key), what
        )
        data_key = self.sealer.keys.key_for(Scope("subject", tenant, subject))
        assert data_key is not None
        return self.sealer.seal_text(
            data_key, FACT_KIND, subject, fact_position(new_id, key), plain
        )


class SessionResealer:
    """One imported session's values: opened for the session id in the file (``old_sid``),
    sealed for the one here (``sid``) under the data key of the session here.
    ``inherits(seq)``: whether turn ``seq`` may have been sealed by another session of the
    file session's lineage (inherited from a fork parent, or copied into it)."""

    def __init__(
        self,
        resealer: Resealer,
        tenant: str,
        subject: str | None,
        old_sid: uuid.UUID,
        sid: uuid.UUID,
        inherits: Callable[[int], bool],
    ) -> None:
        self.resealer = resealer
        self.sealer = resealer.sealer
        self.tenant = tenant
        self.subject = subject
        self.old_sid = old_sid
        self.sid = sid
        self.inherits = inherits
        self._key: DataKey | None = None

    @property
    def key(self) -> DataKey:
        """The session's data key here (created on first use, as an append creates it)."""
        if self._key is None:
            key = self.sealer.keys.key_for(session_scope(self.tenant, self.subject, self.sid))
            assert key is not None
            self._key = key
        return self._key

    def turn_message(self, message: Any, seq: int, at: str) -> Any:
        """A turn line's message as plaintext (opened when sealed)."""
        if not is_sealed(message):
            return message
        origin = message.get("o", str(self.old_sid))
        if type(origin) is not str or (origin != str(self.old_sid) and not self.inherits(seq)):
            raise DecryptionFailed(
                f"{at}: turn {seq} was sealed for another session than the one the file "
                "puts it in; nothing of it is imported"
            )
        # the turn opens for the rewind epoch it records: the file holds no session's epochs
        # to check it against, but the ciphertext authenticates only for that session,
        # position and epoch (a turn of that session at that place, if not the newest)
        where = f"{at}: turn {seq}"
        position = turn_position(seq, recorded_epoch(message, where))
        text = self.resealer.open(message, self.tenant, TURN, origin, position, where)
        return jsoncodec.loads(text)

    def turn_sealer(self, seq: int) -> Callable[[str], str]:
        """What seals turn ``seq``'s encoded message for its place here."""

        def seal(text: str) -> str:
            return self.sealer.seal_text(
                self.key, TURN, str(self.sid), str(seq), text, with_origin=True
            )

        return seal

    def checkpoint_part(
        self,
        part: str,
        value: Any,
        text: str | None,
        old_id: uuid.UUID,
        new_id: uuid.UUID,
        at: str,
        rewrite: Callable[[str], str | None] | None = None,
    ) -> str | None:
        """A checkpoint column (``state``, ``tool_calls``, ``tool_results``), sealed here
        (its plaintext passed through ``rewrite`` first: artifact references named here)."""
        if text is None:
            return None
        kind = checkpoint_kind(part)
        plain = self.resealer.plaintext(
            value, text, self.tenant, kind, str(self.old_sid), str(old_id), f"{at}: {part}"
        )
        if rewrite is not None:
            plain = rewrite(plain) or plain
        return self.sealer.seal_text(self.key, kind, str(self.sid), str(new_id), plain)

    def summary_text(
        self, text: str, old_chunk: int, chunk: int, first: int, last: int, at: str
    ) -> str:
        """A summary, opened for its chunk in the file and sealed for its chunk here."""
        plain = self.resealer.plaintext(
            text,
            text,
            self.tenant,
            SUMMARY_KIND,
            str(self.old_sid),
            summary_position(old_chunk, first, last),
            f"{at}: the summary",
        )
        position = summary_position(chunk, first, last)
        return self.sealer.seal_text(self.key, SUMMARY_KIND, str(self.sid), position, plain)
