"""``shardstore server (status | start | stop | path)``: the embedded Postgres.

The embedded server (:mod:`shardstore.embedded_server`) is the database of every command when
neither ``--dsn`` nor ``$SHARDSTORE_DSN`` names another; it lives in
``$SHARDSTORE_DATA_DIR``, else the user data directory, is started on demand and keeps
running after the command that started it ends, so that later commands reuse it. These
commands look at it, start it and stop it; none of them connects to ``--dsn``.
"""

from __future__ import annotations

import os

from ... import embedded_server as embedded
from ..app import EXIT_OK, Commands, Runner
from ..output import kv, size


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


def cmd_status(run: Runner) -> int:
    """Print whether the embedded server runs, its data directory, DSN, socket and size
    (``--json``: one object); starts nothing; 0 whether it runs or not."""
    status = embedded.server_status()
    if run.json:
        run.emit(_status_document(run, status))
    else:
        _print_status(run, status)
    return EXIT_OK


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


def cmd_stop(run: Runner) -> int:
    """Stop the embedded server cleanly (sessions are disconnected, nothing committed is
    lost) and say so, or say that it was not running; 0 in both cases."""
    path = embedded.default_data_dir()
    stopped = embedded.stop_server(path)
    if run.json:
        run.emit({"stopped": stopped, "data_dir": str(embedded.server_status(path).data_dir)})
    elif stopped:
        run.line(f"stopped the embedded Postgres ({path})")
    else:
        run.line(f"the embedded Postgres is not running ({path}); nothing to stop")
    return EXIT_OK


def cmd_path(run: Runner) -> int:
    """Print the embedded server's data directory (whether or not it exists yet); 0."""
    path = embedded.server_status().data_dir
    if run.json:
        run.emit({"data_dir": str(path)})
    else:
        run.line(str(path))
    return EXIT_OK


def register(commands: Commands) -> None:
    """Add ``server`` and its ``status``, ``start``, ``stop`` and ``path``."""
    p = commands.add(
        "server",
        "the embedded Postgres (used when neither --dsn nor $SHARDSTORE_DSN is given): "
        "status, start, stop, path",
    )
    sub = commands.nested(p, "server_command")
    sub.add(
        "status",
        "whether the embedded Postgres runs, its data directory, DSN and size",
        cmd_status,
    )
    sub.add("start", "start the embedded Postgres (if it is not running)", cmd_start)
    sub.add(
        "stop",
        "stop the embedded Postgres cleanly (the next command that needs it starts it again)",
        cmd_stop,
    )
    sub.add(
        "path",
        "print the embedded Postgres's data directory ($SHARDSTORE_DATA_DIR, else the user "
        "data directory)",
        cmd_path,
    )
