"""The ``shardstore`` command line: global options, parser building, exit codes, the
:class:`Runner` every command gets, and error handling.

    shardstore [--dsn DSN] [--json] [--connect-timeout SECONDS]
               [--key-store PATH] [--kek-file PATH] COMMAND ...

The global options are accepted before the command and after it, at every level of nested
commands (``shardstore purge session ID --connect-timeout 5``). The database is ``--dsn``,
else ``$SHARDSTORE_DSN``, else the embedded Postgres (started on demand). Human output is
aligned plain text; ``--json`` prints one JSON document on stdout (``history --json`` prints
one JSON object per line). Errors print ``error: <message>`` on stderr (with ``--json``: one
JSON object, ``{"error": {"type", "message", "exit_code", "retryable"}}``) and set the exit
status (:func:`exit_code`): 0 ok, 2 bad usage or bad input, 3 unhealthy (``maintain``),
4 not found, 5 purged, 6 database unavailable (retryable), 7 conflict (retryable), 8 the
connection settings were refused (a malformed DSN, an unknown database or role, failed
authentication: not retryable), 1 anything else, 130 interrupted.

Encryption at rest: ``--key-store PATH`` (else ``$SHARDSTORE_KEY_STORE``) names the local key
store, and ``--kek-file PATH`` (else ``$SHARDSTORE_KEK_FILE``) its key-encryption key file
(without either, ``$SHARDSTORE_KEK``, else ``PATH/kek``: the conventions of
:class:`~shardstore.encryption.LocalKeyProvider`). When a key store is named, every
command's store is connected with ``encryption=LocalKeyProvider(...)``, so that it reads
and writes encrypted values; without one, a command that meets a sealed value fails with
``EncryptionRequired`` (exit 2), naming these options.

Commands live in :mod:`shardstore.cli.commands`, one module per feature; each declares its
commands (:mod:`.declare`) and lists them in ``COMMANDS``, and :data:`COMMAND_MODULES`
lists the modules in the order ``--help`` shows them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO, TypeVar

import psycopg

from ..core.connector import resolve_dsn
from ..errors import (
    ConfigurationError,
    Conflict,
    ConnectionRejected,
    DatabaseUnavailable,
    EncryptionRequired,
    InvalidInput,
    RunClosed,
    RunConflict,
    SessionConflict,
    SessionPurged,
    ShardstoreError,
    cli_text,
)
from ..store import Store
from .args import UsageError, positive_seconds
from .declare import Command, OneOf
from .output import dumps, kv

__all__ = [
    "COMMAND_MODULES",
    "EXIT_CONFLICT",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_PURGED",
    "EXIT_REJECTED",
    "EXIT_UNAVAILABLE",
    "EXIT_UNHEALTHY",
    "EXIT_USAGE",
    "PROG",
    "ArgumentsRejected",
    "Commands",
    "Handler",
    "Parser",
    "Runner",
    "UsageError",
    "build_parser",
    "exit_code",
    "main",
    "version",
]

PROG = "shardstore"
T = TypeVar("T")

#: Exit statuses.
EXIT_OK = 0
EXIT_FAILURE = 1  # anything else: an unexpected failure (with a traceback), a declined purge
EXIT_USAGE = 2  # bad usage or bad input (including configuration the command cannot use)
EXIT_UNHEALTHY = 3  # maintain: the run finished, but the store is not healthy
EXIT_NOT_FOUND = 4  # no such session (run, checkpoint, ...)
EXIT_PURGED = 5  # the session was purged
EXIT_UNAVAILABLE = 6  # the database cannot be reached: retryable
EXIT_CONFLICT = 7  # a lock or serialization conflict: retryable
EXIT_REJECTED = 8  # the connection settings were refused: fix the DSN, do not retry
EXIT_INTERRUPTED = 130


# requests the store refuses as they are (not retryable): an id taken by other owners, a
# change to a run that is already closed
REFUSED = SessionConflict | RunConflict | RunClosed


def exit_code(exc: BaseException) -> int:
    """The exit status for an error a command raised (see the module docstring)."""
    if isinstance(exc, ConnectionRejected):
        return EXIT_REJECTED
    if isinstance(exc, UsageError | InvalidInput | ConfigurationError | REFUSED):
        return EXIT_USAGE
    if isinstance(exc, SessionPurged):
        return EXIT_PURGED
    if isinstance(exc, LookupError):
        return EXIT_NOT_FOUND
    if isinstance(exc, DatabaseUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(exc, Conflict):
        return EXIT_CONFLICT
    return EXIT_FAILURE


def version() -> str:
    """The installed shardstore's version ("unknown" when it runs from a plain checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("shardstore")
    except PackageNotFoundError:
        return "unknown"


