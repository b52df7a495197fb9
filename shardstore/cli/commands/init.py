"""``shardstore init``: create or upgrade the schema and show its status."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ...errors import ConfigurationError
from ...settings import parse_interval
from ..app import Runner
from ..declare import arg, command
from ..output import display_dsn, format_partitions, interval_text, kv, partition_json


@command(
    "init",
    "create or upgrade the schema and show its status",
    arg(
        "--partition-interval",
        metavar="INTERVAL",
        help="width of agent_history partitions on a new database, e.g. '7 days', "
        "'1h' (fixed once partitions exist)",
    ),
)
def cmd_init(run: Runner) -> int:
    """Connect (which migrates the schema), then print the database, the schema version
    and the partitions; 0 on success."""
    settings: dict[str, Any] = {}
    if run.args.partition_interval is not None:
        settings["partition_interval"] = parse_interval(run.args.partition_interval)
    from ...schema.migrate import all_migrations

    try:
        store = run.connect(**settings)
    except ConfigurationError:
        if "partition_interval" not in settings:
            raise
        _refuse_interval_change(run, settings["partition_interval"])
        raise
    with store:
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


def _refuse_interval_change(run: Runner, wanted: timedelta) -> None:
    """Raise the refusal of ``--partition-interval`` in the CLI's terms when the database's
    recorded interval differs (returns if it does not: the error was another one)."""
    with run.connect() as store:
        current = store.stats().partition_interval_seconds
    if current != wanted.total_seconds():
        raise ConfigurationError(
            f"this database partitions every {interval_text(current)}; --partition-interval "
            f"{interval_text(wanted.total_seconds())} cannot change it once partitions exist "
            "(run init without --partition-interval to keep the recorded one)"
        )


COMMANDS = (cmd_init,)
