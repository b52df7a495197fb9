"""``shardstore export (SESSION_ID... | --tenant T | --subject S) [-o FILE]
[--no-artifact-bytes] [--report FILE.md | --report -] [--decrypt]``: sessions, their state,
artifacts and facts as JSONL (the format of :mod:`shardstore.importers.jsonl`,
docs/portability.md), for ``shardstore import jsonl``; ``--report`` adds a Markdown summary
(for ``--subject``, an access report). ``export --all -o DIR``: every tenant, a file each,
and a manifest. With encryption at rest the file carries the sealed values; ``--decrypt``
(which needs the key store) writes their plaintext, with a warning on stderr."""

from __future__ import annotations

import io
import os
import sys
from typing import Any

from ...importers import directory
from ...importers.report import records_text
from ..app import Runner
from ..args import UsageError
from ..declare import arg, command, flag
from ..output import dumps, num, printable, size


@command(
    "export",
    "write sessions as JSONL (for 'shardstore import jsonl')",
    arg("session_ids", nargs="*", metavar="SESSION_ID"),
    arg("--tenant", metavar="T", help="every live session of this tenant"),
    arg("--subject", metavar="S", help="every live session of this subject"),
    arg("-o", "--output", metavar="FILE", help="the file (default stdout)"),
    flag(
        "--no-artifact-bytes",
        help="describe the artifacts the sessions reference, without their bytes",
    ),
    arg(
        "--report",
        metavar="FILE.md",
        help="also write a Markdown summary of what was exported (with --subject: an "
        "access report of everything held about the subject); - prints it",
    ),
    flag("--quiet", help="no progress bar"),
    flag(
        "--decrypt",
        help="encryption at rest: write the plaintext of encrypted values (needs the key "
        "store; the file then needs none to import, and holds the data in clear); without "
        "it the file carries them encrypted",
    ),
    flag(
        "--all",
        help="every tenant: a file each in the new or empty directory -o DIR, with a "
        f"{directory.MANIFEST} ('shardstore import jsonl DIR' reads it back)",
    ),
)
def cmd_export(run: Runner) -> int:
    """Write the sessions to -o FILE (default stdout); the summary goes to stdout, or to
    stderr when the sessions do; 0 on success."""
    a = run.args
    if a.all:
        return _export_all(run)
    if not a.session_ids and a.tenant is None and a.subject is None:
        raise UsageError("name the sessions: SESSION_ID..., --tenant, --subject or --all")
    to_stdout = a.output in (None, "-")
    out = sys.stdout if to_stdout else a.output
    printed = io.StringIO() if a.report == "-" else None
    _need_keys(run)
    with run.connect() as store:
        report = store.export_sessions(
            a.session_ids or None,
            tenant_id=a.tenant,
            subject_id=a.subject,
            out=out,
            progress=not a.quiet and run.err.isatty(),
            no_artifact_bytes=a.no_artifact_bytes,
            report=printed if printed is not None else a.report,
            decrypt=a.decrypt,
        )
    _warn_plaintext(run, "stdout" if to_stdout else printable(a.output))
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


_LIST_PAGE = 1000


def _need_keys(run: Runner) -> None:
    """--decrypt without a key store: refused before anything is written."""
    if run.args.decrypt and run.key_store is None:
        raise UsageError(
            "--decrypt opens encrypted values: give the key store (--key-store PATH or "
            "$SHARDSTORE_KEY_STORE)"
        )


def _warn_plaintext(run: Runner, where: str) -> None:
    """One line on stderr after a --decrypt export: what it wrote is plaintext."""
    if run.args.decrypt:
        print(
            f"warning: {where} holds the plaintext of encrypted values (--decrypt): protect "
            "it as the data itself, and delete it when done",
            file=run.err,
        )


def _tenants(store: Any) -> list[str]:
    """Every tenant with a live session, sorted (the sessions listed a page at a time)."""
    tenants: set[str] = set()
    before = None
    while True:
        page = store.sessions(before=before, limit=_LIST_PAGE)
        tenants.update(info.tenant_id for info in page)
        if len(page) < _LIST_PAGE:
            return sorted(tenants)
        before = page[-1]


def _export_all(run: Runner) -> int:
    """Every tenant's export (as ``--tenant``) into its own file of the new or empty
    directory -o DIR, and the manifest last (:mod:`shardstore.importers.directory`)."""
    a = run.args
    if a.session_ids or a.tenant is not None or a.subject is not None or a.report is not None:
        raise UsageError(
            "--all exports every tenant: give no sessions, --tenant, --subject or --report"
        )
    if a.output in (None, "-"):
        raise UsageError("--all writes a file per tenant: name a new or empty directory, -o DIR")
    try:
        os.makedirs(a.output, exist_ok=True)
        if os.listdir(a.output):
            raise UsageError(
                f"{printable(a.output)} is not empty: -o needs a new or empty directory"
            )
    except OSError as exc:
        raise UsageError(
            f"cannot use {printable(a.output)} as the directory: {exc.strerror}"
        ) from None
    except ValueError as exc:  # a NUL in the path
        raise UsageError(f"cannot use {printable(a.output)} as the directory: {exc}") from None
    entries: list[dict[str, Any]] = []
    sessions = turns = 0
    _need_keys(run)
    with run.connect() as store:
        for number, tenant in enumerate(_tenants(store), 1):
            name = directory.tenant_file(number)
            report = store.export_sessions(
                tenant_id=tenant,
                out=os.path.join(a.output, name),
                progress=not a.quiet and run.err.isatty(),
                no_artifact_bytes=a.no_artifact_bytes,
                decrypt=a.decrypt,
            )
            entries.append({"tenant_id": tenant, "file": name, **report.to_json()})
            sessions += report.sessions
            turns += report.turns
    directory.write_manifest(a.output, entries)
    _warn_plaintext(run, printable(a.output))
    if run.json:
        run.emit(
            {"directory": a.output, "tenants": len(entries), "sessions": sessions, "turns": turns}
        )
    else:
        run.line(
            f"exported {num(len(entries))} tenant{'s' if len(entries) != 1 else ''}, "
            f"{num(sessions)} sessions, {num(turns)} turns to {printable(a.output)} "
            f"(a file each, and {directory.MANIFEST})"
        )
    return 0


COMMANDS = (cmd_export,)
