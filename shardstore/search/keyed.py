"""Full-text search where turns are sealed: the client's text pass (keyed windows of sealed
turns) and the keyed ranking (docs/decisions/0025-encrypted-search.md).

The server cannot window a sealed turn (``text_windows`` gives it none), so a store
connected with ``encryption=`` indexes its sealed turns itself: :func:`text_pass_op` reads
the turns without windows, opens them, has the server cut each opened message into the
lexemes of its windows exactly as ``text_windows`` would (the message is a statement
parameter, never stored), hashes the lexemes with the search key of the scope whose rows
hold the turn (:mod:`shardstore.encryption.search`) and writes the windows. A search runs the
pass over its scope first, so every sealed turn appended before the search is found, as
buffered plaintext turns are found without any worker.

:func:`keyed_ranking_op` hashes the query's lexemes with the key of every scope searched and
ranks with ``text_rank_keyed_v2``: a window holds a query lexeme when it holds any of that
lexeme's hashes, so the ranking is the plaintext one (same lexemes, same BM25, same bounded
candidates), up to 32-bit hash collisions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ..core import jsoncodec
from ..core.sql import query
from ..core.steps import Op, Q, Tx
from ..encryption import search as lexeme_hashes
from ..encryption.envelope import Sealer
from ..encryption.keystore import DataKey
from ..encryption.turns import (
    Lineage,
    epochs_of,
    lineage_op,
    needs_lineage,
    open_message,
    session_scope,
)
from ..errors import DecryptionFailed, InvalidInput, InvalidMessage, KeyShredded
from .vectors import Ranked, SearchScope

#: sealed turns a text pass reads, opens and indexes per transaction
PASS_BATCH = 200
#: the most sessions a tenant-wide search reads: the tenant's most recently active ones
#: (each costs its key's check, a stat() of the key file, and for each distinct key one
#: 32-bit hash per query lexeme in the statement)
MAX_TENANT_SESSIONS = 2000
#: the most sessions of a tenant a search's text pass visits before it ranks
MAX_PASS_SESSIONS = 1000
#: the most keyed hashes one query may need (its lexemes x the keys searched, 4 bytes each):
#: a longer query over a tenant of many subjects is refused rather than hashed for seconds
MAX_QUERY_HASHES = 250_000


def _scope_key(sealer: Sealer, tenant: str, subject: str | None, sid: uuid.UUID) -> DataKey | None:
    """The current data key a session's rows are hashed with (a rotation's new version from
    the moment it is current), or None when it has none (never sealed anything, or
    shredded): nothing of it can be indexed or searched."""
    try:
        return sealer.keys.key_for(session_scope(tenant, subject, sid), create=False)
    except KeyShredded:
        return None


def session_pass_op(sealer: Sealer, session_id: uuid.UUID, batch: int | None = None) -> Op[int]:
    """Write the keyed windows of the session's sealed turns (buffered and folded) that have
    none; returns how many turns got windows. Each batch is one transaction holding the
    session row FOR KEY SHARE (no rewind or purge moves the turns meanwhile; appends go on),
    so a pass killed midway leaves whole turns indexed and the next pass goes on from what
    is missing. A turn that does not open (its key shredded, or altered) is left without
    windows and never found."""
    batch = PASS_BATCH if batch is None else batch
    indexed = 0
    after = -1
    lineage: Lineage | None = None
    while True:
        yield Tx.BEGIN
        (config,) = yield Q(query("keyed_pass_config"), fetch="one")
        head = yield Q(query("keyed_pass_session"), (session_id,), fetch="one", named=True)
        if head is None or config is None:
            yield Tx.COMMIT
            return indexed
        key = _scope_key(sealer, head["tenant_id"], head["subject_id"], session_id)
        if key is None:
            yield Tx.COMMIT
            return indexed
        rows = yield Q(
            query("keyed_pending_turns"),
            {"session": session_id, "after": after, "n": batch},
            named=True,
            prepare=False,
        )
        if not rows:
            yield Tx.COMMIT
            return indexed
        messages = [jsoncodec.loads(r["message"]) for r in rows]
        epochs = epochs_of(head["rewind_epochs"])
        if lineage is None and needs_lineage(session_id, messages):
            lineage = yield from lineage_op(session_id)
        opened: list[tuple[Any, str]] = []
        for row, message in zip(rows, messages, strict=True):
            try:
                plain = open_message(
                    sealer, session_id, int(row["turn_seq"]), message, lineage, epochs
                )
                text = jsoncodec.encode_message(plain)
            except (DecryptionFailed, InvalidMessage):  # KeyShredded included: not indexed
                continue
            opened.append((row, text))
        after = int(rows[-1]["turn_seq"])
        if opened:
            words = yield Q(
                query("keyed_window_words"),
                ([text for _, text in opened], config),
                prepare=False,
            )
            turns, windows, chunks, ats, tsvs = [], [], [], [], []
            for i, window, lexemes in words:
                row = opened[int(i) - 1][0]
                turns.append(int(row["turn_seq"]))
                windows.append(int(window))
                chunks.append(int(row["chunk_seq"]))
                ats.append(row["created_at"])
                hashes = lexeme_hashes.window_hashes(key, lexemes)
                tsvs.append("{" + ",".join(map(str, hashes)) + "}")
            yield Q(
                query("keyed_store_windows"),
                {
                    "session": session_id,
                    "tenant": head["tenant_id"],
                    "agent": head["agent_id"],
                    "turns": turns,
                    "windows": windows,
                    "chunks": chunks,
                    "ats": ats,
                    "tsvs": tsvs,
                },
                prepare=False,
                fetch="none",
            )
            indexed += len(set(turns))
        yield Tx.COMMIT
        if len(rows) < batch:
            return indexed


def text_pass_op(sealer: Sealer, scope: SearchScope) -> Op[int]:
    """:func:`session_pass_op` over what a search of ``scope`` reads and that is not
    indexed: the session and its fork lineage, or the tenant's sessions (of the agent)
    holding sealed turns without windows (at most :data:`MAX_PASS_SESSIONS` per call).
    Returns turns indexed. A search runs it itself (:func:`keyed_ranking_op`); a caller
    that ranks inside a read-only snapshot runs it first."""
    prelude = yield from _prelude_op(scope, "")
    total = 0
    for sid in prelude.pending:
        total += yield from session_pass_op(sealer, sid)
    return total


def maintenance_pass_op(sealer: Sealer, sessions: int = MAX_PASS_SESSIONS) -> Op[tuple[int, int]]:
    """A maintenance run's keyed text pass (``maintain()`` with ``encryption=``): the
    :func:`session_pass_op` of up to ``sessions`` live sessions, of every tenant, holding
    sealed turns without text windows, the most recently active first, so that searches
    find them indexed instead of indexing them first. Sessions whose data key this store
    cannot use are passed over (nothing indexed). Returns (sessions indexed, turns
    indexed); what is left waits for the next run or the next search of its scope."""
    pending = yield Q(query("keyed_pending_sessions"), (sessions,), fetch="all")
    indexed_sessions = indexed_turns = 0
    for (sid,) in pending:
        turns = yield from session_pass_op(sealer, sid)
        indexed_sessions += turns > 0
        indexed_turns += turns
    return indexed_sessions, indexed_turns


@dataclass(frozen=True, slots=True)
class _Prelude:
    config: str | None
    words: list[str]
    sessions: list[tuple[str, str | None, uuid.UUID]]  # (tenant, subject, session)
    pending: list[uuid.UUID]


def _prelude_op(scope: SearchScope, text: str) -> Op[_Prelude]:
    """One statement: the query's lexemes, the scopes searched and the sessions to index.
    Prepared, unlike the ranking: it names no partitioned table (nothing to prune at plan
    time), its functions keep their own plans, and planning it was half its time."""
    if scope.session_id is not None:
        rows = yield Q(
            query("keyed_session_prelude"),
            {"q": text, "session": scope.session_id, "tenant": scope.tenant_id},
            named=True,
        )
        live = [r for r in rows if r["session_id"] is not None]
        return _Prelude(
            rows[0]["config"],
            list(rows[0]["words"]),
            [(r["tenant_id"], r["subject_id"], r["session_id"]) for r in live],
            [r["session_id"] for r in live if r["pending"]],
        )
    assert scope.tenant_id is not None
    rows = yield Q(
        query("keyed_tenant_prelude"),
        {
            "q": text,
            "tenant": scope.tenant_id,
            "agent": scope.agent_id,
            "n": MAX_TENANT_SESSIONS,
            "sessions": MAX_PASS_SESSIONS,
        },
        named=True,
    )
    tenant = scope.tenant_id
    return _Prelude(
        rows[0]["config"],
        list(rows[0]["words"]),
        [(tenant, r["subject_id"], r["session_id"]) for r in rows if r["session_id"] is not None],
        list(rows[0]["pending"] or ()),
    )


def keyed_ranking_op(
    sealer: Sealer,
    scope: SearchScope,
    text: str,
    n: int,
    params: dict[str, Any],
    index: bool = True,
) -> Op[list[Ranked]]:
    """The ``n`` best-matching turns of the scope for ``text`` over keyed windows, best
    first (``text_rank_keyed_v2``); [] when text search is off, the query has no lexeme or
    no key of the scope exists. With ``index``, the sealed turns of the scope without
    windows are indexed first (:func:`session_pass_op`), so every turn appended before the
    search is found. ``params``: the scope's statement parameters. The query is hashed
    with the key of every session searched (a subject's sessions share one): a session and
    its fork lineage; a tenant's most recently active :data:`MAX_TENANT_SESSIONS`. Each
    window is compared with its own session's hashes only."""
    prelude = yield from _prelude_op(scope, text)
    if prelude.config is None:
        return []
    if index:
        for sid in prelude.pending:
            yield from session_pass_op(sealer, sid)
    if not prelude.words:
        return []
    keys: list[DataKey] = []
    slot: dict[str, int] = {}
    sessions: list[uuid.UUID] = []
    slots: list[int] = []
    for tenant, subject, sid in prelude.sessions:
        key = _scope_key(sealer, tenant, subject, sid)
        if key is None:
            continue
        if key.kid not in slot:
            keys.append(key)
            slot[key.kid] = len(keys)
        sessions.append(sid)
        slots.append(slot[key.kid])
    if not keys:
        return []
    if len(keys) * len(prelude.words) > MAX_QUERY_HASHES:
        raise InvalidInput(
            f"the query has {len(prelude.words)} distinct words and the scope {len(keys)} "
            f"encryption keys: more than {MAX_QUERY_HASHES:,} keyed hashes; shorten the query "
            "or narrow the search (session_id, agent_id)"
        )
    rows = yield Q(
        query("keyed_text_search"),
        {
            **params,
            "hashes": lexeme_hashes.query_hashes(keys, prelude.words),
            "lexemes": len(prelude.words),
            "sessions": sessions,
            "slots": slots,
        },
        prepare=False,
        named=True,
    )
    return [
        Ranked(
            r["session_id"],
            int(r["chunk_seq"]),
            int(r["first_turn_seq"]),
            int(r["last_turn_seq"]),
            float(r["score"]),
            float(r["cover"]),
        )
        for r in rows
    ]
