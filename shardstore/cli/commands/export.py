"""``shardstore export (SESSION_ID... | --tenant T | --subject S) [-o FILE]
[--no-artifact-bytes] [--report FILE.md | --report -]``: sessions, their state, artifacts
and facts as JSONL (the format of :mod:`shardstore.importers.jsonl`, docs/portability.md),
for ``shardstore import jsonl``; ``--report`` adds a Markdown summary (for ``--subject``, an
access report)."""

from __future__ import annotations

import io
import sys

from ...importers.report import records_text
from ..app import Commands, Runner
from ..args import UsageError
from ..output import dumps, num, printable, size


def cmd_export(run: Runner) -> int:
    """Write the sessions to -o FILE (default stdout); the summary goes to stdout, or to
    stderr when the sessions do; 0 on success."""
    a = run.args
    if not a.session_ids and a.tenant is None and a.subject is None:
        raise UsageError("name the sessions: SESSION_ID..., --tenant or --subject")
    to_stdout = a.output in (None, "-")
    out = sys.stdout if to_stdout else a.output
    printed = io.StringIO() if a.report == "-" else None
    with run.connect() as store:
        report = store.export_sessions(
            a.session_ids or None,
            tenant_id=a.tenant,
            subject_id=a.subject,
            out=out,
            progress=not a.quiet and run.err.isatty(),
            no_artifact_bytes=a.no_artifact_bytes,
            report=printed if printed is not None else a.report,
        )
    summary = run.err if to_stdout else run.out
    if printed is not None:  # the Markdown report, where the summary goes
        print(printed.getvalue(), end="", file=summary)
    if run.json:
        print(dumps(report.to_json()), file=summary)
    elif not (to_stdout and a.quiet):
        # the path as argv gave it may hold lone surrogates (bytes that are not UTF-8)
        where = "stdout" if to_stdout else printable(a.output)
        print(
            f"exported {num(report.sessions)} session{'s' if report.sessions != 1 else ''}, "
            f"{num(report.turns)} turns ({size(report.bytes)}) to {where}; "
            + records_text(report, every=True),
            file=summary,
        )
    return 0


def register(commands: Commands) -> None:
    """Add ``export``."""
    p = commands.add(
        "export", "write sessions as JSONL (for 'shardstore import jsonl')", cmd_export
    )
    p.add_argument("session_ids", nargs="*", metavar="SESSION_ID")
    p.add_argument("--tenant", metavar="T", help="every live session of this tenant")
    p.add_argument("--subject", metavar="S", help="every live session of this subject")
    p.add_argument("-o", "--output", metavar="FILE", help="the file (default stdout)")
    p.add_argument(
        "--no-artifact-bytes",
        action="store_true",
        help="describe the artifacts the sessions reference, without their bytes",
    )
    p.add_argument(
        "--report",
        metavar="FILE.md",
        help="also write a Markdown summary of what was exported (with --subject: an "
        "access report of everything held about the subject); - prints it",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
