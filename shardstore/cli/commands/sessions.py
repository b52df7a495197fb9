"""``shardstore create-session``, ``shardstore session`` and ``shardstore sessions``."""

from __future__ import annotations

from collections.abc import Sequence

from ...models import SessionInfo
from ..app import Runner
from ..args import TIME_HELP, optional_time, parse_json, positive_int
from ..declare import arg, command
from ..output import dumps, format_table, num, printable, session_json, when

#: ``shardstore sessions`` lists at most this many unless ``--limit`` says otherwise.
DEFAULT_LIST_LIMIT = 50


@command(
    "create-session",
    "create a session and print its id",
    arg("--tenant", required=True, help="tenant id"),
    arg("--subject", help="subject id (e.g. the end user)"),
    arg("--agent", help="agent id"),
    arg("--session-id", help="use this UUID (idempotent: repeating returns it)"),
    arg("--metadata", metavar="JSON", help="a JSON object stored with the session"),
)
def cmd_create_session(run: Runner) -> int:
    """Create a session (idempotent with ``--session-id``) and print its id; 0 on success."""
    metadata = parse_json(run.args.metadata, "--metadata") if run.args.metadata else None
    with run.connect() as store:
        sid = store.create_session(
            run.args.tenant, run.args.subject, run.args.agent, run.args.session_id, metadata
        )
    if run.json:
        run.emit({"session_id": sid})
    else:
        run.line(str(sid))
    return 0


@command("session", "show a session's owners and counts", arg("session_id", metavar="SESSION_ID"))
def cmd_session(run: Runner) -> int:
    """Print a session's owners, metadata and counts; 0 on success."""
    with run.connect() as store:
        info = store.session(run.args.session_id)
    run.record(
        session_json(info),
        [
            ("session", str(info.session_id)),
            ("tenant", printable(info.tenant_id)),
            ("subject", printable(info.subject_id or "-")),
            ("agent", printable(info.agent_id or "-")),
            ("created", when(info.created_at) + " UTC"),
            # the time of the last append, which a rewind or a range purge keeps (it
            # orders later turns): not the time of the newest turn still stored
            ("last append", when(info.last_turn_at) + " UTC" if info.last_turn_at else "-"),
            ("turns", _stored(info)),
            ("next turn", num(info.turn_count)),
            ("chunks", num(info.chunk_count)),
            ("purged", "yes" if info.purged else "no"),
            ("metadata", dumps(info.metadata, indent=None)),
        ],
    )
    return 0


@command(
    "sessions",
    "list live sessions, newest first, with turn counts and last activity",
    arg("--tenant", help="only this tenant's sessions"),
    arg("--subject", help="only this subject's sessions"),
    arg("--agent", help="only this agent's sessions"),
    arg(
        "--external-id",
        metavar="ID",
        help="only the session an adapter or importer made for this framework id "
        "(a LangGraph thread id, an Agents or LangChain session id)",
    ),
    arg(
        "--since",
        metavar="TIME",
        help=f"only sessions created at or after TIME: {TIME_HELP}",
    ),
    arg(
        "--limit",
        type=positive_int,
        metavar="N",
        help=f"at most N sessions (default {DEFAULT_LIST_LIMIT})",
    ),
    arg(
        "--before",
        metavar="SESSION_ID",
        help="the next page: sessions listed after this one (the last of the previous page)",
    ),
)
def cmd_sessions(run: Runner) -> int:
    """List live sessions matching the filters, newest first, at most ``--limit``
    (default 50); a full page ends with the ``--before`` that lists the next one. 0 on
    success."""
    args = run.args
    since = optional_time(args.since)
    limit = args.limit if args.limit is not None else DEFAULT_LIST_LIMIT
    with run.connect() as store:
        found = store.sessions(
            tenant_id=args.tenant,
            subject_id=args.subject,
            agent_id=args.agent,
            since=since,
            before=args.before,
            limit=limit,
            external_id=args.external_id,
        )
    status = run.listing(found, "sessions", session_json, _sessions_table)
    if not run.json and len(found) == limit:
        run.line(f"(the newest {num(limit)}; next page: --before {found[-1].session_id})")
    return status


_SESSIONS_HEADERS = (
    *("session", "tenant", "subject", "agent", "turns", "chunks"),
    *("created (UTC)", "last append (UTC)"),
)


def _stored(info: SessionInfo) -> str:
    """The turns a session holds, and from which turn when a range purge cut its start."""
    held = num(info.stored_turns)
    if info.first_turn_seq and info.stored_turns:
        return f"{held} (turns {num(info.first_turn_seq)} to {num(info.turn_count - 1)})"
    return held


def _sessions_table(found: Sequence[SessionInfo]) -> str:
    rows = [
        [
            str(s.session_id),
            printable(s.tenant_id),
            printable(s.subject_id or "-"),
            printable(s.agent_id or "-"),
            num(s.stored_turns),
            num(s.chunk_count),
            when(s.created_at),
            when(s.last_turn_at) if s.last_turn_at is not None else "-",
        ]
        for s in found
    ]
    return format_table(_SESSIONS_HEADERS, rows, "llllrrll")


COMMANDS = (
    cmd_create_session,
    cmd_session,
    cmd_sessions,
)
