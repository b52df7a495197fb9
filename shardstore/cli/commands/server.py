"""``shardstore server (status | start | stop | path)``: the embedded Postgres.

The embedded server (:mod:`shardstore.embedded_server`) is the database of every command when
neither ``--dsn`` nor ``$SHARDSTORE_DSN`` names another; it lives in
``$SHARDSTORE_DATA_DIR``, else the user data directory, is started on demand and keeps
running after the command that started it ends, so that later commands reuse it. These
commands look at it, start it and stop it; none of them connects to ``--dsn``.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import psycopg

from ... import embedded_server as embedded
from ..app import EXIT_FAILURE, EXIT_OK, Runner
from ..args import UsageError
from ..declare import command, flag, group
from ..output import kv, printable, size

# the other client connections of a server: not this one, not its background processes
_CLIENTS_SQL = """
SELECT coalesce(nullif(application_name, ''), 'unnamed') FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


def _other_server(run: Runner) -> str | None:
    """Why commands do not use the embedded server now, or None when they do."""
    if run.args.dsn:
        return "--dsn is given"
    if os.environ.get("SHARDSTORE_DSN"):
        return "$SHARDSTORE_DSN is set"
    return None


def _status_document(run: Runner, status: embedded.ServerStatus) -> dict[str, object]:
    doc: dict[str, object] = status.to_json()
    other = _other_server(run)
    doc["in_use"] = other is None
    doc["not_used_because"] = other
    return doc


def _print_status(run: Runner, status: embedded.ServerStatus) -> None:
    if status.running:
        state = f"running (pid {status.pid}"
        if status.started_at is not None:
            state += f", since {status.started_at.strftime('%Y-%m-%d %H:%M:%S UTC')}"
        state += ")"
    elif status.initialized:
        state = "not running (started by the next command that needs it)"
    else:
        state = "not created yet (the next command that needs it creates and starts it)"
    rows = [("embedded Postgres", state), ("data directory", str(status.data_dir))]
    if status.running:
        rows.append(("dsn", status.dsn or "?"))
        if status.socket_dir:
            rows.append(("socket", f"{status.socket_dir}/.s.PGSQL.{status.port or 5432}"))
    rows.append(("size", size(status.size_bytes)))
    other = _other_server(run)
    if other is not None:
        rows.append(("in use", f"no: {other}, so commands use that server"))
    if status.running:
        rows.append(("stop it", "shardstore server stop"))
    run.line(kv(rows))


@command("status", "whether the embedded Postgres runs, its data directory, DSN and size")
def cmd_status(run: Runner) -> int:
    """Print whether the embedded server runs, its data directory, DSN, socket and size
    (``--json``: one object); starts nothing; 0 whether it runs or not."""
    status = embedded.server_status()
    if run.json:
        run.emit(_status_document(run, status))
    else:
        _print_status(run, status)
    return EXIT_OK


@command("start", "start the embedded Postgres (if it is not running)")
def cmd_start(run: Runner) -> int:
    """Start the embedded server (creating its data directory and database on first use)
    unless it runs already, then print its status; 0 when it runs afterwards."""
    started: list[bool] = []
    embedded.embedded_dsn(on_start=lambda _path: started.append(True))
    status = embedded.server_status()
    if run.json:
        run.emit({**_status_document(run, status), "started": bool(started)})
        return EXIT_OK
    run.line("started the embedded Postgres" if started else "the embedded Postgres was running")
    _print_status(run, status)
    return EXIT_OK


def connected_clients(dsn: str) -> list[str]:
    """The application name of each client connected to the server at ``dsn`` other than
    the connection that asks (``'unnamed'`` for a client that set none)."""
    with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
        return [str(name) for (name,) in conn.execute(_CLIENTS_SQL).fetchall()]


def _clients_text(clients: list[str]) -> str:
    """``3 clients (python 2, psql 1)``: how many, by application name."""
    names = ", ".join(f"{printable(n)} {c}" for n, c in Counter(clients).most_common(5))
    more = ", ..." if len(set(clients)) > 5 else ""
    return f"{len(clients)} client{'s' if len(clients) != 1 else ''} ({names}{more})"


def _may_stop(run: Runner, clients: list[str]) -> bool:
    """Whether to stop a server with ``clients`` connected: yes with ``--force``; at a
    terminal, the answer to a question; otherwise a :class:`UsageError` saying to give
    ``--force``."""
    if run.args.force:
        return True
    what = (
        f"{_clients_text(clients)} {'is' if len(clients) == 1 else 'are'} connected; "
        "stopping the embedded Postgres disconnects them "
        "(their transactions roll back, their next calls fail until it is started again)"
    )
    if not (sys.stdin.isatty() and run.err.isatty()):
        # a script or a pipe cannot answer: it must say --force
        raise UsageError(f"not stopped: {what}. Give --force to stop it anyway")
    print(f"{what}. Stop it? [y/N] ", end="", file=run.err)
    run.err.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


@command(
    "stop",
    "stop the embedded Postgres cleanly (the next command that needs it starts it again); "
    "with clients connected it says how many and asks, or without a terminal refuses "
    "unless --force",
    flag("--force", help="stop it even while other clients are connected (they are disconnected)"),
)
def cmd_stop(run: Runner) -> int:
    """Stop the embedded server cleanly (sessions are disconnected, nothing committed is
    lost) and say so, or say that it was not running; 0 in both cases. When other clients
    are connected it says how many and stops only with ``--force`` or a "yes" at a
    terminal: without a terminal it refuses (a usage error, exit 2, nothing stopped); a
    "no" exits 1, nothing stopped."""
    path = embedded.default_data_dir()
    status = embedded.server_status(path)
    clients: list[str] = []
    if status.running and status.dsn is not None:
        try:
            clients = connected_clients(status.dsn)
        except psycopg.Error as exc:
            if not run.args.force:
                raise UsageError(
                    f"not stopped: cannot tell whether clients are connected "
                    f"({' '.join(str(exc).split())}). Give --force to stop it anyway"
                ) from None
        if clients and not _may_stop(run, clients):
            run.line("not stopped")
            return EXIT_FAILURE
    stopped = embedded.stop_server(path)
    if run.json:
        run.emit(
            {
                "stopped": stopped,
                "data_dir": str(embedded.server_status(path).data_dir),
                "disconnected_clients": len(clients) if stopped else 0,
            }
        )
    elif stopped:
        gone = f"; disconnected {_clients_text(clients)}" if clients else ""
        run.line(f"stopped the embedded Postgres ({path}){gone}")
    else:
        run.line(f"the embedded Postgres is not running ({path}); nothing to stop")
    return EXIT_OK


@command(
    "path",
    "print the embedded Postgres's data directory ($SHARDSTORE_DATA_DIR, else the user "
    "data directory)",
)
def cmd_path(run: Runner) -> int:
    """Print the embedded server's data directory (whether or not it exists yet); 0."""
    path = embedded.server_status().data_dir
    if run.json:
        run.emit({"data_dir": str(path)})
    else:
        run.line(str(path))
    return EXIT_OK


COMMANDS = (
    group(
        "server",
        "the embedded Postgres (used when neither --dsn nor $SHARDSTORE_DSN is given): "
        "status, start, stop, path",
        subcommands=(cmd_status, cmd_start, cmd_stop, cmd_path),
        dest="server_command",
    ),
)
