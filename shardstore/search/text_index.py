"""Full-text windows of buffered turns, written ahead of their fold, so that text search does
not index them on the fly at every call (docs/decisions/0010-text-index-for-buffered-turns.md).

Folded turns always have their windows in ``shardstore.turn_text`` (``fold_chunk`` writes them
as it folds). A buffered turn gets them from :func:`index_buffered_op`: the store runs it after
each fold of a seal (the chunks a fold keeps buffered for ``tail()``) and, with background
folds, every ``history.TEXT_INDEX_EVERY`` turns of a session; ``maintain()`` runs
:func:`index_pending_op` over every session. Until then text search indexes the turn on the fly,
so every turn is found either way. In a scope of at most ``TEXT_SAMPLE`` indexed windows the
ranking is exact and does not depend on whether a pass ran; above that, common lexemes take
their candidates from the scope's newest indexed windows plus every turn not indexed yet
(see text_rank_v2), so a pass can change which of many equally plausible turns come first.
"""

from __future__ import annotations

import uuid

from ..core.sql import query
from ..core.steps import Op, Q


def index_buffered_op(session_id: uuid.UUID) -> Op[int]:
    """Write the windows of the session's buffered turns that have none; returns how many turns
    were indexed (0 when text indexing is off, or the session is gone or purged). Rows that a
    concurrent fold or expiry holds are skipped (the fold indexes them). One statement."""
    (indexed,) = yield Q(query("text_index_buffered"), (session_id,), fetch="one")
    return int(indexed)


def index_pending_op(batch: int = 1_000) -> Op[tuple[int, int]]:
    """Index the buffered turns of every session that has some without windows, one session
    per statement (each holds only its own session's locks, briefly); returns (sessions,
    turns) indexed. Sessions come ``batch`` at a time, oldest waiting turn first, and each is
    taken once per run: the run ends when a round brings no session it has not taken, so it
    ends even while writers keep appending (what they append meanwhile waits for the next run,
    and is found by search in the meantime all the same)."""
    taken: set[uuid.UUID] = set()
    sessions = turns = 0
    while True:
        rows = yield Q(query("text_unindexed_sessions"), (batch,), fetch="all")
        fresh = [sid for sid, _waiting in rows if sid not in taken]
        if not fresh:
            return sessions, turns
        for session_id in fresh:
            taken.add(session_id)
            indexed = yield from index_buffered_op(session_id)
            sessions += indexed > 0
            turns += indexed
        if len(rows) < batch:
            return sessions, turns
