"""``shardstore distribute``: distribute the store on a Citus coordinator (docs/scale-out.md)."""

from __future__ import annotations

from ..app import Runner
from ..declare import command, flag
from ..output import kv, num


@command(
    "distribute",
    "distribute the store on a Citus coordinator (reference and colocated tables)",
    flag("--no-delegate", help="do not delegate the hot functions to the workers by session"),
)
def cmd_distribute(run: Runner) -> int:
    """Distribute (idempotently) and say what changed; on PostgreSQL without Citus, say so
    and change nothing. 0 in both cases."""
    with run.connect() as store:
        report = store.distribute(delegate=not run.args.no_delegate)
    if run.json:
        run.emit(report.to_json())
        return 0
    if report.citus_version is None:
        run.line("Citus is not installed in this database: nothing distributed, nothing changed")
        return 0
    run.line(
        kv(
            [
                ("citus", report.citus_version),
                ("workers", num(report.workers)),
                ("reference tables made", ", ".join(report.reference_tables) or "none"),
                ("tables distributed", ", ".join(report.distributed_tables) or "none"),
                ("already distributed", num(len(report.unchanged))),
                ("functions sent to workers", num(report.functions_propagated)),
                ("functions delegated", ", ".join(report.functions_delegated) or "none"),
                ("settings", "; ".join(report.settings) or "none"),
            ]
        )
    )
    if not report.changed:
        run.line("nothing to do: the store was distributed already")
    return 0


COMMANDS = (cmd_distribute,)
