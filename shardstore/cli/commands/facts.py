"""``shardstore facts``: what the store remembers about a subject, now, at a time, or one
key's every version."""

from __future__ import annotations

from collections.abc import Sequence

from ...state.facts import Fact
from ..app import Runner
from ..args import TIME_HELP, optional_time
from ..declare import arg, command, one_of
from ..output import abbrev, dumps, fact_json, format_table, printable, when

_HEADERS = ("key", "valid from (UTC)", "valid to (UTC)", "conf", "source", "value")


def _rows(facts: Sequence[Fact]) -> list[list[str]]:
    return [
        [
            printable(f.key),
            when(f.valid_from),
            "" if f.valid_to is None else when(f.valid_to),
            "" if f.confidence is None else f"{f.confidence:.2f}",
            "" if f.source_session_id is None else f"{f.source_session_id}#{f.source_turn_seq}",
            abbrev(printable(dumps(f.value, indent=None)), 60),
        ]
        for f in facts
    ]


@command(
    "facts",
    "show what is remembered about a subject (facts)",
    arg("--tenant", required=True, help="the subject's tenant"),
    arg("--subject", required=True, help="the subject, e.g. user:42"),
    one_of(
        arg(
            "--as-of",
            metavar="TIME",
            help=f"facts valid at TIME (default: now): {TIME_HELP}",
        ),
        arg("--history", metavar="KEY", help="every version of this key, oldest first"),
    ),
)
def cmd_facts(run: Runner) -> int:
    """Print the subject's facts valid now (or ``--as-of`` a time), or with ``--history``
    every version of one key, oldest first; 0 on success."""
    args = run.args
    as_of = optional_time(args.as_of)
    with run.connect() as store:
        if args.history is not None:
            found = store.fact_history(args.tenant, args.subject, args.history)
        else:
            found = store.recall(args.tenant, args.subject, as_of=as_of)
    return run.listing(
        found, "facts", fact_json, lambda facts: format_table(_HEADERS, _rows(facts), "llllll")
    )


COMMANDS = (cmd_facts,)