def _report_error(run: Runner, exc: BaseException, code: int) -> None:
    """An error on stderr: ``error: MESSAGE``, or one JSON object with ``--json``. The
    message is in the CLI's terms (:func:`shardstore.errors.cli_text`): a hint naming a
    Python argument (``on_existing='skip'``) is printed as the flag (``--on-existing
    skip``)."""
    message = cli_text(exc)
    if isinstance(exc, EncryptionRequired) and "--key-store" not in message:
        # the library's message names the Python argument; the CLI has options for it
        message = f"{message.split('; ', 1)[0]}; {KEY_STORE_HINT}"
    if run.json:
        doc = {
            "type": type(exc).__name__,
            "message": message,
            "exit_code": code,
            "retryable": bool(getattr(exc, "retryable", False)),
        }
        print(dumps({"error": doc}, indent=None), file=run.err)
    else:
        print(f"error: {message}", file=run.err)


#: The command modules under ``shardstore.cli.commands``, in ``--help`` order.
COMMAND_MODULES = (
    *("init", "demo", "sessions", "history", "stats", "maintain", "purge", "search"),
    "runs",
    "checkpoints",
    "rewind",
    "fork",
    "facts",
    "server",
    "context",
    "summarize",
    "artifacts",
    "import_cmd",
    "export",
    "distribute",
    "text_search",
    "sealed_vectors",
    "metrics",
    "mcp",
    "keys",
)


_CONNECT_PREFIXES = ("connection failed: ", "connection is bad: ")

#: The environment variables naming the key store and its key-encryption key file.
KEY_STORE_ENV = "SHARDSTORE_KEY_STORE"
KEK_FILE_ENV = "SHARDSTORE_KEK_FILE"
KEY_STORE_HINT = (
    "give the key store holding its data key: --key-store PATH or $SHARDSTORE_KEY_STORE "
    "(and --kek-file or $SHARDSTORE_KEK_FILE for its key-encryption key)"
)


def _connect_failure(dsn: str, message: str = "") -> str:
    """The server's reason for refusing one direct connection (the pool's error does not
    always carry it), as a suffix for the error ``message``; empty if a direct connection
    works or ``message`` already says it (so that the reason is never printed twice)."""
    try:
        with psycopg.connect(dsn, connect_timeout=5):
            return ""
    except Exception as exc:
        reason = " ".join(str(exc).split())
    core = reason
    for prefix in _CONNECT_PREFIXES:
        core = core.removeprefix(prefix)
    if not core or core in " ".join(message.split()):
        return ""
    return f" ({reason})"


def _check_key_paths(store: str, key_file: str | None) -> None:
    """Refuse what would silently start a new key store or key-encryption key in the place
    of an existing one (a mistyped path): ``LocalKeyProvider`` creates both when absent,
    which a program setting up encryption wants and a command line reading it does not."""
    try:
        if not os.path.isdir(store):
            raise ConfigurationError(
                f"no key store at {store!r:.200} (to start a new one, create the directory "
                "first: mkdir -m 700 PATH)"
            )
        keys_dir = os.path.join(store, "keys")
        holds_keys = os.path.isdir(keys_dir) and any(
            name.endswith(".key") for name in os.listdir(keys_dir)
        )
        if key_file is not None and holds_keys and not os.path.exists(key_file):
            raise ConfigurationError(
                f"the key store at {store!r:.200} holds data keys, but its key-encryption key "
                f"file {key_file!r:.200} does not exist"
            )
    except (OSError, ValueError) as exc:  # a NUL in a path, an unreadable directory
        raise ConfigurationError(f"cannot use the key store {store!r:.200}: {exc}") from None


