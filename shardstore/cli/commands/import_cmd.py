"""``shardstore import single-row|langgraph|jsonl``: move conversations in from a table
with one row per conversation, from LangGraph's PostgresSaver tables, or from a
``shardstore export`` file. (``import`` is a Python keyword, hence the module name.)"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

from ...importers import ImportReport, directory
from ...importers.report import records_text
from ...store import Store
from ..app import Runner
from ..args import positive_int
from ..declare import arg, command, flag, group, one_of
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


#: The options every source takes (read by :func:`_import`).
COMMON_OPTIONS = (
    arg(
        "--batch",
        type=positive_int,
        default=500,
        metavar="N",
        help="turns per statement (default 500)",
    ),
    flag("--quiet", help="no progress bar"),
    arg(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="a source that cannot be imported stops the run (raise, the "
        "default) or is reported and skipped (skip)",
    ),
)


def _import(run: Runner, method: str, **given: Any) -> int:
    """Run the store's import ``method`` and print its report. Each parameter of the
    method that the command line holds is passed (a source's options are named as the
    parameters they set: ``--id-column`` is ``id_column``), with those ``given`` (the
    options named otherwise) and those every source shares (--batch, the progress bar)."""
    parameters = inspect.signature(getattr(Store, method)).parameters
    options = {n: getattr(run.args, n) for n in parameters if n not in given and n in run.args}
    with run.connect() as store:
        report = getattr(store, method)(
            **options, **given, batch_size=run.args.batch, progress=_progress(run)
        )
    return _print(run, report)


@command(
    "single-row",
    "import a table holding one row per conversation",
    arg("--source-dsn", required=True, metavar="DSN", help="the database holding the table"),
    arg("--table", required=True, help="the table (or schema.table)"),
    arg("--id-column", required=True, metavar="C"),
    arg(
        "--history-column",
        required=True,
        metavar="C",
        help="a JSON array of messages, or an object holding one under --messages-key",
    ),
    one_of(
        arg("--tenant", metavar="T", help="the tenant of every row"),
        arg("--tenant-column", metavar="C", help="each row's tenant"),
        required=True,
    ),
    arg("--subject-column", metavar="C"),
    arg("--created-column", metavar="C", help="the session's created_at"),
    arg(
        "--messages-key",
        default="messages",
        metavar="KEY",
        help="the array's key when the history is an object (default messages)",
    ),
    *COMMON_OPTIONS,
)
def cmd_single_row(run: Runner) -> int:
    """Import every row of --table as a session; prints the report; 0 on success."""
    return _import(run, "import_single_row", tenant_id=run.args.tenant)


@command(
    "langgraph",
    "import LangGraph threads from PostgresSaver tables",
    arg("--source-dsn", required=True, metavar="DSN", help="the database PostgresSaver writes to"),
    arg("--tenant", required=True, metavar="T"),
    arg(
        "--thread",
        action="append",
        metavar="ID",
        help="import this thread only (repeatable; default every thread)",
    ),
    arg("--channel", default="messages", help="the messages channel"),
    *COMMON_OPTIONS,
)
def cmd_langgraph(run: Runner) -> int:
    """Import LangGraph threads (all, or each --thread); prints the report; 0 on success."""
    return _import(run, "import_langgraph", tenant_id=run.args.tenant, thread_id=run.args.thread)


@command(
    "jsonl",
    "import a 'shardstore export' file",
    arg("file", metavar="FILE", help="the file, - for stdin, or an 'export --all' directory"),
    arg(
        "--on-existing",
        choices=("refuse", "skip"),
        default="refuse",
        help="a session this database has already: stop (refuse, the default) "
        "or leave it and go on (skip)",
    ),
    flag(
        "--remap-ids",
        help="import beside existing data: new session, checkpoint, run and fact ids, "
        "derived from the file's export id (or --import-id), so a re-run writes nothing twice",
    ),
    arg(
        "--import-id",
        metavar="ID",
        help="with --remap-ids: what the new ids derive from (needed for files without an "
        "export line; give the same ID again to resume)",
    ),
    *COMMON_OPTIONS,
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
    return _import(run, "import_jsonl", source=source)


COMMANDS = (
    group(
        "import",
        "move conversations in (single-row table, LangGraph, JSONL)",
        subcommands=(cmd_single_row, cmd_langgraph, cmd_jsonl),
        dest="source",
        metavar="SOURCE",
    ),
)
