"""``shardstore runs``: what is in flight (and what waits on a human)."""

from __future__ import annotations

from collections.abc import Sequence

from ...state.runs import STATUSES, Run
from ..app import Runner
from ..args import positive_int
from ..declare import arg, command
from ..output import abbrev, dumps, format_table, num, printable, run_json, when

_HEADERS = ("run", "tenant", "framework", "status", "steps", "usd", "since (UTC)", "what / error")


@command(
    "runs",
    "list agent runs (what waits on a human first)",
    arg("--tenant", help="only this tenant's runs"),
    arg("--session", metavar="SESSION_ID", help="only this session's runs"),
    arg("--status", choices=STATUSES, help="only runs in this status"),
    arg("--framework", help="only runs of this framework"),
    arg("--limit", type=positive_int, help="at most this many runs"),
)
def cmd_runs(run: Runner) -> int:
    """List runs matching the filters (waiting ones first, the longest wait first); 0 on
    success."""
    args = run.args
    with run.connect() as store:
        found = store.runs(
            tenant_id=args.tenant,
            session_id=args.session,
            status=args.status,
            framework=args.framework,
            limit=args.limit,
        )
    return run.listing(found, "runs", run_json, _table)


def _table(found: Sequence[Run]) -> str:
    rows = [
        [
            str(r.run_id),
            printable(r.tenant_id),
            printable(r.framework),
            r.status,
            num(r.steps),
            f"{r.usd_cost:.4f}",
            when(r.awaiting_since if r.awaiting_since is not None else r.updated_at),
            abbrev(dumps(r.awaiting, indent=None) if r.awaiting is not None else r.error or "", 60),
        ]
        for r in found
    ]
    return format_table(_HEADERS, rows, "llllrrll")


COMMANDS = (cmd_runs,)