class Runner:
    """Holds what every command needs: parsed arguments, output streams, the store."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args = args
        self.out = out
        self.err = err
        self.json: bool = bool(args.json)
        self.embedded = not (args.dsn or os.environ.get("SHARDSTORE_DSN"))
        self.dsn = ""
        self._keys: Any = None

    @property
    def key_store(self) -> str | None:
        """The key store the command line names (``--key-store``, else
        ``$SHARDSTORE_KEY_STORE``); None when encryption is not configured."""
        return getattr(self.args, "key_store", None) or os.environ.get(KEY_STORE_ENV) or None

    def encryption(self) -> Any:
        """The :class:`~shardstore.encryption.LocalKeyProvider` of the configured key store
        (opened once per command), or None when none is named. ``ConfigurationError`` for a
        key store or key file that cannot be used."""
        path = self.key_store
        if path is None:
            return None
        if self._keys is None:
            from ..encryption import LocalKeyProvider

            key_file = getattr(self.args, "key_file", None) or os.environ.get(KEK_FILE_ENV)
            _check_key_paths(path, key_file or None)
            self._keys = LocalKeyProvider(path, key_file=key_file or None)
        return self._keys

    def connect(self, **settings: Any) -> Store:
        """A store on the chosen database (starting the embedded Postgres if that is the
        one), giving up after ``--connect-timeout``; ``settings`` go to
        :func:`shardstore.connect`, with ``encryption=`` the configured key store when one is
        named (:meth:`encryption`) and ``settings`` do not say otherwise. Sets :attr:`dsn`.
        A refused connection raises :class:`DatabaseUnavailable` with the server's reason
        appended."""
        import shardstore

        if "encryption" not in settings:
            keys = self.encryption()
            if keys is not None:
                settings["encryption"] = keys

        if self.embedded:
            from ..embedded_server import embedded_dsn

            # the "starting" line only when it really starts (not when it runs already)
            self.dsn = embedded_dsn(on_start=self._announce_start)
        else:
            self.dsn = resolve_dsn(self.args.dsn)
        try:
            # argv carries bytes that are not UTF-8 as lone surrogates, which libpq's
            # conninfo (UTF-8) cannot take: a usage error, not a UnicodeEncodeError
            self.dsn.encode()
        except UnicodeEncodeError:
            raise ConnectionRejected("the DSN is not valid UTF-8") from None
        # The pool retries failed connections until connect_timeout and logs each failure;
        # the CLI reports the final error once instead.
        logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
        try:
            return shardstore.connect(
                self.dsn, connect_timeout=self.args.connect_timeout, **settings
            )
        except DatabaseUnavailable as exc:
            message = " ".join(str(exc).split())  # one line: libpq's hints come on a second
            raise DatabaseUnavailable(f"{message}{_connect_failure(self.dsn, message)}") from exc

    def _announce_start(self, data_dir: Any) -> None:
        if self.err.isatty():
            print(
                f"starting the embedded Postgres in {data_dir} (set SHARDSTORE_DSN or --dsn "
                "to use another server; 'shardstore server stop' stops it)…",
                file=self.err,
            )

    def emit(self, document: Any) -> None:
        """Print ``document`` as one indented JSON document (:func:`output.dumps`)."""
        print(dumps(document), file=self.out)

    def line(self, text: str = "") -> None:
        """Print one line of human output."""
        print(text, file=self.out)

    def record(self, document: Any, fields: Sequence[tuple[str, str]]) -> None:
        """Print one result: ``document`` as JSON with ``--json``, else ``fields`` as
        aligned ``name  value`` lines (:func:`output.kv`)."""
        if self.json:
            self.emit(document)
        else:
            self.line(kv(fields))

    def listing(
        self,
        items: Sequence[T],
        what: str,
        to_json: Callable[[T], Any],
        table: Callable[[Sequence[T]], str],
    ) -> int:
        """Print a list of results: a JSON array with ``--json``, "no <what>" when empty,
        else the text ``table`` makes of them. Returns 0 (the command's status)."""
        if self.json:
            self.emit([to_json(item) for item in items])
        elif not items:
            self.line(f"no {what}")
        else:
            self.line(table(items))
        return EXIT_OK


#: What a command runs: gets the :class:`Runner`, returns the exit status.
Handler = Callable[[Runner], int]


class ArgumentsRejected(SystemExit):
    """argparse refused the command line (an unknown option, a missing or malformed
    argument): raised by :class:`Parser` instead of printing, so that :func:`main` reports
    it as the rest of the errors are (one JSON object with ``--json``). Exit status 2."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(EXIT_USAGE)
        self.parser = parser
        self.message = message

    def __str__(self) -> str:
        return f"{self.parser.prog}: {self.message}"


class Parser(argparse.ArgumentParser):
    """The CLI's argument parser: a usage error raises :class:`ArgumentsRejected` (a
    ``SystemExit`` of status 2) instead of printing usage text; :func:`main` prints it.
    Every subcommand's parser is one too (argparse makes them of the parent's class)."""

    def error(self, message: str) -> NoReturn:
        """Raise :class:`ArgumentsRejected` with ``message`` (argparse calls this)."""
        raise ArgumentsRejected(self, message)


def _wants_json(argv: Sequence[str]) -> bool:
    """Whether ``--json`` is on the command line (anywhere before a ``--``, which ends the
    options): then even an argument error argparse finds is reported as JSON."""
    for arg in argv:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def _report_arguments_rejected(exc: ArgumentsRejected, *, as_json: bool) -> None:
    """An argument error on stderr: argparse's usage line and ``PROG: error: MESSAGE``,
    or with ``--json`` one JSON error object (type ``UsageError``, exit code 2)."""
    if as_json:
        doc = {
            "type": "UsageError",
            "message": str(exc),
            "exit_code": EXIT_USAGE,
            "retryable": False,
        }
        print(dumps({"error": doc}, indent=None), file=sys.stderr)
        return
    exc.parser.print_usage(sys.stderr)
    print(f"{exc.parser.prog}: error: {exc.message}", file=sys.stderr)


def _add_global_options(parser: argparse.ArgumentParser, *, hidden: bool) -> None:
    """The global options; ``hidden`` copies (for subcommands) neither show in help nor
    set a default, so they only override what was given before the command."""
    if not hidden:
        parser.add_argument(
            "--dsn",
            default=None,
            help="PostgreSQL DSN (default: $SHARDSTORE_DSN, else the embedded Postgres)",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            default=False,
            help="print machine-readable JSON on stdout",
        )
        parser.add_argument(
            "--connect-timeout",
            type=positive_seconds,
            default=10.0,
            metavar="SECONDS",
            help="give up connecting after this long (default 10)",
        )
        parser.add_argument(
            "--key-store",
            metavar="PATH",
            default=None,
            help="the local key store of encryption at rest: commands read and write "
            f"encrypted values (default: ${KEY_STORE_ENV}; none: encryption off)",
        )
        parser.add_argument(
            "--kek-file",
            dest="key_file",
            metavar="PATH",
            default=None,
            help=f"the key store's key-encryption key file (default: ${KEK_FILE_ENV}, else "
            "$SHARDSTORE_KEK, else PATH/kek)",
        )
        return
    parser.add_argument("--dsn", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive_seconds,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--key-store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    # --key-file: purge subject --shred's name for it before the option was global; not
    # at the top level, where it would make append's --key ambiguous (argparse classifies
    # every word against the top level's options first)
    parser.add_argument(
        "--kek-file",
        "--key-file",
        dest="key_file",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


class Commands:
    """Adds subcommands to one level of the command tree. Every parser it makes accepts the
    global options, so they work before or after any command, nested ones included."""

    def __init__(
        self,
        subparsers: argparse._SubParsersAction[Any],
        common: argparse.ArgumentParser,
    ) -> None:
        self._subparsers = subparsers
        self._common = common

    def add(self, command: Command) -> None:
        """Add ``command``: a parser that accepts the global options and the command's
        arguments, runs its handler, and holds its subcommands (at any depth)."""
        parser: argparse.ArgumentParser = self._subparsers.add_parser(
            command.name, parents=[self._common], help=command.summary, description=command.summary
        )
        if command.handler is not None:
            parser.set_defaults(handler=command.handler)
        for argument in command.arguments:
            if isinstance(argument, OneOf):
                exclusive = parser.add_mutually_exclusive_group(required=argument.required)
                for choice in argument.choices:
                    exclusive.add_argument(*choice.names, **choice.settings)
            else:
                parser.add_argument(*argument.names, **argument.settings)
        if command.subcommands:
            subparsers = parser.add_subparsers(
                dest=command.dest, metavar=command.metavar, required=True
            )
            nested = Commands(subparsers, self._common)
            for subcommand in command.subcommands:
                nested.add(subcommand)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command in :data:`COMMAND_MODULES` (global options are
    accepted before or after the command, at any depth). A usage error raises
    :class:`ArgumentsRejected` (exit status 2) without printing; :func:`main` reports it."""
    parser = Parser(
        prog=PROG,
        description="Unbounded AI-agent conversation history in PostgreSQL.",
        epilog="The database is --dsn, else $SHARDSTORE_DSN, else the embedded Postgres.",
    )
    _add_global_options(parser, hidden=False)
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    common = Parser(add_help=False)
    _add_global_options(common, hidden=True)
    commands = Commands(
        parser.add_subparsers(dest="command", metavar="COMMAND", required=True), common
    )
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"{__package__}.commands.{name}")
        for command in module.COMMANDS:
            commands.add(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status
    (:func:`exit_code`; ``maintain`` adds 3 for an unhealthy store) and never raises."""
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    try:
        args = parser.parse_args(words)
    except ArgumentsRejected as exc:
        _report_arguments_rejected(exc, as_json=_wants_json(words))
        return EXIT_USAGE
    except SystemExit as exc:  # --help or --version, already printed by argparse
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    run = Runner(args, sys.stdout, sys.stderr)
    handler: Handler = args.handler
    try:
        return handler(run)
    except (ShardstoreError, UsageError) as exc:
        code = exit_code(exc)
        _report_error(run, exc, code)
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (e.g. `shardstore history ... | head`): not an error
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except Exception as exc:
        if not run.json:
            traceback.print_exc(file=sys.stderr)
        _report_error(run, RuntimeError(f"unexpected {type(exc).__name__}: {exc}"), EXIT_FAILURE)
        return EXIT_FAILURE
