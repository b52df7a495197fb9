"""``shardstore summarize --command CMD``: summarise queued sealed chunks with an external
command (your model): it reads the chunk's turns as JSON on stdin and writes the summary
on stdout."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence

from ...errors import ConfigurationError
from ...models import Turn
from ..app import Runner
from ..args import positive_int
from ..declare import arg, command, one_of
from ..output import json_default


class CommandSummarizer:
    """A summarizer that runs a shell command per chunk: stdin gets
    ``[{"turn_seq", "created_at", "message"}, ...]`` (oldest first), stdout is the summary.
    A command that fails, times out or prints nothing raises ``ConfigurationError`` (the
    chunk stays queued)."""

    def __init__(self, command: str, timeout: float) -> None:
        self.command = command
        self.timeout = timeout
        self.model = f"command:{command}"

    def __call__(self, turns: Sequence[Turn]) -> str:
        payload = json.dumps(
            [
                {"turn_seq": t.turn_seq, "created_at": t.created_at, "message": t.message}
                for t in turns
            ],
            default=json_default,
            ensure_ascii=False,
        )
        try:
            done = subprocess.run(  # the user's own command, as archive hooks are
                self.command,
                shell=True,
                input=payload,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ConfigurationError(
                f"the summarizer command ran longer than {self.timeout:g} s"
            ) from None
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or [""]
            raise ConfigurationError(
                f"the summarizer command exited with status {done.returncode}: {tail[0][:300]}"
            )
        if not done.stdout.strip():
            raise ConfigurationError("the summarizer command printed no summary")
        return done.stdout


@command(
    "summarize",
    "summarise sealed chunks with your model (a command: turns as JSON in, text out)",
    arg(
        "--command",
        required=True,
        metavar="CMD",
        help="shell command: reads the chunk's turns as JSON on stdin, prints the summary",
    ),
    one_of(
        arg("--session", metavar="SESSION_ID", help="only this session"),
        arg("--tenant", metavar="TENANT", help="only this tenant's sessions"),
    ),
    arg("--limit", type=positive_int, metavar="N", help="stop after N summaries"),
    arg("--timeout", type=positive_int, default=300, metavar="SECONDS", help="per chunk (300)"),
)
def cmd_summarize(run: Runner) -> int:
    """Summarise queued sealed chunks (of ``--session``, or ``--tenant``'s sessions, else
    every session; at most ``--limit``) with ``--command`` and print how many; 0 on
    success."""
    args = run.args
    summarizer = CommandSummarizer(args.command, args.timeout)
    progress = not run.json and run.err.isatty()
    with run.connect() as store:
        done = store.summarize(
            summarizer,
            session_id=args.session,
            tenant_id=args.tenant,
            limit=args.limit,
            progress=progress,
        )
    if run.json:
        run.emit({"summarized": done})
    elif done:
        run.line(f"summarized {done} chunk{'s' if done != 1 else ''}")
    else:
        run.line(
            "nothing to summarize: every queued chunk has its summary (sealed chunks are"
            " queued when they fold; a session's newest wait for 'shardstore maintain')"
        )
    return 0


COMMANDS = (cmd_summarize,)
