"""``shardstore init``: create or upgrade the schema and show its status."""

from __future__ import annotations

from typing import Any

from ...settings import parse_interval
from ..app import Commands, Runner
from ..output import display_dsn, format_partitions, interval_text, kv, partition_json


def cmd_init(run: Runner) -> int:
    """Connect (which migrates the schema), then print the database, the schema version
    and the partitions; 0 on success."""
    settings: dict[str, Any] = {}
    if run.args.partition_interval is not None:
        settings["partition_interval"] = parse_interval(run.args.partition_interval)
    from ...migrate import all_migrations

    with run.connect(**settings) as store:
        stats = store.stats()
    version = len(all_migrations())
    if run.json:
        run.emit(
            {
                "database": display_dsn(run.dsn),
                "embedded": run.embedded,
                "schema_version": version,
                "partition_interval_seconds": stats.partition_interval_seconds,
                "partitions": [partition_json(p) for p in stats.partitions],
            }
        )
        return 0
    run.line(
        kv(
            [
                ("database", display_dsn(run.dsn) + (" (embedded)" if run.embedded else "")),
                ("schema", f"up to date (migration {version})"),
                ("partition interval", interval_text(stats.partition_interval_seconds)),
                ("partitions", str(len(stats.partitions))),
            ]
        )
    )
    if stats.partitions:
        run.line()
        run.line(format_partitions(stats.partitions))
    return 0


def register(commands: Commands) -> None:
    """Add ``init``."""
    p = commands.add("init", "create or upgrade the schema and show its status", cmd_init)
    p.add_argument(
        "--partition-interval",
        metavar="INTERVAL",
        help="width of agent_history partitions on a new database, e.g. '7 days', "
        "'1h' (fixed once partitions exist)",
    )
