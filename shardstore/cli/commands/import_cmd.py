"""``shardstore import single-row|langgraph|jsonl``: move conversations in from a table
with one row per conversation, from LangGraph's PostgresSaver tables, or from a
``shardstore export`` file. (``import`` is a Python keyword, hence the module name.)"""

from __future__ import annotations

import os
import sys
from typing import Any

from ...importers import ImportReport, directory
from ...importers.report import records_text
from ..app import Commands, Runner
from ..args import positive_int
from ..output import num, printable, size


def _progress(run: Runner) -> bool:
    """A bar on stderr unless --quiet, and only at a terminal."""
    return not run.args.quiet and run.err.isatty()


def _print(run: Runner, report: ImportReport) -> int:
    if run.json:
        run.emit(report.to_json())
        return 0
    rate = report.turns / report.seconds if report.seconds > 0 else 0.0
    run.line(
        f"imported {num(report.sessions)} session{'s' if report.sessions != 1 else ''}, "
        f"{num(report.turns)} turns ({size(report.bytes)}) in {report.seconds:.1f} s "
        f"({num(round(rate))} turns/s); {num(report.unchanged)} already complete, "
        f"{num(len(report.skipped))} skipped"
    )
    records = records_text(report)
    if records:
        run.line(f"  with {records}")
    for skipped in report.skipped:
        run.line(f"  skipped {printable(skipped.source)}: {printable(skipped.reason)}")
    return 0


def _import(run: Runner, method: str, *args: Any, **options: Any) -> int:
    """Run the store's import ``method`` with the options every source shares (--batch,
    --on-error, the progress bar) and print its report."""
    with run.connect() as store:
        report = getattr(store, method)(
            *args,
            batch_size=run.args.batch,
            on_error=run.args.on_error,
            progress=_progress(run),
            **options,
        )
    return _print(run, report)


def cmd_single_row(run: Runner) -> int:
    """Import every row of --table as a session; prints the report; 0 on success."""
    a = run.args
    return _import(
        run,
        "import_single_row",
        a.source_dsn,
        a.table,
        id_column=a.id_column,
        history_column=a.history_column,
        tenant_id=a.tenant,
        tenant_column=a.tenant_column,
        subject_column=a.subject_column,
        created_column=a.created_column,
        messages_key=a.messages_key,
    )


def cmd_langgraph(run: Runner) -> int:
    """Import LangGraph threads (all, or each --thread); prints the report; 0 on success."""
    a = run.args
    return _import(
        run,
        "import_langgraph",
        a.source_dsn,
        tenant_id=a.tenant,
        thread_id=a.thread or None,
        channel=a.channel,
    )


def cmd_jsonl(run: Runner) -> int:
    """Import a ``shardstore export`` file (``-``: stdin), or every file of an ``export
    --all`` directory; prints the report of each; 0 on success."""
    a = run.args
    if a.file != "-" and os.path.isdir(a.file):
        # an 'export --all' directory: each tenant's file, in its manifest's order
        status = 0
        for path in directory.manifest_files(a.file):
            status = max(status, _jsonl_source(run, path))
        return status
    return _jsonl_source(run, sys.stdin if a.file == "-" else a.file)


def _jsonl_source(run: Runner, source: Any) -> int:
    a = run.args
    return _import(
        run,
        "import_jsonl",
        source,
        on_existing=a.on_existing,
        remap_ids=a.remap_ids,
        import_id=a.import_id,
    )


def _common(p: Any, *, on_error: bool = True) -> None:
    p.add_argument(
        "--batch",
        type=positive_int,
        default=500,
        metavar="N",
        help="turns per statement (default 500)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    if on_error:
        p.add_argument(
            "--on-error",
            choices=("raise", "skip"),
            default="raise",
            help="a source that cannot be imported stops the run (raise, the "
            "default) or is reported and skipped (skip)",
        )


def register(commands: Commands) -> None:
    """Add ``import`` and its sources."""
    p = commands.add("import", "move conversations in (single-row table, LangGraph, JSONL)")
    sources = commands.nested(p, "source", metavar="SOURCE")

    s = sources.add("single-row", "import a table holding one row per conversation", cmd_single_row)
    s.add_argument(
        "--source-dsn", required=True, metavar="DSN", help="the database holding the table"
    )
    s.add_argument("--table", required=True, help="the table (or schema.table)")
    s.add_argument("--id-column", required=True, metavar="C")
    s.add_argument(
        "--history-column",
        required=True,
        metavar="C",
        help="a JSON array of messages, or an object holding one under --messages-key",
    )
    tenant = s.add_mutually_exclusive_group(required=True)
    tenant.add_argument("--tenant", metavar="T", help="the tenant of every row")
    tenant.add_argument("--tenant-column", metavar="C", help="each row's tenant")
    s.add_argument("--subject-column", metavar="C")
    s.add_argument("--created-column", metavar="C", help="the session's created_at")
    s.add_argument(
        "--messages-key",
        default="messages",
        metavar="KEY",
        help="the array's key when the history is an object (default messages)",
    )
    _common(s)

    g = sources.add(
        "langgraph", "import LangGraph threads from PostgresSaver tables", cmd_langgraph
    )
    g.add_argument(
        "--source-dsn", required=True, metavar="DSN", help="the database PostgresSaver writes to"
    )
    g.add_argument("--tenant", required=True, metavar="T")
    g.add_argument(
        "--thread",
        action="append",
        metavar="ID",
        help="import this thread only (repeatable; default every thread)",
    )
    g.add_argument("--channel", default="messages", help="the messages channel")
    _common(g)

    j = sources.add("jsonl", "import a 'shardstore export' file", cmd_jsonl)
    j.add_argument(
        "file", metavar="FILE", help="the file, - for stdin, or an 'export --all' directory"
    )
    j.add_argument(
        "--on-existing",
        choices=("refuse", "skip"),
        default="refuse",
        help="a session this database has already: stop (refuse, the default) "
        "or leave it and go on (skip)",
    )
    j.add_argument(
        "--remap-ids",
        action="store_true",
        help="import beside existing data: new session, checkpoint, run and fact ids, "
        "derived from the file's export id (or --import-id), so a re-run writes nothing twice",
    )
    j.add_argument(
        "--import-id",
        metavar="ID",
        help="with --remap-ids: what the new ids derive from (needed for files without an "
        "export line; give the same ID again to resume)",
    )
    _common(j)
