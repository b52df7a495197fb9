"""Data-key rotation: a new version of one subject's (or one subject-less session's) data
key, every value sealed under an older version re-sealed under it, then the older versions
shredded. The key-encryption key is rotated by :meth:`KeyStore.rewrap` instead (no row
changes).

How it stays correct while the store is in use:

* **New writes use the new key at once.** :meth:`KeyStore.rotate` renames the new version in
  as the scope's current key before any row is touched; every writer reads the current key
  file at each write.
* **No concurrent write is lost.** Values are re-sealed in batches of ``batch_size``, each
  batch one statement (one transaction; a chunk batch one transaction of a statement per
  chunk), each a compare-and-set: a value is replaced only where it still equals what was
  read, and a chunk's turns are swapped one by one inside the chunk as it is at the update, so
  a fold that added turns meanwhile keeps them. What could not be swapped (moved by a fold,
  deleted by a rewind) is found again by the next pass.
* **Nothing is shredded while a row still names an older version.** Passes repeat until one
  finds nothing; then, in one transaction, the subject's fact lock is taken exclusively and
  the scope's session rows are locked ``FOR UPDATE``, and every finder runs once more. Only
  when that finds nothing are the older versions shredded.
* **No writer in flight slips past the final check.** Every sealed writer reads the data key
  under a lock that check conflicts with, held to its commit (an append's locked head, the
  session row ``FOR KEY SHARE``, a fact's subject lock shared), so it commits before the
  check (which finds its value) or reads the new version; the one-statement append, which
  seals before its statement, is refused by it when the turn before it no longer names its
  key, and seals again under the new version (docs/decisions/0024-key-rotation.md). The
  subject's lock is taken on the node holding the tenant's facts (on Citus the statement is
  routed there), so a fact writer connected straight to a worker is held too.
* **Artifact bytes are not re-keyed**: their versions are kept while an artifact linked to
  one of the scope's sessions is stored, asked under the final check's locks. An upload
  reads its key unlocked; the transaction linking its bytes to their session locks the
  session row and reads the key again (``artifacts.ops.check_sealing_op``), so it committed
  before the check (which keeps the version) or links nothing sealed under a retired one.
* **Resumable.** A crash leaves every value sealed under one of the scope's versions, each
  still in the key store. Calling again rotates once more and re-seals every value naming any
  retired version, so the job finishes.
* **Associated data is kept.** A value is opened and sealed again for the same kind, origin
  and position; only the key (``"k"``) and the ciphertext change, and the clear fields of a
  turn's envelope (``"o"``, ``"e"``) are copied.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core import validate
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q, Tx
from ..errors import (
    AccessDenied,
    ConfigurationError,
    Conflict,
    InvalidInput,
    SessionNotFound,
    SessionPurged,
)
from .envelope import Sealer, is_sealed
from .keystore import DataKey, Scope
from .places import (
    FACT_KIND,
    LANGGRAPH_WRITE_KIND,
    SUMMARY_KIND,
    TURN_KIND,
    checkpoint_kind,
    fact_position,
    langgraph_write_position,
    summary_position,
)
from .turns import recorded_epoch, turn_position

DEFAULT_BATCH_SIZE = 200
MAX_BATCH_SIZE = 10_000
MAX_PASSES = 20  # passes that each still find values (concurrent rewrites) before Conflict

# a sealed value's clear fields (the writing session, a turn's rewind epoch), copied onto
# its re-sealed value
_CLEAR_FIELDS = ("o", "e")


@dataclass(frozen=True, slots=True)
class RotationReport:
    """What :func:`rotate_data_key` did: the scope, the new key's id (None when the scope
    had no data key: nothing of it was sealed, or its key was shredded), the older versions
    it shredded, those it kept (artifact bytes of the scope's sessions may still be sealed
    under them), the values re-sealed per kind, the sessions searched and the passes made."""

    scope: str
    tenant_id: str
    name: str
    new_key: str | None
    shredded_keys: tuple[str, ...]
    kept_keys: tuple[str, ...] = ()
    resealed: Mapping[str, int] = field(default_factory=dict)
    sessions: int = 0
    passes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "scope": self.scope,
            "tenant_id": self.tenant_id,
            "name": self.name,
            "new_key": self.new_key,
            "shredded_keys": list(self.shredded_keys),
            "kept_keys": list(self.kept_keys),
            "resealed": dict(self.resealed),
            "sessions": self.sessions,
            "passes": self.passes,
        }


def _named(name: str, params: Any, fetch: Any = "all") -> Q:
    return Q(query(name), params, fetch=fetch, named=True)


def may_act_for_op(store: StoreState, tenant: str, what: str) -> Op[None]:
    """``AccessDenied`` unless this store may change the keys of ``tenant``: a store not
    bound to another tenant, on a connection that row security lets act for ``tenant`` (an
    operator's, a role bound to it, or a connection whose tenant setting names it). The key
    store is files outside the database, which row security cannot guard, hence the check."""
    bound = store.connector.tenant
    allowed = False
    if bound is None or bound == tenant:
        (allowed,) = yield Q(query("rotation_may_act_for"), {"tenant": tenant}, fetch="one")
    if not allowed:
        raise AccessDenied(f"only an operator's store, or one bound to this tenant, may {what}")


def _resealed(
    sealer: Sealer, new: DataKey, value: Any, kind: str, origin: str, position: str, where: str
) -> dict[str, Any]:
    """``value`` (sealed under an older version) sealed under ``new`` for the same place."""
    plaintext = sealer.open(value, kind, origin, position, where)
    sealed = sealer.seal(new, kind, origin, position, plaintext)
    for name in _CLEAR_FIELDS:
        if name in value:
            sealed[name] = value[name]
    return sealed


def _dump(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def _origin(value: Any, sid: uuid.UUID) -> str:
    """The session a sealed value was written for: its ``"o"``, else ``sid``."""
    origin = value.get("o") if is_sealed(value) else None
    return origin if type(origin) is str else str(sid)


class _Scan:
    """One rotation's state: the store's sealer, the new key, the ids to re-seal."""

    def __init__(self, sealer: Sealer, new: DataKey, kids: list[str], size: int) -> None:
        self.sealer = sealer
        self.new = new
        self.kids = kids
        self.size = size
        self.counts = {
            "turns": 0,
            "checkpoints": 0,
            "facts": 0,
            "summaries": 0,
            "langgraph_writes": 0,
        }

    def resealed(
        self, raw: str, kind: str, origin: str | None, sid: uuid.UUID, position: str, where: str
    ) -> str:
        """The stored text ``raw`` (sealed under an older version) re-sealed under the new
        key for the same place; ``origin`` None: the session the value names, else ``sid``."""
        value = json.loads(raw)
        writer = _origin(value, sid) if origin is None else origin
        return _dump(_resealed(self.sealer, self.new, value, kind, writer, position, where))

    def turn(self, sid: uuid.UUID, seq: int, raw: str) -> str:
        """A sealed turn re-sealed for the place it was sealed for: its seq and the rewind
        epoch it records (kept in its clear envelope), so a turn a reader would refuse as
        stale stays refused."""
        where = f"turn {seq} of session {sid}"
        value = json.loads(raw)
        epoch = recorded_epoch(value, where) if is_sealed(value) else 0
        return self.resealed(raw, TURN_KIND, None, sid, turn_position(seq, epoch), where)

    def _paged_op(
        self,
        finder: str,
        params: dict[str, Any],
        reseal: Callable[[list[Any]], Op[None]],
        cursor: Callable[[Any], dict[str, Any]],
    ) -> Op[int]:
        """Page through ``finder``'s rows (values still under an older version), ``reseal``
        each page, then move ``cursor`` past its last row; returns the rows found (0: none
        left in that table)."""
        found = 0
        while True:
            rows = yield _named(finder, {**params, "n": self.size})
            if not rows:
                return found
            found += len(rows)
            yield from reseal(rows)
            if len(rows) < self.size:
                return found
            params = {**params, **cursor(rows[-1])}

    def buffered_op(self, sid: uuid.UUID) -> Op[int]:
        def reseal(rows: list[Any]) -> Op[None]:
            seqs = [int(r["turn_seq"]) for r in rows]
            done = yield Q(
                query("rotation_reseal_buffered_turns"),
                {
                    "sid": sid,
                    "seqs": seqs,
                    "olds": [r["value"] for r in rows],
                    "news": [
                        self.turn(sid, seq, r["value"]) for seq, r in zip(seqs, rows, strict=True)
                    ],
                },
            )
            self.counts["turns"] += len(done)

        return (
            yield from self._paged_op(
                "rotation_buffered_turns",
                {"sid": sid, "after": -1, "kids": self.kids},
                reseal,
                lambda last: {"after": int(last["turn_seq"])},
            )
        )

    def chunks_op(self, sid: uuid.UUID) -> Op[int]:
        def reseal(rows: list[Any]) -> Op[None]:
            by_chunk: dict[tuple[int, Any], list[tuple[int, str, str]]] = {}
            for r in rows:
                seq = int(r["turn_seq"])
                by_chunk.setdefault((int(r["chunk_seq"]), r["chunk_start"]), []).append(
                    (seq, r["value"], self.turn(sid, seq, r["value"]))
                )
            yield Tx.BEGIN
            for (chunk_seq, start), turns in by_chunk.items():
                swapped = yield Q(
                    query("rotation_reseal_chunk_turns"),
                    {
                        "sid": sid,
                        "chunk": chunk_seq,
                        "start": start,
                        "seqs": [seq for seq, _old, _new in turns],
                        "olds": [old for _seq, old, _new in turns],
                        "news": [new for _seq, _old, new in turns],
                    },
                    fetch="one",
                )
                self.counts["turns"] += 0 if swapped is None else int(swapped[1])
            yield Tx.COMMIT

        return (
            yield from self._paged_op(
                "rotation_chunk_turns",
                {"sid": sid, "chunk": -1, "after": -1, "kids": self.kids},
                reseal,
                lambda last: {"chunk": int(last["chunk_seq"]), "after": int(last["turn_seq"])},
            )
        )

    def checkpoints_op(self, sid: uuid.UUID) -> Op[int]:
        parts = (
            ("state", "old_states", "new_states"),
            ("tool_calls", "old_calls", "new_calls"),
            ("tool_results", "old_results", "new_results"),
        )

        def reseal(rows: list[Any]) -> Op[None]:
            cols: dict[str, list[Any]] = {"ids": [r["checkpoint_id"] for r in rows]}
            for part, old_col, new_col in parts:
                cols[old_col] = [r[part] for r in rows]
                cols[new_col] = [
                    self._checkpoint_part(sid, r["checkpoint_id"], part, r[part]) for r in rows
                ]
            done = yield Q(query("rotation_reseal_checkpoints"), {"sid": sid, **cols})
            self.counts["checkpoints"] += len(done)

        return (
            yield from self._paged_op(
                "rotation_checkpoints",
                {"sid": sid, "after": uuid.UUID(int=0), "kids": self.kids},
                reseal,
                lambda last: {"after": last["checkpoint_id"]},
            )
        )

    def _checkpoint_part(self, sid: uuid.UUID, cid: Any, part: str, raw: str | None) -> Any:
        """A checkpoint column re-sealed; as stored when it is empty, not sealed, or sealed
        under a key this rotation does not replace."""
        if raw is None:
            return None
        value = json.loads(raw)
        if value is None or not is_sealed(value) or value["k"] not in self.kids:
            return raw
        where = f"the {part} of checkpoint {cid} of session {sid}"
        return self.resealed(raw, checkpoint_kind(part), None, sid, str(cid), where)

    def _values_op(
        self,
        table: str,
        params: dict[str, Any],
        *,
        cursor: Callable[[Any], dict[str, Any]],
        keys: dict[str, Callable[[Any], Any]],
        kind: str,
        place: Callable[[Any], tuple[str | None, uuid.UUID, str, str]],
    ) -> Op[int]:
        """Re-seal the values of ``table`` still under an older version, a page at a time
        (counted under ``table``): ``rotation_<table>`` finds them from ``params`` on
        (``cursor`` moves past a page's last row); ``rotation_reseal_<table>`` swaps each for
        its re-sealed value, the rows named by the session (``sid``) or tenant that
        ``params`` scope them to and by ``keys`` (one list of a key column each).
        ``place`` gives a row's (origin, sid, position, where) for :meth:`resealed`."""
        scope: dict[str, Any] = {n: params[n] for n in ("sid", "tenant") if n in params}

        def reseal(rows: list[Any]) -> Op[None]:
            news = [self.resealed(r["value"], kind, *place(r)) for r in rows]
            columns = {name: [key(r) for r in rows] for name, key in keys.items()}
            olds = [r["value"] for r in rows]
            done = yield Q(
                query(f"rotation_reseal_{table}"),
                {**scope, **columns, "olds": olds, "news": news},
            )
            self.counts[table] += len(done)

        return (yield from self._paged_op(f"rotation_{table}", params, reseal, cursor))

    def summaries_op(self, sid: uuid.UUID) -> Op[int]:
        return (
            yield from self._values_op(
                "summaries",
                {"sid": sid, "after": -1, "patterns": [f'%"k":"{kid}"%' for kid in self.kids]},
                cursor=lambda last: {"after": int(last["chunk_seq"])},
                keys={"seqs": lambda r: int(r["chunk_seq"])},
                kind=SUMMARY_KIND,
                place=lambda r: (
                    str(sid),
                    sid,
                    summary_position(r["chunk_seq"], r["first_turn_seq"], r["last_turn_seq"]),
                    f"the summary of chunk {r['chunk_seq']} of session {sid}",
                ),
            )
        )

    def langgraph_writes_op(self, sid: uuid.UUID) -> Op[int]:
        position_columns = ("checkpoint_ns", "checkpoint_id", "task_id", "channel", "value_type")
        return (
            yield from self._values_op(
                "langgraph_writes",
                {
                    "sid": sid,
                    "ns": "",
                    "cid": "",
                    "task": "",
                    "idx": -1,
                    "patterns": [f'%"k":"{kid}"%'.encode("ascii") for kid in self.kids],
                },
                cursor=lambda last: {
                    "ns": last["checkpoint_ns"],
                    "cid": last["checkpoint_id"],
                    "task": last["task_id"],
                    "idx": int(last["idx"]),
                },
                keys={
                    "nss": lambda r: r["checkpoint_ns"],
                    "cids": lambda r: r["checkpoint_id"],
                    "tasks": lambda r: r["task_id"],
                    "idxs": lambda r: int(r["idx"]),
                },
                kind=LANGGRAPH_WRITE_KIND,
                place=lambda r: (
                    None,
                    sid,
                    langgraph_write_position(tuple(r[c] for c in position_columns)),
                    f"a pending write of checkpoint {r['checkpoint_id']!r:.80} of session {sid}",
                ),
            )
        )

    def facts_op(self, tenant: str, subject: str) -> Op[int]:
        return (
            yield from self._values_op(
                "facts",
                {
                    "tenant": tenant,
                    "subject": subject,
                    "after": uuid.UUID(int=0),
                    "kids": self.kids,
                },
                cursor=lambda last: {"after": last["fact_id"]},
                keys={"ids": lambda r: r["fact_id"]},
                kind=FACT_KIND,
                place=lambda r: (
                    subject,
                    uuid.UUID(int=0),
                    fact_position(r["fact_id"], r["key"]),
                    f"the value of fact {r['key']!r} of subject {subject!r} ({r['fact_id']})",
                ),
            )
        )


def _check_arguments(tenant_id: Any, subject_id: Any, session_id: Any) -> None:
    if (subject_id is None) == (session_id is None):
        raise InvalidInput("give exactly one of subject_id= and session_id=")
    validate.optional_text(tenant_id, "tenant_id")
    if session_id is not None:
        validate.session_id(session_id)
    else:
        validate.text(subject_id, "subject_id")


def _scope_op(
    store: StoreState, tenant_id: Any, subject_id: Any, session_id: Any
) -> Op[tuple[Scope, uuid.UUID | None]]:
    """The scope named by the arguments (checked), and the session for a session scope."""
    if (subject_id is None) == (session_id is None):
        raise InvalidInput("give exactly one of subject_id= and session_id=")
    tenant = validate.optional_text(tenant_id, "tenant_id")
    if session_id is not None:
        sid = validate.session_id(session_id)
        owner = yield _named("rotation_session_owner", {"sid": sid}, fetch="one")
        if owner is None or (tenant is not None and owner["tenant_id"] != tenant):
            raise SessionNotFound(f"session {sid} does not exist")
        if owner["purged"]:
            raise SessionPurged(f"session {sid} was purged")
        if owner["subject_id"] is not None:
            raise InvalidInput(
                f"session {sid} belongs to subject {owner['subject_id']!r}, whose data key "
                "seals it: rotate that (subject_id=) instead"
            )
        return Scope("session", owner["tenant_id"], str(sid)), sid
    subject = validate.text(subject_id, "subject_id")
    if tenant is None:
        tenant = store.connector.tenant
    if tenant is None:
        (tenant,) = yield Q(query("rotation_bound_tenant"), fetch="one")
    if tenant is None:
        raise InvalidInput("subject_id= needs tenant_id= (subject ids are per tenant)")
    return Scope("subject", tenant, subject), None


def rotate_data_key(
    store: StoreState,
    *,
    tenant_id: str | None = None,
    subject_id: str | None = None,
    session_id: uuid.UUID | str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> Op[RotationReport]:
    """Rotate the data key of one data subject (``tenant_id=``, ``subject_id=``; a tenant's
    store may leave out its tenant) or of one session without a subject (``session_id=``;
    a session with a subject is sealed under its subject's key: rotate that): a new key
    version is used by every write from the moment the call starts, every value sealed under
    an older version (turns, buffered and folded; checkpoint state, tool calls and results;
    fact values; chunk summaries) is re-sealed under it, ``batch_size`` values per
    transaction (1 to 10,000), and then the older versions are shredded. Returns a
    :class:`RotationReport`.

    Guarantees: appends, folds and other writes go on meanwhile and none is lost or
    overwritten (each re-seal is a compare-and-set on the value read); a re-sealed value
    keeps its associated data (it opens only where it opened before); an older version is
    shredded only when no row names it any more, nor can a write in flight still commit one
    (a writer that read the old version commits before the final check or is refused and
    seals again). After a crash (or an error) every value
    opens under one of the scope's key versions; calling again finishes the job. The
    subject's or session's rows must be readable: a value that does not open where it is
    stored stops the rotation with ``DecryptionFailed`` (nothing shredded).

    A scope without a data key (nothing sealed for it, or its key shredded) has nothing to
    rotate: the report says so (``new_key`` None).

    Errors: ``ConfigurationError`` for a store without ``encryption=``; ``InvalidInput``
    for bad arguments or a tenant without that subject; ``SessionNotFound`` /
    ``SessionPurged``; ``AccessDenied``
    from a store bound to another tenant (or whose role may not act for it); ``Conflict``
    when the scope is being rotated already, or its values kept changing."""
    size = validate.count(batch_size, "batch_size", high=MAX_BATCH_SIZE)
    _check_arguments(tenant_id, subject_id, session_id)
    sealer = store.ctx.sealer
    if sealer is None:
        raise ConfigurationError(
            "rotate_data_key needs a store connected with encryption= (the key store "
            "holding the data key)",
            cli="keys rotate needs --key-store (the key store holding the data key)",
        )
    scope, sid = yield from _scope_op(store, tenant_id, subject_id, session_id)
    yield from may_act_for_op(store, scope.tenant, "rotate this tenant's data keys")
    keys = sealer.keys
    if keys.key_for(scope, create=False) is None:
        if scope.kind == "subject":
            (known,) = yield Q(
                query("rotation_subject_known"),
                {"tenant": scope.tenant, "subject": scope.name},
                fetch="one",
            )
            if not known:
                raise InvalidInput(f"tenant {scope.tenant!r} has no subject {scope.name!r}")
        # nothing was ever sealed for it, or its key was shredded: nothing to rotate
        return RotationReport(scope.kind, scope.tenant, scope.name, None, ())
    with keys.rotating(scope):
        new, retired = yield Call(keys.rotate, (scope,))
        scan = _Scan(sealer, new, retired, size)
        params = {
            "tenant": scope.tenant,
            "subject": scope.name if scope.kind == "subject" else None,
            "session": sid,
        }
        passes = 0
        sessions: list[uuid.UUID] = []
        while True:
            passes += 1
            if passes > MAX_PASSES:
                raise Conflict(
                    f"the values of {scope.kind} {scope.name!r} kept changing during "
                    f"{MAX_PASSES} passes of the rotation; call again to finish it"
                )
            rows = yield Q(query("rotation_sessions"), params)
            sessions = [r[0] for r in rows]
            found = yield from _pass_op(scan, scope, sessions)
            if found:
                continue
            # final check: every sealed writer in flight finishes first (each reads the key
            # after locking its session row, or a fact writer its subject's lock, and holds
            # that to its commit; a one-statement append checks its key against the turn
            # before it), then nothing may name a retired version any more
            yield Tx.BEGIN
            if scope.kind == "subject":
                yield Q(
                    query("rotation_lock_subject"),
                    {"tenant": scope.tenant, "subject": scope.name},
                    fetch="none",
                )
                # listed again under the subject's lock: a session an import created since
                # the list above (it seals under that lock, shared) has committed by now
                rows = yield Q(query("rotation_sessions"), params)
                sessions = [r[0] for r in rows]
            for session in sessions:
                yield Q(query("rotation_lock_session"), {"sid": session}, fetch="none")
            left = yield from _pass_op(scan, scope, sessions)
            # artifact bytes are not re-keyed: while an artifact of these sessions is stored,
            # the versions that may seal it are kept. Asked under the locks: a link of newly
            # sealed bytes re-reads the key under its session row's lock (check_sealing_op),
            # so it committed before them (seen here) or refuses bytes under a retired version
            (in_use,) = yield Q(
                query("rotation_artifacts_linked"),
                {"tenant": scope.tenant, "sids": sessions},
                fetch="one",
            )
            # keyed text windows hash under a key derived from the data key: a text pass in
            # flight holds its session row and has committed by now, later ones hash under
            # the new version, so the windows written before are dropped for the next search
            # of each session to index again
            for session in sessions:
                yield Q(query("rotation_forget_keyed_windows"), {"sid": session}, fetch="none")
            yield Tx.COMMIT
            if not left:
                break
        kept: tuple[str, ...] = tuple(retired) if in_use else ()
        shredded = [] if in_use else (yield Call(keys.shred_retired, (scope, retired)))
    return RotationReport(
        scope=scope.kind,
        tenant_id=scope.tenant,
        name=scope.name,
        new_key=new.kid,
        shredded_keys=tuple(shredded),
        kept_keys=kept,
        resealed=dict(scan.counts),
        sessions=len(sessions),
        passes=passes,
    )


def _pass_op(scan: _Scan, scope: Scope, sessions: list[uuid.UUID]) -> Op[int]:
    """One pass over every table; how many values naming a retired version it found (and
    tried to re-seal)."""
    found = 0
    finders: list[Callable[[uuid.UUID], Op[int]]] = [
        scan.buffered_op,
        scan.chunks_op,
        scan.checkpoints_op,
        scan.summaries_op,
        scan.langgraph_writes_op,
    ]
    for session in sessions:
        for finder in finders:
            found += yield from finder(session)
    if scope.kind == "subject":
        found += yield from scan.facts_op(scope.tenant, scope.name)
    return found


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_BATCH_SIZE",
    "RotationReport",
    "may_act_for_op",
    "rotate_data_key",
]
