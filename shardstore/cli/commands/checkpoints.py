"""``shardstore checkpoints`` and ``shardstore restore``: an agent's checkpoints and what a
restart would resume from."""

from __future__ import annotations

from collections.abc import Sequence

from ...state.checkpoints import Checkpoint, Restored
from ..app import Runner
from ..args import UsageError, positive_int
from ..declare import arg, command
from ..output import (
    TurnPrinter,
    abbrev,
    checkpoint_json,
    dumps,
    format_table,
    turn_json,
    when,
)

_HEADERS = ("checkpoint", "turn_seq", "sub_step", "created (UTC)", "state")


@command(
    "checkpoints",
    "list a session's checkpoints, newest first",
    arg("session_id", metavar="SESSION"),
    arg("--limit", type=positive_int, help="at most this many checkpoints"),
)
def cmd_checkpoints(run: Runner) -> int:
    """List a session's checkpoints, newest first (``--limit``); 0 on success."""
    with run.connect() as store:
        found = store.checkpoints(run.args.session_id, limit=run.args.limit)
    return run.listing(found, "checkpoints", checkpoint_json, _table)


def _table(found: Sequence[Checkpoint]) -> str:
    rows = [
        [
            str(c.checkpoint_id),
            str(c.turn_seq),
            "" if c.sub_step is None else str(c.sub_step),
            when(c.created_at),
            abbrev(dumps(c.state, indent=None), 60),
        ]
        for c in found
    ]
    return format_table(_HEADERS, rows, "lrrll")


def _short_note(got: Restored, n: int | None, max_tokens: int | None, newest: bool) -> str | None:
    """Why ``restore --n/--max-tokens`` gave fewer turns than asked for (None when it did
    not): turns held back at the window's start, no turn within the token budget
    (``newest``: the history up to the position has turns), or no more turns up to it."""
    where = "the checkpoint" if got.checkpoint is not None else "now"
    if got.held_back:
        count = len(got.held_back)
        what = "a tool result whose call is" if count == 1 else "tool results whose calls are"
        return (
            f"held back {count} turn{'s' if count != 1 else ''}: {what} before the window, "
            "which never opens on one (use --n/--max-tokens to widen it)"
        )
    if max_tokens is not None and not got.turns and newest:
        return f"no turns: the newest turn up to {where} alone is over --max-tokens {max_tokens}"
    if n is not None and len(got.turns) < n:
        have = len(got.turns)
        return f"{have} of --n {n} turns: the history up to {where} holds no more"
    return None


@command(
    "restore",
    "show the checkpoint and history a restart resumes from",
    arg("session_id", metavar="SESSION"),
    arg("--checkpoint", metavar="ID", help="this checkpoint instead of the newest"),
    arg("--n", type=positive_int, metavar="N", help="only the newest N turns up to it"),
    arg(
        "--max-tokens",
        type=positive_int,
        metavar="T",
        help="only the newest turns up to it within T tokens",
    ),
)
def cmd_restore(run: Runner) -> int:
    """Print the checkpoint a restart resumes from (the newest, or ``--checkpoint``) and
    the history up to its position (all of it, or ``--n`` / ``--max-tokens``), then why
    fewer turns than ``--n`` came back, or none within ``--max-tokens``, when so; 0 on
    success."""
    args = run.args
    if args.n is not None and args.max_tokens is not None:
        raise UsageError("give --n or --max-tokens, not both")
    with run.connect() as store:
        got = store.restore(args.session_id, args.checkpoint, n=args.n, max_tokens=args.max_tokens)
        newest = False
        if args.max_tokens is not None and not got.turns and not got.held_back:
            # is the budget too small, or is there no turn at all? one turn without a budget
            one = store.restore(args.session_id, args.checkpoint, n=1)
            newest = bool(one.turns or one.held_back)
    note = _short_note(got, args.n, args.max_tokens, newest)
    if run.json:
        run.emit(
            {
                "session_id": args.session_id,
                "checkpoint": None if got.checkpoint is None else checkpoint_json(got.checkpoint),
                "turns": [turn_json(t) for t in got.turns],
                "held_back_turn_seqs": [t.turn_seq for t in got.held_back],
                "note": note,
            }
        )
        return 0
    cp = got.checkpoint
    if cp is None:
        windowed = args.n is not None or args.max_tokens is not None
        run.line(
            f"no checkpoint: {'the newest turns up to now' if windowed else 'the whole history'}"
        )
    else:
        run.line(f"checkpoint {cp.checkpoint_id} at turn {cp.turn_seq} ({when(cp.created_at)})")
        run.line(f"state: {abbrev(dumps(cp.state, indent=None), 200)}")
    printer = TurnPrinter(run.out, full=False)
    printer.header()
    for t in got.turns:
        printer.turn(t)
    if note is not None:
        run.line(note)
    return 0


COMMANDS = (
    cmd_checkpoints,
    cmd_restore,
)
