"""``shardstore maintain``: one partition maintenance run (registered by
shardstore.cli.build_parser; ``python -m partition_manager`` runs the same command).

Exit status: 0 when the run left the current partition and ``--premake`` ahead attached and
no step failed, and also when another run held the maintenance lock ("already running": that
run is the one to judge); 3 when the run finished unhealthy (fewer partitions ahead than
``--premake``, or a step failed: see the report's errors); 2 for bad usage or when the
database cannot be reached; 1 for an unexpected failure.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from partition_manager.runner import format_report

from .errors import ConfigurationError
from .settings import Settings, parse_interval

if TYPE_CHECKING:
    from .cli import Runner

EXIT_UNHEALTHY = 3


def _interval(text: str) -> timedelta:
    try:
        return parse_interval(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _lock_timeout(text: str) -> timedelta:
    value = text.strip().lower()
    try:
        if value.endswith("ms"):
            return timedelta(milliseconds=float(value[:-2]))
        return timedelta(seconds=float(value.rstrip("s")))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read lock timeout {text!r}; write e.g. '200ms' or '1.5s'"
        ) from None


def _premake(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1000: {value}")
    return value


def cmd_maintain(run: Runner) -> int:
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
        return 0
    return EXIT_UNHEALTHY


def register(command: Callable[..., Any]) -> None:
    """Add this module's subcommands with ``command(name, handler, help) -> parser``."""
    p = command(
        "maintain",
        cmd_maintain,
        "partition maintenance: create partitions ahead, fold idle sessions' buffers, apply "
        "retention, embed new chunks (exit 3 when fewer than --premake partitions are ahead "
        "afterwards)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan; change nothing, take no lock"
    )
    p.add_argument(
        "--premake",
        type=_premake,
        default=None,
        metavar="N",
        help="partitions kept ready ahead of the current one (default 4)",
    )
    p.add_argument(
        "--retention",
        type=_interval,
        default=None,
        metavar="INTERVAL",
        help="drop partitions (and sessions, buffered turns) older than this, e.g. '90 days' "
        "(default: keep everything)",
    )
    p.add_argument(
        "--flush-idle",
        type=_interval,
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
        type=_lock_timeout,
        default=timedelta(seconds=1),
        metavar="DURATION",
        help="longest wait for any lock, e.g. '200ms', '2s' (default 1s); writers never "
        "queue behind maintenance for longer",
    )
