"""Facts: durable memory about a subject (``user:8814``, ``account:ACME``) with provenance.

A fact is a key of a subject with a JSON value, an optional confidence and the turn it came
from. Facts are versioned, never overwritten: remembering a new value closes the version
valid until then (its ``valid_to`` becomes the new version's ``valid_from``), and
:func:`forget` closes the current version without a successor. So "what did the agent
believe on 3 March?" (:func:`recall` with ``as_of``) and "why does it think that?"
(:func:`fact_history`, each version's ``source_session_id`` / ``source_turn_seq``) have
answers.

Rules (the database enforces them too: ``fact_remember_v1`` / ``fact_forget_v1``, the
unique index ``facts_current`` and the session-table registry; docs/facts.md,
"How it works"):

* per (tenant, subject, key) at most one version is valid at any instant; writers of one
  key serialise, and a second open version is refused by a unique index;
* a source names an existing turn of a live session of the same tenant, checked under a
  lock on the session row, so a purge either removes the fact or the fact is refused;
* every purge that removes a turn removes the facts that came from it (the table is in the
  session-table registry); ``purge_subject`` removes all of the subject's facts.

Each public function below whose first parameter is ``store`` is a store method, bound into
:class:`shardstore.Store` and :class:`shardstore.AsyncStore` alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core import jsoncodec, validate
from ..core.rows import record
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q, Tx
from ..encryption import turns as enc_turns
from ..encryption.envelope import Sealer, is_sealed, refuse_sealed
from ..encryption.keystore import DataKey
from ..encryption.places import FACT_KIND, fact_position
from ..errors import InvalidInput, SessionNotFound, SessionPurged

MAX_VALUE_BYTES = 1 << 20
"""The largest value a fact may hold, as JSON text (facts are small; store documents as
turns or artifacts and point at them)."""


@dataclass(frozen=True, slots=True)
class Fact:
    """One version of a fact. ``value`` is the JSON value exactly as it was remembered;
    ``valid_to`` is None while the version is valid; ``source_session_id`` and
    ``source_turn_seq`` name the turn it came from (both None for a fact without a source);
    ``recorded_at`` is when it was written (``valid_from`` may be earlier or later)."""

    fact_id: uuid.UUID
    tenant_id: str
    subject: str
    key: str
    value: Any
    confidence: float | None
    source_session_id: uuid.UUID | None
    source_turn_seq: int | None
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime


def _named(name: str, params: Any, fetch: Any = "all") -> Q:
    return Q(query(name), params, fetch=fetch, named=True)


def _fact(row: Mapping[str, Any], sealer: Sealer | None = None, **values: Any) -> Fact:
    value = jsoncodec.loads(row["value"])
    if sealer is not None or is_sealed(value):
        subject = values.get("subject", row.get("subject"))
        key = values.get("key", row.get("key"))
        where = f"the value of fact {key!r} of subject {subject!r} ({row['fact_id']})"
        if sealer is None:
            refuse_sealed(value, where)  # raises: the value is sealed
        assert sealer is not None
        text = sealer.open(
            value, FACT_KIND, str(subject), fact_position(row["fact_id"], str(key)), where
        )
        value = jsoncodec.loads(text)
    return record(Fact, row, value=value, **values)


def _sealed_value(
    sealer: Sealer, data_key: DataKey, subject: str, key: str, fact_id: uuid.UUID, text: str
) -> str:
    """A fact's encoded value sealed under its subject's key, for that fact id and key."""
    return sealer.seal_text(data_key, FACT_KIND, subject, fact_position(fact_id, key), text)


def _ids(tenant_id: Any, subject: Any) -> tuple[str, str]:
    return validate.text(tenant_id, "tenant_id"), validate.text(subject, "subject")


def _key(key: Any) -> str:
    return validate.text(key, "key", limit=validate.MAX_KEY_CHARS)


def _value(value: Any) -> str:
    text = jsoncodec.encode_json(value, "value")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
        raise InvalidInput(f"value is larger than {MAX_VALUE_BYTES} bytes as JSON")
    return text


def _refused(status: str, detail: str | None, source: tuple[uuid.UUID, int] | None) -> Exception:
    sid, seq = source if source is not None else (None, None)
    if status == "no_session":
        return SessionNotFound(f"source session {sid} does not exist in this tenant")
    if status == "purged":
        return SessionPurged(f"source session {sid} was purged")
    if status == "no_turn":
        return InvalidInput(
            f"source turn {seq} is past the end of session {sid} (it has {detail} turns)"
        )
    if status == "turn_purged":
        first = "none is left" if detail is None else f"the oldest left is {detail}"
        return InvalidInput(f"source turn {seq} of session {sid} was purged ({first})")
    if status == "too_early":
        return InvalidInput(
            f"valid_from must be after the newest version's start or end ({detail}): "
            "a fact's versions follow each other in time"
        )
    return InvalidInput(f"the fact was refused ({status})")


def remember(
    store: StoreState,
    tenant_id: str,
    subject: str,
    key: str,
    value: Any,
    *,
    source: tuple[uuid.UUID | str, int] | None,
    confidence: float | None = None,
    valid_from: datetime | None = None,
) -> Op[Fact]:
    """Record ``value`` (any JSON value) as the fact ``key`` of ``subject`` and return the
    new version. The version valid until now is closed at the new ``valid_from``.

    ``source`` is the turn the fact came from, ``(session_id, turn_seq)``: an existing turn
    of a live session of the same tenant (``SessionNotFound``, ``SessionPurged`` or
    ``InvalidInput`` otherwise); pass ``source=None`` for a fact with no turn behind it.
    ``confidence``: None or a number from 0 to 1. ``valid_from``: a timezone-aware
    datetime, default the server's clock now; it must come after the newest version's start
    (and end, if that version was closed). A fact with a source is removed by any purge
    that removes its turn. A turn a fork inherits (:meth:`fork`) is recorded at the session
    that stores it, its ancestor (``fact.source_session_id``), so a purge that erases that
    turn removes the fact too. Bad input raises ``InvalidInput`` and writes nothing."""
    tenant, subj = _ids(tenant_id, subject)
    name = _key(key)
    text = _value(value)
    ref = None if source is None else validate.turn_ref(source, "source")
    conf = validate.optional_fraction(confidence, "confidence")
    start = validate.optional_instant(valid_from, "valid_from")
    sid, seq = ref if ref is not None else (None, None)
    fact_id = uuid.uuid4()
    sealer = store.ctx.sealer
    yield Tx.BEGIN
    if sealer is not None:
        # the key is read under the subject's fact lock (shared), held to the commit, so
        # that a data-key rotation never shreds the version this value is sealed under
        data_key = yield from enc_turns.locked_subject_key_op(sealer, tenant, subj)
        text = _sealed_value(sealer, data_key, subj, name, fact_id, text)
    if sid is not None:
        (sid,) = yield Q(query("fact_source_owner"), {"sid": sid, "seq": seq}, fetch="one")
    row = yield _named(
        "fact_remember", (fact_id, tenant, subj, name, text, conf, sid, seq, start), fetch="one"
    )
    yield Tx.COMMIT
    if row["status"] != "ok":
        raise _refused(row["status"], row["detail"], ref)
    return _fact(
        row,
        sealer,
        tenant_id=tenant,
        subject=subj,
        key=name,
        confidence=conf,
        source_session_id=sid,
        source_turn_seq=seq,
    )


def recall(
    store: StoreState,
    tenant_id: str,
    subject: str,
    keys: Sequence[str] | None = None,
    *,
    as_of: datetime | None = None,
) -> Op[list[Fact]]:
    """The facts of ``subject`` valid at ``as_of`` (a timezone-aware datetime, default
    the server's clock now), one per key, ordered by key; only ``keys`` when given (a list
    of keys; unknown ones are left out)."""
    tenant, subj = _ids(tenant_id, subject)
    names = None if keys is None else validate.texts(keys, "keys", limit=validate.MAX_KEY_CHARS)
    at = validate.optional_instant(as_of, "as_of")
    rows = yield _named("fact_recall", (at, tenant, subj, names, names))
    return [_fact(r, store.ctx.sealer) for r in rows]


def forget(store: StoreState, tenant_id: str, subject: str, key: str) -> Op[Fact | None]:
    """Close the version of ``key`` valid now (its ``valid_to`` becomes now) and return it;
    None when no version is valid. Soft: :func:`fact_history` still shows it, and
    :func:`recall` as of an earlier time still finds it. (A version remembered with a
    ``valid_from`` in the future stays.)"""
    tenant, subj = _ids(tenant_id, subject)
    name = _key(key)
    row = yield _named("fact_forget", (tenant, subj, name), fetch="one")
    if row is None:
        return None
    return _fact(row, store.ctx.sealer, tenant_id=tenant, subject=subj, key=name)


def fact_history(store: StoreState, tenant_id: str, subject: str, key: str) -> Op[list[Fact]]:
    """Every version of ``key`` of ``subject``, oldest first (closed ones included)."""
    tenant, subj = _ids(tenant_id, subject)
    name = _key(key)
    rows = yield _named("fact_history", (tenant, subj, name))
    return [_fact(r, store.ctx.sealer, subject=subj, key=name) for r in rows]
