"""``shardstore stats``: store-wide counts and partitions."""

from __future__ import annotations

from ..app import Runner
from ..declare import command
from ..output import format_partitions, interval_text, num, stats_json


@command("stats", "store-wide counts and partitions")
def cmd_stats(run: Runner) -> int:
    """Print store-wide counts and the partitions table; 0 on success."""
    with run.connect() as store:
        stats = store.stats()
    run.record(
        stats_json(stats),
        [
            ("sessions", num(stats.sessions)),
            ("turns", num(stats.turns)),
            ("chunks", num(stats.chunks)),
            ("buffered turns", num(stats.buffered_turns)),
            ("partition interval", interval_text(stats.partition_interval_seconds)),
        ],
    )
    if stats.partitions and not run.json:
        run.line()
        run.line(format_partitions(stats.partitions))
    return 0


COMMANDS = (cmd_stats,)
