"""``shardstore context SESSION --max-tokens N``: the context view a model call would get,
part by part."""

from __future__ import annotations

from typing import Any

from ...context.assembly import Context
from ..app import Runner
from ..args import non_negative_int, positive_int
from ..declare import arg, command, flag
from ..output import abbrev, format_table, message_summary, printable


def context_json(ctx: Context) -> dict[str, Any]:
    """A context as JSON: its token total and each message with its part."""
    return {
        "tokens": ctx.tokens,
        "messages": [
            {
                "kind": p.kind,
                "first_turn_seq": p.first_turn_seq,
                "last_turn_seq": p.last_turn_seq,
                "score": p.score,
                "fact_ids": [str(f) for f in p.fact_ids],
                "tokens": p.tokens,
                "message": m,
            }
            for m, p in zip(ctx.messages, ctx.parts, strict=True)
        ],
    }


@command(
    "context",
    "show the context a model call would get: summaries, facts, recalled and recent turns",
    arg("session_id", metavar="SESSION"),
    arg("--max-tokens", type=positive_int, required=True, metavar="N", help="the token budget"),
    arg(
        "--recall",
        metavar="TEXT",
        help="also recall the session's turns that match TEXT",
    ),
    arg(
        "--facts",
        metavar="SUBJECT",
        help="include the current facts of SUBJECT (the session's tenant)",
    ),
    arg("-k", type=positive_int, default=5, metavar="K", help="recall hits (5)"),
    arg(
        "--recent-min-tokens",
        type=non_negative_int,
        metavar="N",
        help="tokens kept for recent turns first (default half the budget)",
    ),
    flag("--no-summaries", help="leave chunk summaries out"),
)
def cmd_context(run: Runner) -> int:
    """Print the parts of the session's context within ``--max-tokens`` (kind, turns,
    tokens, the message abbreviated) and the total, then, when no recent turn is in it,
    why (the session holds none, or its newest turn's unit is over the budget); 0 on
    success."""
    args = run.args
    with run.connect() as store:
        ctx = store.context(
            args.session_id,
            args.max_tokens,
            recent_min_tokens=args.recent_min_tokens,
            summaries=not args.no_summaries,
            recall=args.recall,
            k=args.k,
            facts_subject=args.facts,
        )
        note = None
        if not any(part.kind == "recent" for part in ctx.parts):
            # the context always takes the newest unit when it fits alone: so either there
            # is no turn, or that unit is over the budget (one more read, only here)
            newest = store.tail_explained(args.session_id, n=1)
            if newest.turns or newest.held_back:
                note = (
                    "no recent turns: the newest turn, with the turns it cannot be sent "
                    "without (the call a tool result answers), is over --max-tokens "
                    f"{args.max_tokens}"
                )
            else:
                note = "no recent turns: the session holds none"
    if run.json:
        run.emit({**context_json(ctx), "note": note})
        return 0
    rows = []
    for message, part in zip(ctx.messages, ctx.parts, strict=True):
        turns = "" if part.first_turn_seq is None else str(part.first_turn_seq)
        if part.last_turn_seq is not None and part.last_turn_seq != part.first_turn_seq:
            turns += f"-{part.last_turn_seq}"
        if part.kind == "facts":
            turns = f"{len(part.fact_ids)} facts"
        score = "" if part.score is None else f"{part.score:.3f}"
        rows.append(
            [
                part.kind,
                turns,
                str(part.tokens),
                score,
                abbrev(printable(message_summary(message)), 70),
            ]
        )
    if rows:
        run.line(format_table(("part", "turns", "tokens", "score", "message"), rows, "llrrl"))
    messages = f"{len(rows)} message{'s' if len(rows) != 1 else ''}"
    run.line(f"{ctx.tokens} of {args.max_tokens} tokens in {messages}")
    if note is not None:
        run.line(note)
    return 0


COMMANDS = (cmd_context,)
