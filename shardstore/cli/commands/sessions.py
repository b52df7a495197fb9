"""``shardstore create-session`` and ``shardstore session``."""

from __future__ import annotations

from ..app import Commands, Runner
from ..args import parse_json
from ..output import dumps, kv, num, printable, when


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


def cmd_session(run: Runner) -> int:
    """Print a session's owners, metadata and counts; 0 on success."""
    with run.connect() as store:
        info = store.session(run.args.session_id)
    doc = {
        "session_id": info.session_id,
        "tenant_id": info.tenant_id,
        "subject_id": info.subject_id,
        "agent_id": info.agent_id,
        "metadata": info.metadata,
        "created_at": info.created_at,
        "turn_count": info.turn_count,
        "chunk_count": info.chunk_count,
        "purged": info.purged,
    }
    if run.json:
        run.emit(doc)
        return 0
    run.line(
        kv(
            [
                ("session", str(info.session_id)),
                ("tenant", printable(info.tenant_id)),
                ("subject", printable(info.subject_id or "-")),
                ("agent", printable(info.agent_id or "-")),
                ("created", when(info.created_at) + " UTC"),
                ("turns", num(info.turn_count)),
                ("chunks", num(info.chunk_count)),
                ("purged", "yes" if info.purged else "no"),
                ("metadata", dumps(info.metadata, indent=None)),
            ]
        )
    )
    return 0


def register(commands: Commands) -> None:
    """Add ``create-session`` and ``session``."""
    p = commands.add("create-session", "create a session and print its id", cmd_create_session)
    p.add_argument("--tenant", required=True, help="tenant id")
    p.add_argument("--subject", help="subject id (e.g. the end user)")
    p.add_argument("--agent", help="agent id")
    p.add_argument("--session-id", help="use this UUID (idempotent: repeating returns it)")
    p.add_argument("--metadata", metavar="JSON", help="a JSON object stored with the session")

    p = commands.add("session", "show a session's owners and counts", cmd_session)
    p.add_argument("session_id", metavar="SESSION_ID")
