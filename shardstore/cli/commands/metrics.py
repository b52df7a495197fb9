"""``shardstore metrics [--serve HOST:PORT]``: the store's database-derived gauges in the
Prometheus text format (:mod:`shardstore.integrations.metrics`; the ``metrics`` extra).

Without ``--serve`` it prints them once (``--json``: one object of the values) and exits 0.
With ``--serve HOST:PORT`` it serves them at ``http://HOST:PORT/metrics``, reading the
database once per scrape, until interrupted or terminated (exit 0): it prints the URL it
listens on first (port 0 picks a free one; with ``--json`` one line,
``{"url", "host", "port"}``). It needs only the operator role's read rights
(docs/integrations/telemetry.md), not the schema owner's: it runs no migration. Exit
status: 2 for a bad address or one it cannot listen on, 6 when the database cannot be
reached, 8 when the connection settings are refused.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from types import FrameType

from ...core.connector import resolve_dsn
from ...errors import ConnectionRejected
from ...integrations import metrics
from ..app import EXIT_OK, Runner
from ..declare import arg, command
from ..output import dumps


def _dsn(run: Runner) -> str:
    """The database the global options name, as ``Runner.connect`` picks it (the
    embedded Postgres, started on demand, when neither --dsn nor $SHARDSTORE_DSN is
    given), without connecting a store: a store's setup would need the owner's rights."""
    if run.embedded:
        from ...embedded_server import embedded_dsn

        dsn = embedded_dsn(on_start=run._announce_start)
    else:
        dsn = resolve_dsn(run.args.dsn)
    try:
        dsn.encode()
    except UnicodeEncodeError:
        raise ConnectionRejected("the DSN is not valid UTF-8") from None
    run.dsn = dsn
    return dsn


def _wait_for_stop() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()

    def stopping(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, stopping) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@command(
    "metrics",
    "the store's gauges (embedding backlog, partitions ahead, oldest unfolded turn, runs "
    "awaiting a human, last maintenance) in the Prometheus text format, once or served "
    "with --serve",
    arg(
        "--serve",
        metavar="HOST:PORT",
        help="serve them at http://HOST:PORT/metrics until interrupted, reading the database "
        "once per scrape (e.g. 127.0.0.1:9464; port 0: a free one, printed)",
    ),
)
def cmd_metrics(run: Runner) -> int:
    """Print the gauges once, or serve them until stopped (see the module docstring)."""
    address = run.args.serve
    timeout = run.args.connect_timeout
    if address is None:
        dsn = _dsn(run)
        if run.json:
            run.emit(dataclasses.asdict(metrics.snapshot(dsn, connect_timeout=timeout)))
        else:
            run.out.write(metrics.exposition(dsn, connect_timeout=timeout))
        return EXIT_OK
    metrics.parse_address(address)  # a bad address is refused before connecting
    server = metrics.serve(_dsn(run), address, record_calls=False, connect_timeout=timeout)
    try:
        if run.json:
            # one line, so that a script can read it while the command keeps running
            doc = {"url": server.url, "host": server.host, "port": server.port}
            run.line(dumps(doc, indent=None))
        else:
            run.line(f"serving metrics on {server.url} (Ctrl-C stops)")
        run.out.flush()
        _wait_for_stop()
    finally:
        server.close()
    return EXIT_OK


COMMANDS = (cmd_metrics,)
