"""``shardstore maintain``: one partition maintenance run.

The embedding step embeds at most ``--max-embed`` chunks for at most ``--embed-seconds``
(300 s by default) and reports what it left queued; ``took`` is the whole run.

Exit status: 0 when the run left the current partition and ``--premake`` ahead attached and
no step failed, and also when another run held the maintenance lock ("already running": that
run is the one to judge); 3 when the run finished unhealthy (fewer partitions ahead than
``--premake``, or a step failed: see the report's errors); 2 for bad usage; 6 when the
database cannot be reached; 1 for an unexpected failure.
"""

from __future__ import annotations

import argparse
import math
from datetime import timedelta

from partition_manager.runner import format_report

from ...lifecycle.maintenance import MAX_EMBED_SECONDS
from ...settings import Settings
from ..app import EXIT_OK, EXIT_UNHEALTHY, Runner
from ..args import int_between, interval, lock_timeout, non_negative_int
from ..declare import arg, command, flag

#: ``--embed-seconds`` by default: a run every 10 minutes never overlaps the next one
DEFAULT_EMBED_SECONDS = 300.0


def embed_seconds(text: str) -> float:
    """``--embed-seconds``: seconds (``300``) or a duration (``'5 min'``, ``90s``) from 0
    (no time limit) to a day."""
    try:
        value = float(text)
    except ValueError:
        value = interval(text).total_seconds()
    if not (math.isfinite(value) and 0 <= value <= MAX_EMBED_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be from 0 (no limit) to {MAX_EMBED_SECONDS} seconds: {text!r}"
        )
    return value


@command(
    "maintain",
    "partition maintenance: create partitions ahead, fold idle sessions' buffers, apply "
    "retention, embed new chunks (exit 3 when fewer than --premake partitions are ahead "
    "afterwards)",
    flag("--dry-run", help="print the plan; change nothing, take no lock"),
    arg(
        "--premake",
        type=int_between(0, 1000),
        metavar="N",
        help="partitions kept ready ahead of the current one (default 4)",
    ),
    arg(
        "--retention",
        type=interval,
        metavar="INTERVAL",
        help="drop partitions (and sessions, buffered turns) older than this, e.g. '90 days' "
        "(default: keep everything)",
    ),
    arg(
        "--flush-idle",
        type=interval,
        default=timedelta(minutes=5),
        metavar="INTERVAL",
        help="fold the buffers of sessions without a turn for this long (default '5 minutes')",
    ),
    arg(
        "--archive-command",
        metavar="CMD",
        help="shell command run for each expired partition before it is dropped; gets the "
        "detached table's name ({table}, else appended; also $SHARDSTORE_ARCHIVE_TABLE); "
        "non-zero exit keeps the table for the next run",
    ),
    flag(
        "--no-embed", help="skip embedding queued chunks (done by default when a model is recorded)"
    ),
    arg(
        "--max-embed",
        type=non_negative_int,
        metavar="N",
        help="embed at most N chunks in this run (default: no count limit); the rest stays "
        "queued for the next run",
    ),
    arg(
        "--embed-seconds",
        type=embed_seconds,
        default=DEFAULT_EMBED_SECONDS,
        metavar="SECONDS",
        help="stop embedding after about this long, model loading included, e.g. 300 or "
        f"'10 min' (default {DEFAULT_EMBED_SECONDS:.0f}: keeps a run inside a 10-minute "
        "cron; 0: no limit); the rest stays queued for the next run",
    ),
    arg(
        "--lock-timeout",
        type=lock_timeout,
        default=timedelta(seconds=1),
        metavar="DURATION",
        help="longest wait for any lock, e.g. '200ms', '2s' (default 1s); writers never "
        "queue behind maintenance for longer",
    ),
)
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
            max_embed=args.max_embed,
            embed_seconds=args.embed_seconds or None,
            progress=not run.json and run.err.isatty(),
        )
    if run.json:
        run.emit(report.to_json())
    else:
        run.line(format_report(report))
    if report.already_running or report.healthy:
        return EXIT_OK
    return EXIT_UNHEALTHY


COMMANDS = (cmd_maintain,)
