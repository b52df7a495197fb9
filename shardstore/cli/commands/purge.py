"""``shardstore purge``: GDPR purge from the command line.

    shardstore purge session SESSION_ID [--shred --key-store P]
    shardstore purge subject --tenant T --subject S [--shred --key-store P]
    shardstore purge tenant --tenant T [--shred --key-store P]
    shardstore purge range SESSION_ID (--before-turn N | --before TIME)
    shardstore purge before TIME [--tenant T] [--no-truncate]

Every form takes ``--dry-run`` (report what would go, remove nothing), ``--vacuum`` (vacuum
what was touched), ``--yes`` (no confirmation prompt; the prompt only appears when stdin and
stderr are terminals) and the global options (``--json``, ``--dsn``, ``--connect-timeout``).
TIME is an ISO 8601 date or time (UTC unless it names a zone) or an age such as ``90 days``
(that long before now).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from ...errors import ConfigurationError
from ...lifecycle.purge import DEFAULT_BATCH_SIZE, PurgeReport
from ..app import Runner
from ..args import TIME_HELP, UsageError, non_negative_int, parse_time, positive_int
from ..declare import Arg, arg, command, flag, form, one_of
from ..output import format_table, kv, num, printable, size, when

#: What every purge form takes, first.
_EVERY_FORM = (
    flag("--dry-run", help="report what would go; remove nothing"),
    flag("--vacuum", help="VACUUM the tables touched"),
    flag("--yes", "-y", help="do not ask for confirmation"),
)
#: The session of ``purge session`` and ``purge range``.
_SESSION = arg("session_id", metavar="SESSION_ID")
#: What the forms that purge session by session take next.
_BATCHED = (
    arg(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"sessions per transaction (default {DEFAULT_BATCH_SIZE})",
    ),
    arg(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="progress bar on stderr (default: when stderr is a terminal)",
    ),
)


def _shred(whose: str) -> Arg:
    return flag(
        "--shred",
        help=f"first destroy {whose} (encryption at rest): every backup taken before holds "
        "only ciphertext nobody can open; needs the key store (the global --key-store PATH, "
        "or $SHARDSTORE_KEY_STORE)",
    )


#: ``purge``'s forms; :func:`cmd_purge` runs the one named.
PURGE_FORMS = (
    form(
        "session",
        "purge one session and leave its tombstone",
        *_EVERY_FORM,
        _SESSION,
        _shred("the session's own data key (a session without a subject)"),
    ),
    form(
        "subject",
        "purge every session of a data subject",
        *_EVERY_FORM,
        *_BATCHED,
        arg("--tenant", required=True, help="tenant id"),
        arg("--subject", required=True, help="subject id"),
        _shred("the subject's data key"),
    ),
    form(
        "tenant",
        "purge every session of a tenant",
        *_EVERY_FORM,
        *_BATCHED,
        arg("--tenant", required=True, help="tenant id"),
        _shred("every data key of the tenant (its subjects', sessions' and own)"),
    ),
    form(
        "range",
        "purge a session's oldest turns (the session stays live)",
        *_EVERY_FORM,
        _SESSION,
        one_of(
            arg(
                "--before-turn",
                type=non_negative_int,
                metavar="N",
                help="purge turns with turn_seq < N",
            ),
            arg("--before", metavar="TIME", help=f"purge turns written before TIME: {TIME_HELP}"),
            required=True,
        ),
    ),
    form(
        "before",
        "retention: purge every turn written before TIME (sessions stay live)",
        *_EVERY_FORM,
        *_BATCHED,
        arg("time", metavar="TIME", help=TIME_HELP),
        arg("--tenant", help="only this tenant's sessions"),
        flag(
            "--no-truncate", help="delete row by row even where whole partitions could be emptied"
        ),
    ),
)


def _describe(args: argparse.Namespace) -> str:
    kind = args.purge_kind
    if kind == "session":
        return f"session {printable(args.session_id)}"
    if kind == "subject":
        subject, tenant = printable(args.subject), printable(args.tenant)
        return f"every session of subject {subject!r} (tenant {tenant!r})"
    if kind == "tenant":
        return f"every session of tenant {printable(args.tenant)!r}"
    if kind == "range":
        cut = f"turn {args.before_turn}" if args.before_turn is not None else printable(args.before)
        return f"the turns of session {printable(args.session_id)} before {cut}"
    scope = f" of tenant {printable(args.tenant)!r}" if args.tenant else ""
    return f"every turn{scope} written before {printable(args.time)}"


def _confirm(run: Runner) -> bool:
    args = run.args
    if args.dry_run or args.yes:
        return True
    if not (sys.stdin.isatty() and run.err.isatty()):
        # a script, a cron job or a pipe cannot answer: it must say --yes
        raise UsageError(
            f"purge {_describe(args)} cannot be undone: without a terminal to confirm at, "
            "give --yes (or --dry-run to see what it would remove)"
        )
    print(f"Purge {_describe(args)}? This cannot be undone. [y/N] ", end="", file=run.err)
    run.err.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


@command(
    "purge",
    "GDPR purge: remove sessions, a data subject, a tenant, a session's oldest turns, "
    "or everything older than a time, leaving tombstones",
    subcommands=PURGE_FORMS,
    dest="purge_kind",
)
def cmd_purge(run: Runner) -> int:
    """Run one purge form (after confirmation on a terminal) and print its report; 0 when
    it ran, 1 when the confirmation was declined (nothing purged)."""
    args = run.args
    kind = args.purge_kind
    before = parse_time(args.before) if kind == "range" and args.before is not None else None
    cutoff = parse_time(args.time) if kind == "before" else None
    if not _confirm(run):
        print("aborted: nothing was purged", file=run.err)
        return 1
    progress = getattr(args, "progress", None)
    show = run.err.isatty() if progress is None else bool(progress)
    common: dict[str, Any] = {"dry_run": args.dry_run, "vacuum": args.vacuum}
    if kind in ("session", "subject", "tenant") and args.shred:
        if run.key_store is None:
            raise ConfigurationError("--shred needs --key-store PATH (or $SHARDSTORE_KEY_STORE)")
        common["shred"] = True
    with run.connect() as store:
        if kind == "session":
            report = store.purge_session(args.session_id, **common)
        elif kind == "subject":
            report = store.purge_subject(
                args.tenant, args.subject, batch_size=args.batch_size, progress=show, **common
            )
        elif kind == "tenant":
            report = store.purge_tenant(
                args.tenant, batch_size=args.batch_size, progress=show, **common
            )
        elif kind == "range":
            report = store.purge_range(
                args.session_id, before_turn_seq=args.before_turn, before=before, **common
            )
        else:
            assert cutoff is not None
            report = store.purge_before(
                cutoff,
                args.tenant,
                batch_size=args.batch_size,
                progress=show,
                truncate_partitions=not args.no_truncate,
                **common,
            )
    if run.json:
        doc = report.to_dict()
        if cutoff is not None:
            doc["before"] = cutoff.isoformat()
        run.emit(doc)
        return 0
    print_report(run, report, _describe(args), cutoff=cutoff or before)
    return 0


def print_report(
    run: Runner, report: PurgeReport, what: str, *, cutoff: datetime | None = None
) -> None:
    """The human form of a purge report: a headline naming ``what``, the absolute
    ``cutoff`` time when there is one (``purge before``, ``purge range --before``), a
    summary, and the per-table (and per-partition) rows and bytes. A session that was
    already purged is said to be so, with nothing else."""
    if report.kind == "session" and not report.session_ids:
        # purge_session raises SessionNotFound for an unknown id: this one is a tombstone
        head = "dry run: " if report.dry_run else ""
        run.line(f"{head}{what} was already purged: nothing left to remove")
        return
    head = "dry run, nothing removed: would purge" if report.dry_run else "purged"
    run.line(f"{head} {what}")
    run.line()
    pairs = []
    if cutoff is not None:
        pairs.append(("cutoff", f"turns written before {when(cutoff)} UTC"))
    pairs += [
        (
            "sessions",
            f"{num(report.sessions_affected)} affected"
            + (f", {num(report.tombstoned)} tombstoned" if report.tombstoned else ""),
        ),
        ("removed", f"{num(report.rows)} rows, {size(report.bytes)}"),
    ]
    if report.cut_turn_seq is not None:
        pairs.append(("history now", f"starts at turn {report.cut_turn_seq}"))
    if report.shredded_keys:
        pairs.append(("shredded", f"{num(len(report.shredded_keys))} data keys"))
    if report.partitions_truncated:
        pairs.append(("truncated", ", ".join(report.partitions_truncated)))
    if report.vacuumed:
        pairs.append(("vacuumed", f"{len(report.vacuumed)} tables"))
    batches = f"{report.batches} batch{'es' if report.batches != 1 else ''}"
    pairs.append(("took", f"{report.seconds:.2f} s in {batches}"))
    run.line(kv(pairs))
    run.line()
    rows = [
        [name, num(t.rows), num(t.rewritten), size(t.bytes)]
        for name, t in [*report.tables.items(), *report.partitions.items()]
    ]
    run.line(format_table(("table", "rows", "rewritten", "bytes"), rows, "lrrr"))


COMMANDS = (cmd_purge,)
