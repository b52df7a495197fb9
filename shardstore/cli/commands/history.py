"""``shardstore append``, ``tail``, ``history`` and ``chunks``: writing and reading a
session's turns."""

from __future__ import annotations

import sys
from typing import Any

from ..app import Runner
from ..args import UsageError, non_negative_int, parse_json, positive_int, read_stdin
from ..declare import arg, command, flag
from ..output import (
    TurnPrinter,
    append_json,
    chunk_json,
    dumps,
    format_chunks,
    held_back_json,
    held_back_text,
    num,
    turn_json,
)

#: The session every command here reads or writes.
SESSION = arg("session_id", metavar="SESSION_ID")
#: Turns are shown one line each, their messages cut, unless this is given.
WHOLE_MESSAGES = flag("--full", help="print whole messages")


@command(
    "append",
    "append a message (a JSON object; a JSON array appends several atomically)",
    SESSION,
    arg(
        "message",
        metavar="MESSAGE_JSON",
        nargs="?",
        help="the message as JSON; '-' or nothing reads it from stdin",
    ),
    arg("--key", help="idempotency key (for an array, KEY/0, KEY/1, ...)"),
    arg("--role", help="with --content: build {role, content} (default role 'user')"),
    arg("--content", metavar="TEXT", help="message text (instead of MESSAGE_JSON)"),
)
def cmd_append(run: Runner) -> int:
    """Append one message (a JSON object) or several atomically (a JSON array), from the
    argument, stdin or ``--role``/``--content``; 0 on success (duplicates included)."""
    args = run.args
    if args.content is not None or args.role is not None:
        if args.message is not None:
            raise UsageError("give either MESSAGE_JSON or --role/--content, not both")
        if args.content is None:
            raise UsageError("--role needs --content")
        payload: Any = {"role": args.role or "user", "content": args.content}
    else:
        from_stdin = args.message in (None, "-")
        if from_stdin and sys.stdin.isatty():
            print(
                "reading the message from stdin: type a JSON object (or an array of them), "
                "then Ctrl-D (or pass MESSAGE_JSON, or --content TEXT)",
                file=run.err,
            )
        text = read_stdin("the message") if from_stdin else args.message
        if not text.strip():
            raise UsageError("no message given (pass MESSAGE_JSON, '-' for stdin, or --content)")
        payload = parse_json(text, "the message")
    with run.connect() as store:
        if isinstance(payload, list):
            keys = None if args.key is None else [f"{args.key}/{i}" for i in range(len(payload))]
            results = store.append_turns(args.session_id, payload, keys)
        else:
            results = [store.append_turn(args.session_id, payload, args.key)]
    if run.json:
        docs = [append_json(r) for r in results]
        run.emit(docs if isinstance(payload, list) else docs[0])
        return 0
    if not results:
        run.line("appended nothing: the array is empty")
    for r in results:
        note = "  (duplicate: already stored, nothing written)" if r.duplicate else ""
        run.line(f"turn {r.turn_seq}  chunk {r.chunk_seq}  {num(r.tokens)} tokens{note}")
    return 0


@command(
    "tail",
    "show the newest turns, oldest first",
    SESSION,
    arg("-n", type=positive_int, metavar="N", help="at most N turns"),
    arg("--max-tokens", type=positive_int, metavar="M", help="at most M tokens"),
    WHOLE_MESSAGES,
    flag(
        "--show-held",
        help="also print the turns the window held back (a tool result whose call is "
        "outside it, or a newest turn over --max-tokens)",
    ),
)
def cmd_tail(run: Runner) -> int:
    """Print the newest turns (``-n``, ``--max-tokens``), oldest first, then why turns were
    held back if any were (``--show-held`` prints them too); 0 on success."""
    args = run.args
    with run.connect() as store:
        window = store.tail_explained(args.session_id, n=args.n, max_tokens=args.max_tokens)
    note = held_back_text(window, shown=args.show_held)
    if run.json:
        doc = {
            "session_id": args.session_id,
            "turns": [turn_json(t) for t in window.turns],
            "held_back": held_back_json(window, turns=args.show_held),
        }
        run.emit(doc)
        if note is not None and run.err.isatty():
            print(note, file=run.err)
        return 0
    printer = TurnPrinter(run.out, full=args.full)
    printer.header()
    shown = sorted([*window.held_back, *window.turns], key=lambda t: t.turn_seq)
    for t in shown if args.show_held else window.turns:
        printer.turn(t)
    if note is not None:
        run.line(note)
    return 0


@command(
    "history",
    "stream turns FROM <= turn < TO in order (--json: one JSON object per line)",
    SESSION,
    arg("--from", dest="from_seq", type=non_negative_int, default=0, metavar="N"),
    arg("--to", dest="to_seq", type=non_negative_int, metavar="N"),
    WHOLE_MESSAGES,
)
def cmd_history(run: Runner) -> int:
    """Stream turns ``--from <= turn_seq < --to`` in order as they are read (``--json``:
    one JSON object per line); 0 on success. ``--from`` past ``--to`` is a usage error
    (exit 2), not an empty answer."""
    if run.args.to_seq is not None and run.args.from_seq > run.args.to_seq:
        raise UsageError(
            f"--from {run.args.from_seq} is past --to {run.args.to_seq}: the range "
            "FROM <= turn < TO is empty (--to is the first turn not shown)"
        )
    with run.connect() as store:
        printer = TurnPrinter(run.out, full=run.args.full)
        turns = store.history(run.args.session_id, run.args.from_seq, run.args.to_seq)
        try:
            for t in turns:
                if run.json:
                    print(dumps(turn_json(t), indent=None), file=run.out)
                else:
                    printer.turn(t)
        finally:
            close = getattr(turns, "close", None)
            if close is not None:
                close()
        if not run.json:
            printer.header()  # an empty range still shows the header
    return 0


@command(
    "chunks",
    "show a session's chunks, oldest first",
    SESSION,
    arg("--last", type=positive_int, metavar="N", help="only the N newest chunks"),
)
def cmd_chunks(run: Runner) -> int:
    """Print a session's chunks (``--last N``: the newest N), oldest first; 0 on success."""
    with run.connect() as store:
        chunks = store.chunks(run.args.session_id, last=run.args.last)
    if run.json:
        run.emit({"session_id": run.args.session_id, "chunks": [chunk_json(c) for c in chunks]})
    else:
        run.line(format_chunks(chunks))
    return 0


COMMANDS = (
    cmd_append,
    cmd_tail,
    cmd_history,
    cmd_chunks,
)
