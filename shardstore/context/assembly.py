"""Context assembly: the view of a session a model call gets, within an exact token budget,
built without changing the log (``store.context``).

A context is, in the order a model expects: summaries of older chunks and the current
facts as system messages, then turns recalled by search (rendered as one system message
per hit, marked as recalled), then the recent turns verbatim. :func:`plan` is the pure
rule; :func:`context` reads what it needs in one snapshot and applies it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..core import jsoncodec, validate
from ..core.context import Context as OpContext
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q, Tx
from ..encryption import turns as enc_turns
from ..errors import SessionNotFound, SessionPurged
from ..history.ops import tail_op
from ..history.pairing import (
    is_reasoning,
    is_tool_result,
    may_follow_reasoning,
    responses_call_id,
    responses_result_id,
    trim_tail,
)
from ..history.tokens import TokenCounter, make_counter
from ..models import SearchHit, Turn, new_turn
from ..search.embedding import message_text
from ..search.ops import index_sealed_text_op, sealed_vectors_op
from ..search.text import (
    best_chunks,
    hybrid_ranking_op,
    query_vector_op,
    text_query,
)
from ..search.vectors import MAX_K, hits_op, search_scope
from ..state.facts import Fact
from ..state.facts import recall as facts_recall
from .summaries import ChunkSummary, open_summary, summary_message

KINDS = ("summary", "recall", "facts", "recent")
#: summaries read per context call at most (newest first)
MAX_SUMMARIES = 256
#: with a tokenizer of your own, recent turns are fetched up to this many times the budget
#: in the store's tokens, then counted with yours
CUSTOM_FETCH_FACTOR = 4


@dataclass(frozen=True, slots=True)
class ContextPart:
    """Where one message of a :class:`Context` came from. ``kind``: ``"summary"`` (a chunk
    summary covering turns ``first_turn_seq..last_turn_seq``), ``"facts"`` (the facts
    ``fact_ids``), ``"recall"`` (turns ``first_turn_seq..last_turn_seq`` found by search for
    ``recall``, with the hit's ``score``) or ``"recent"`` (turn ``first_turn_seq``, verbatim).
    ``tokens``: the message's tokens by the counter the context was built with."""

    kind: str
    first_turn_seq: int | None
    last_turn_seq: int | None
    score: float | None
    fact_ids: tuple[uuid.UUID, ...]
    tokens: int


@dataclass(frozen=True, slots=True)
class Context:
    """A context view: ``messages`` to send, ``parts[i]`` saying where ``messages[i]`` came
    from, and ``tokens``, their sum, never more than the budget asked for."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    parts: list[ContextPart] = field(default_factory=list)
    tokens: int = 0


Count = Callable[[dict[str, Any]], int]


def message_counter(counter: TokenCounter) -> Count:
    """Tokens of a message: the counter over its JSON text, as the store counts turns."""

    def count(message: dict[str, Any]) -> int:
        return counter.count(jsoncodec.encode_json(message, "message"))

    return count


def units(turns: Sequence[Turn]) -> list[list[Turn]]:
    """Turns (oldest first, already trimmed) grouped into what must stay together: a tool
    result joins the unit of the turn before it (back to its call), and so does the item
    after a ``reasoning`` item, in every format :mod:`shardstore.history.pairing` knows. A Responses
    result whose call (by ``call_id``) is in an older unit merges every unit from that one
    on: parallel calls are separate items, so ``[call c1][call c2, output c1, output c2]``
    is one unit, never a newest unit holding ``output c1`` without its call."""
    out: list[list[Turn]] = []
    call_unit: dict[str, int] = {}  # Responses call id -> index of the unit holding it
    for turn in turns:
        message = turn.message
        if out and (is_tool_result(message) or is_reasoning(out[-1][-1].message)):
            out[-1].append(turn)
        else:
            out.append([turn])
        if "role" in message:  # not a Responses item: no call id to follow (the hot case)
            continue
        answered = responses_result_id(message)
        home = call_unit.get(answered) if answered is not None else None
        if home is not None and home < len(out) - 1:
            merged = [t for unit in out[home:] for t in unit]
            del out[home:]
            out.append(merged)
            call_unit = {c: min(i, home) for c, i in call_unit.items()}
        call = responses_call_id(message)
        if call is not None:
            call_unit[call] = len(out) - 1
    return out


def facts_message(subject: str, facts: Sequence[Fact]) -> dict[str, Any]:
    """The system message listing current facts (one line each, values as JSON)."""
    lines = [f"- {f.key}: {json.dumps(f.value, ensure_ascii=False, sort_keys=True)}" for f in facts]
    return {"role": "system", "content": f"Known facts about {subject}:\n" + "\n".join(lines)}


def recall_message(turns: Sequence[Turn]) -> dict[str, Any]:
    """A recalled window rendered as one system message, marked as recalled: a rendering
    cannot split a tool pair or a reasoning item in any format."""
    body = "\n".join(f"[{t.turn_seq}] {message_text(t.message)}" for t in turns)
    return {
        "role": "system",
        "content": (
            f"Recalled from earlier in this conversation (turns {turns[0].turn_seq}-"
            f"{turns[-1].turn_seq}; not the latest messages):\n{body}"
        ),
    }


def first_units(sizes: Sequence[int], max_tokens: int, recent_min_tokens: int) -> int:
    """How many of the newest units (sizes oldest first) the recent part takes first: the
    newest if it fits ``max_tokens`` alone, then older ones while the total stays within
    ``recent_min_tokens`` (and ``max_tokens``)."""
    taken = total = 0
    while taken < len(sizes):
        size = sizes[len(sizes) - 1 - taken]
        limit = max_tokens if taken == 0 else min(max_tokens, recent_min_tokens)
        if total + size > limit:
            break
        total += size
        taken += 1
    return taken


@dataclass
class _Plan:
    budget: int
    used: int = 0

    def fits(self, tokens: int) -> bool:
        return self.used + tokens <= self.budget


def plan(
    candidates: Sequence[Turn],
    *,
    max_tokens: int,
    recent_min_tokens: int,
    turn_tokens: Callable[[Turn], int],
    count: Count,
    summaries: Sequence[ChunkSummary] = (),
    facts: tuple[str, Sequence[Fact]] | None = None,
    hits: Sequence[SearchHit] = (),
    summary_tokens: Callable[[ChunkSummary, dict[str, Any]], int] | None = None,
) -> Context:
    """The context for a window of the newest turns (``candidates``, oldest first, trimmed
    so that it opens on no orphaned result), within ``max_tokens`` by ``count`` /
    ``turn_tokens``:

    1. the newest unit (:func:`units`: the newest turn with the call or reasoning item it
       belongs to) if it fits alone, then older units while the recent part stays within
       ``recent_min_tokens``;
    2. the facts (``(subject, facts)``), as many as fit, in key order;
    3. each recall hit (best first) older than the recent part, rendered, if it fits;
    4. summaries (newest first) of chunks wholly before the recent part, while they fit;
    5. older units again with what is left, never into a summarised turn; recall parts the
       recent part now covers are dropped.

    ``summary_tokens(summary, message)``: the tokens of a summary's message when known
    without counting (``count`` otherwise). Deterministic; ``tokens`` never exceeds
    ``max_tokens``."""
    budget = _Plan(max_tokens)
    groups = units(candidates)
    sizes = [sum(turn_tokens(t) for t in g) for g in groups]
    taken = first_units(sizes, max_tokens, recent_min_tokens)
    recent_tokens = sum(sizes[len(sizes) - taken :])
    budget.used = recent_tokens

    def recent_start() -> int | None:
        return groups[len(groups) - taken][0].turn_seq if taken else None

    start = recent_start()
    head: list[tuple[dict[str, Any], ContextPart]] = []
    if facts is not None and facts[1]:
        subject, known = facts
        chosen: list[Fact] = []
        best: tuple[dict[str, Any], int] | None = None
        for fact in known:
            message = facts_message(subject, [*chosen, fact])
            tokens = count(message)
            if not budget.fits(tokens):
                break
            chosen.append(fact)
            best = (message, tokens)
        if best is not None:
            budget.used += best[1]
            ids = tuple(f.fact_id for f in chosen)
            head.append((best[0], ContextPart("facts", None, None, None, ids, best[1])))
    recalled: list[tuple[dict[str, Any], ContextPart]] = []
    for hit in hits:
        turns = [t for t in hit.turns if start is None or t.turn_seq < start]
        if not turns:
            continue
        message = recall_message(turns)
        tokens = count(message)
        if budget.fits(tokens):
            budget.used += tokens
            part = ContextPart(
                "recall", turns[0].turn_seq, turns[-1].turn_seq, hit.score, (), tokens
            )
            recalled.append((message, part))
    summarised: list[tuple[dict[str, Any], ContextPart]] = []
    covered = -1  # the last turn a chosen summary covers
    for summary in summaries:
        if start is not None and summary.last_turn_seq >= start:
            continue
        message = summary_message(summary)
        tokens = count(message) if summary_tokens is None else summary_tokens(summary, message)
        if not budget.fits(tokens):
            break
        budget.used += tokens
        covered = max(covered, summary.last_turn_seq)
        part = ContextPart(
            "summary", summary.first_turn_seq, summary.last_turn_seq, None, (), tokens
        )
        summarised.append((message, part))
    while taken < len(groups):
        group = groups[len(groups) - 1 - taken]
        size = sizes[len(groups) - 1 - taken]
        if group[0].turn_seq <= covered or not budget.fits(size):
            break
        budget.used += size
        taken += 1
    start = recent_start()
    if start is not None:
        kept = []
        for message, part in recalled:
            if part.last_turn_seq is not None and part.last_turn_seq >= start:
                budget.used -= part.tokens
            else:
                kept.append((message, part))
        recalled = kept
    recalled.sort(key=lambda mp: mp[1].first_turn_seq or 0)
    summarised.sort(key=lambda mp: mp[1].first_turn_seq or 0)
    ordered = [*summarised, *head, *recalled]
    for group in groups[len(groups) - taken :]:
        for turn in group:
            tokens = turn_tokens(turn)
            part = ContextPart("recent", turn.turn_seq, turn.turn_seq, None, (), tokens)
            ordered.append((turn.message, part))
    total = sum(p.tokens for _, p in ordered)
    assert total <= max_tokens, (total, max_tokens)  # the rule above; a bug otherwise
    return Context([m for m, _ in ordered], [p for _, p in ordered], total)


def context(
    store: StoreState,
    session_id: uuid.UUID | str,
    max_tokens: int,
    *,
    recent_min_tokens: int | None = None,
    summaries: bool = True,
    recall: str | None = None,
    k: int = 5,
    facts_subject: str | None = None,
    tokenizer: Any = None,
) -> Op[Context]:
    """A context view of the session within ``max_tokens`` tokens, for the next model call;
    the stored history is never changed.

    ``messages`` are ordered as a model expects: summaries of older chunks and the facts
    of ``facts_subject`` (current versions, the session's tenant) as system messages,
    then the hits of a search of this session for ``recall`` (hybrid when the database
    holds vectors, else full-text; ``k`` hits at most), each rendered as one system
    message marked as recalled, then the recent turns verbatim, oldest first.
    ``parts[i]`` says where ``messages[i]`` came from (:class:`ContextPart`).

    Guarantees: ``tokens`` (the sum over the messages, each counted over its JSON text by
    the store's tokenizer, or by ``tokenizer``: a counter, an encoding name or a
    tokenizer.json path) never exceeds ``max_tokens``; the newest turn is included
    whenever it fits alone, with the turns it cannot be sent without (the call a tool
    result answers, the reasoning item before an item) when it is such a turn; tool
    pairs and reasoning items stay whole (the recent part never opens on a result or on
    an item whose reasoning item it left out; recalled turns are rendered as text); the
    same store state and arguments give the same context. The recent part takes at least
    ``recent_min_tokens`` (default half the budget) when there are turns for it, then
    facts, recall hits and summaries share the rest, and what is left goes to more
    recent turns. ``summaries=False`` leaves summaries out; without summaries (none
    stored, or no summarizer ever run) the context is recent turns, recall and facts.
    With your own ``tokenizer``, recent turns are fetched up to 4x the budget in the
    store's tokens (and the newest turn's unit whatever its size) and counted with yours."""
    sid = validate.session_id(session_id)
    budget = validate.count(max_tokens, "max_tokens", high=validate.MAX_INT64)
    recent_min = (
        budget // 2
        if recent_min_tokens is None
        else validate.count(recent_min_tokens, "recent_min_tokens", low=0, high=validate.MAX_INT64)
    )
    use_summaries = validate.flag(summaries, "summaries")
    wanted = None if recall is None else text_query(recall)
    hits_wanted = validate.count(k, "k", high=MAX_K)
    subject = validate.optional_text(facts_subject, "facts_subject")
    own = tokenizer is not None
    counter: TokenCounter = make_counter(tokenizer) if own else store.ctx.counter
    ctx: OpContext = store.ctx
    count = message_counter(counter)

    def turn_tokens(turn: Turn) -> int:
        return count(turn.message) if own else turn.tokens

    vector = None
    if wanted is not None:  # sealed turns' text windows: written before the read-only snapshot
        yield from index_sealed_text_op(ctx, search_scope(sid, None, None, None, None, 1))
    if wanted is not None and (yield from sealed_vectors_op(ctx)):
        # the query's embedding, before the snapshot (a model call); none when vectors of
        # encrypted turns are off (the recall ranks by text alone)
        vector = yield from query_vector_op(store.vector_state, wanted)
    fetch = min(validate.MAX_INT64, budget * CUSTOM_FETCH_FACTOR) if own else budget
    # one statement reads the head, the window and the summaries (one snapshot); facts,
    # recall and (with your tokenizer) a re-read of the newest unit are more statements,
    # so they share a REPEATABLE READ snapshot with it
    joined = subject is not None or wanted is not None or own
    limit = min(MAX_SUMMARIES, budget // 8 + 1)
    if joined:
        yield Tx.BEGIN_SNAPSHOT
    read = yield Q(
        query("ctx_read"),
        {
            "session": sid,
            "fetch": fetch,
            "summaries": use_summaries,
            "limit": limit,
            "counter": None if own else counter.name,
            # with your tokenizer stored counts say nothing: read every summary up to limit
            "bound": None if own else budget,
        },
        fetch="one",
        named=True,
    )
    if read is None:
        raise SessionNotFound(f"session {sid} does not exist")
    if read["purged"]:
        raise SessionPurged(f"session {sid} was purged")
    sealer = ctx.sealer
    window = decode_window(read["turns"])
    window = yield from enc_turns.open_turns_op(sealer, sid, window)
    before = None
    if window and window[0].turn_seq > 0 and may_follow_reasoning(window[0].message):
        before = None if read["before"] is None else jsoncodec.loads(read["before"])
        if before is not None:
            prior = new_turn(window[0].turn_seq - 1, before, 0, window[0].created_at, 0, None)
            (opened,) = yield from enc_turns.open_turns_op(sealer, sid, [prior])
            before = opened.message
    candidates = trim_tail(window, before)
    if own and not candidates and int(read["turn_count"]) > 0:
        # the newest unit is over the fetch in the store's tokens, yet by your tokenizer
        # it may fit alone: read it by turns so that the rule holds for your counts too
        candidates = yield from newest_unit_op(ctx, sid, int(read["turn_count"]))
    groups = units(candidates)
    taken = first_units([sum(turn_tokens(t) for t in g) for g in groups], budget, recent_min)
    # what the recent part takes first: summaries and recall hits come from before it
    start = groups[len(groups) - taken][0].turn_seq if taken else int(read["turn_count"])
    stored, known_tokens = decode_summaries(read["summaries"], start, limit)
    stored = [open_summary(sealer, sid, summary) for summary in stored]
    known: tuple[str, list[Fact]] | None = None
    if subject is not None:
        facts = yield from facts_recall(store, read["tenant_id"], subject)
        known = (subject, facts)
    hits: list[SearchHit] = []
    if wanted is not None:
        scope = search_scope(sid, None, None, None, None, hits_wanted)
        fused = yield from hybrid_ranking_op(
            ctx, store.vector_state, scope, wanted, vector, index=False
        )
        older = [r for r in fused if r.first_turn_seq < start]
        hits = yield from hits_op(best_chunks(older, hits_wanted), sid, ctx.sealer)
    if joined:
        yield Tx.COMMIT

    def summary_tokens(summary: ChunkSummary, message: dict[str, Any]) -> int:
        stored_count = known_tokens.get(summary.chunk_seq)
        return count(message) if stored_count is None else stored_count

    return plan(
        candidates,
        max_tokens=budget,
        recent_min_tokens=recent_min,
        turn_tokens=turn_tokens,
        count=count,
        summaries=stored,
        facts=known,
        hits=hits,
        summary_tokens=summary_tokens,
    )


def newest_unit_op(ctx: OpContext, sid: uuid.UUID, turn_count: int) -> Op[list[Turn]]:
    """The newest turns by count, oldest first and trimmed (:func:`pairing.trim_tail`), in
    windows of 2, 4, 8... turns until one holds the newest turn's whole unit (the call its
    results answer, the reasoning item before it) or the whole session: the newest unit
    whatever its size in the store's tokens (empty only when no turn can open a window)."""
    n = 2
    while True:
        turns = yield from tail_op(ctx, sid, n, None)
        if turns or n >= turn_count:
            return turns
        n *= 2


