"""``shardstore maintain``: one partition maintenance run (``python -m partition_manager``
runs the same command).

Exit status: 0 when the run left the current partition and ``--premake`` ahead attached and
no step failed, and also when another run held the maintenance lock ("already running": that
run is the one to judge); 3 when the run finished unhealthy (fewer partitions ahead than
``--premake``, or a step failed: see the report's errors); 2 for bad usage or when the
database cannot be reached; 1 for an unexpected failure.
"""

from __future__ import annotations

from datetime import timedelta

from partition_manager.runner import format_report

from ...settings import Settings
from ..app import EXIT_OK, EXIT_UNHEALTHY, Commands, Runner
from ..args import int_between, interval, lock_timeout


def cmd_maintain(run: Runner) -> int:
    """Run one maintenance pass and print its report; the exit status is as the module
    says (0 healthy or already running, 3 unhealthy)."""
    args = run.args
    # connect() premakes too: keep that to the current partition, so that the run (and a dry
    # run's plan) is what does and reports the rest
    with run.connect(premake=0) as store:
        report = store.maintain(
            dry_run=args.dry_run,
            premake=Settings().premake if args.premake is None else args.premake,
            retention=args.retention,
            flush_idle=args.flush_idle,
            lock_timeout=args.lock_timeout,
            archive=args.archive_command,
            embed=not args.no_embed,
        )
    if run.json:
        run.emit(report.to_json())
    else:
        run.line(format_report(report))
    if report.already_running or report.healthy:
        return EXIT_OK
    return EXIT_UNHEALTHY


def register(commands: Commands) -> None:
    """Add ``maintain``."""
    p = commands.add(
        "maintain",
        "partition maintenance: create partitions ahead, fold idle sessions' buffers, apply "
        "retention, embed new chunks (exit 3 when fewer than --premake partitions are ahead "
        "afterwards)",
        cmd_maintain,
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan; change nothing, take no lock"
    )
    p.add_argument(
        "--premake",
        type=int_between(0, 1000),
        default=None,
        metavar="N",
        help="partitions kept ready ahead of the current one (default 4)",
    )
    p.add_argument(
        "--retention",
        type=interval,
        default=None,
        metavar="INTERVAL",
        help="drop partitions (and sessions, buffered turns) older than this, e.g. '90 days' "
        "(default: keep everything)",
    )
    p.add_argument(
        "--flush-idle",
        type=interval,
        default=timedelta(minutes=5),
        metavar="INTERVAL",
        help="fold the buffers of sessions without a turn for this long (default '5 minutes')",
    )
    p.add_argument(
        "--archive-command",
        default=None,
        metavar="CMD",
        help="shell command run for each expired partition before it is dropped; gets the "
        "detached table's name ({table}, else appended; also $SHARDSTORE_ARCHIVE_TABLE); "
        "non-zero exit keeps the table for the next run",
    )
    p.add_argument(
        "--no-embed",
        action="store_true",
        help="skip embedding queued chunks (done by default when a model is recorded)",
    )
    p.add_argument(
        "--lock-timeout",
        type=lock_timeout,
        default=timedelta(seconds=1),
        metavar="DURATION",
        help="longest wait for any lock, e.g. '200ms', '2s' (default 1s); writers never "
        "queue behind maintenance for longer",
    )
