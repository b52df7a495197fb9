"""``shardstore fork SESSION [--at N | --checkpoint ID]``: a new session sharing a history."""

from __future__ import annotations

from ..app import Runner
from ..declare import arg, command, one_of


def _at(text: str) -> int:
    """A fork point: an int >= -1 (-1: fork with an empty history)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= -1, not {text!r}") from None
    if value < -1:
        raise argparse.ArgumentTypeError(f"expected an int >= -1, not {value}")
    return value


@command(
    "fork",
    "a new session whose history is a session's turns up to N (shared)",
    arg("session_id", metavar="SESSION"),
    one_of(
        arg(
            "--at",
            metavar="N",
            type=_at,
            help="the last inherited turn_seq (-1: none)",
        ),
        arg("--checkpoint", metavar="ID", help="fork at this checkpoint's position"),
    ),
    arg("--new-session", metavar="ID", help="the new session's id"),
)
def cmd_fork(run: Runner) -> int:
    """Fork the session (at ``--at`` or ``--checkpoint``, else at its last turn) and print
    the new session's id; 0 on success."""
    args = run.args
    with run.connect() as store:
        child = store.fork(
            args.session_id,
            at_turn_seq=args.at,
            checkpoint_id=args.checkpoint,
            new_session_id=args.new_session,
        )
        turns = store.session(child).turn_count
    if run.json:
        run.emit({"session_id": str(child), "parent": args.session_id, "turn_count": turns})
    else:
        run.line(str(child))
    return 0


COMMANDS = (cmd_fork,)