def decode_window(text: str | None) -> list[Turn]:
    """The turns of ``ctx_read``'s JSON window (``[turn_seq, chunk_seq, tokens, created_at,
    key, message]`` each, oldest first), decoded in one parse; escaped strings restored."""
    if text is None:
        return []
    rows: list[list[Any]] = jsoncodec.parse(text)
    marked = jsoncodec.MARK in text
    return [
        new_turn(
            r[0],
            jsoncodec.decode_value(r[5]) if marked else r[5],
            r[2],
            datetime.fromisoformat(r[3]),
            r[1],
            r[4],
        )
        for r in rows
    ]


def decode_summaries(
    text: str | None, start: int, limit: int
) -> tuple[list[ChunkSummary], dict[int, int]]:
    """The summaries of chunks wholly before turn ``start``, newest first, at most ``limit``
    (from ``ctx_read``'s JSON, newest first), and the stored message tokens of those whose
    count is known (by chunk_seq)."""
    if text is None:
        return [], {}
    out: list[ChunkSummary] = []
    tokens: dict[int, int] = {}
    for r in jsoncodec.parse(text):
        if r[2] >= start:
            continue
        out.append(ChunkSummary(r[0], r[1], r[2], r[3], r[4], r[5], datetime.fromisoformat(r[6])))
        if r[7] is not None:
            tokens[r[0]] = r[7]
        if len(out) == limit:
            break
    return out, tokens
