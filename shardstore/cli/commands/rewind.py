"""``shardstore rewind SESSION --to N``: remove a session's turns from N on."""

from __future__ import annotations

from ..app import Runner
from ..args import non_negative_int
from ..declare import arg, command


@command(
    "rewind",
    "remove a session's turns from turn N on (retry or edit a reply)",
    arg("session_id", metavar="SESSION"),
    arg(
        "--to",
        metavar="N",
        type=non_negative_int,
        required=True,
        help="the first turn_seq to remove; the next append gets it",
    ),
)
def cmd_rewind(run: Runner) -> int:
    """Remove the session's turns from ``--to`` on (its next turn gets turn_seq N) and
    print how many went; 0 on success."""
    args = run.args
    with run.connect() as store:
        removed = store.rewind(args.session_id, args.to)
    if run.json:
        run.emit({"session_id": args.session_id, "to_turn_seq": args.to, "removed": removed})
    elif removed:
        run.line(f"removed {removed} turn{'s' if removed != 1 else ''}; next turn_seq {args.to}")
    else:
        # nothing removed: --to is the write head (a --to past it is refused)
        run.line(f"nothing to remove: the session has {args.to} turn{'s' if args.to != 1 else ''}")
    return 0


COMMANDS = (cmd_rewind,)
