"""``shardstore checkpoints`` and ``shardstore restore``: an agent's checkpoints and what a
restart would resume from."""

from __future__ import annotations

from collections.abc import Sequence

from ...state.checkpoints import Checkpoint
from ..app import Commands, Runner
from ..args import UsageError, positive_int
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


def cmd_restore(run: Runner) -> int:
    """Print the checkpoint a restart resumes from (the newest, or ``--checkpoint``) and
    the history up to its position (all of it, or ``--n`` / ``--max-tokens``); 0 on
    success."""
    args = run.args
    if args.n is not None and args.max_tokens is not None:
        raise UsageError("give --n or --max-tokens, not both")
    with run.connect() as store:
        got = store.restore(args.session_id, args.checkpoint, n=args.n, max_tokens=args.max_tokens)
    if run.json:
        run.emit(
            {
                "session_id": args.session_id,
                "checkpoint": None if got.checkpoint is None else checkpoint_json(got.checkpoint),
                "turns": [turn_json(t) for t in got.turns],
            }
        )
        return 0
    cp = got.checkpoint
    if cp is None:
        run.line("no checkpoint: the whole history")
    else:
        run.line(f"checkpoint {cp.checkpoint_id} at turn {cp.turn_seq} ({when(cp.created_at)})")
        run.line(f"state: {abbrev(dumps(cp.state, indent=None), 200)}")
    printer = TurnPrinter(run.out, full=False)
    printer.header()
    for t in got.turns:
        printer.turn(t)
    return 0


def register(commands: Commands) -> None:
    """Add ``checkpoints`` and ``restore``."""
    p = commands.add("checkpoints", "list a session's checkpoints, newest first", cmd_checkpoints)
    p.add_argument("session_id", metavar="SESSION")
    p.add_argument("--limit", type=positive_int, help="at most this many checkpoints")
    p = commands.add(
        "restore", "show the checkpoint and history a restart resumes from", cmd_restore
    )
    p.add_argument("session_id", metavar="SESSION")
    p.add_argument("--checkpoint", metavar="ID", help="this checkpoint instead of the newest")
    p.add_argument("--n", type=positive_int, help="only the newest N turns up to it")
    p.add_argument("--max-tokens", type=positive_int, help="only the newest turns within T tokens")
