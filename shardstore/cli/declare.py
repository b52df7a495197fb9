"""How a command module declares its commands: once, beside the code that runs them.

    @command(
        "distribute",
        "distribute the store on a Citus coordinator",
        flag("--no-delegate", help="do not delegate the hot functions to the workers"),
    )
    def cmd_distribute(run: Runner) -> int: ...

    COMMANDS = (cmd_distribute,)

:func:`command` turns a handler into a :class:`Command`: its name, its one-line summary
(``--help`` lists it and shows it as the description), its arguments in ``--help`` order
(:func:`arg` takes what ``ArgumentParser.add_argument`` takes; :func:`flag` is an option
that is off unless given; :func:`one_of` groups mutually exclusive ones), and the handler,
which the command still runs when called. A parent of subcommands that runs nothing
itself is a :func:`group`; a subcommand whose parent's handler runs it is a :func:`form`.
Each module lists its top-level commands in ``COMMANDS``; :func:`shardstore.cli.app.build_parser`
makes the parsers from them (:meth:`shardstore.cli.app.Commands.add`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Handler, Runner

__all__ = ["Arg", "Command", "OneOf", "arg", "command", "flag", "form", "group", "one_of"]


@dataclass(frozen=True)
class Arg:
    """One argument: the names and settings of one ``ArgumentParser.add_argument`` call."""

    names: tuple[str, ...]
    settings: Mapping[str, Any]


@dataclass(frozen=True)
class OneOf:
    """Arguments of which a command line may give one (``required``: exactly one)."""

    choices: tuple[Arg, ...]
    required: bool = False


def arg(*names: str, **settings: Any) -> Arg:
    """An argument, spelled as ``ArgumentParser.add_argument`` takes it."""
    return Arg(names, settings)


def flag(*names: str, help: str) -> Arg:
    """An option that is off unless given (``action="store_true"``)."""
    return Arg(names, {"action": "store_true", "help": help})


def one_of(*choices: Arg, required: bool = False) -> OneOf:
    """Mutually exclusive arguments (``required``: one of them must be given)."""
    return OneOf(choices, required)


@dataclass(frozen=True)
class Command:
    """A command: its ``name``, its ``summary`` (the line ``--help`` shows, also its
    description), its ``arguments`` in ``--help`` order, the ``handler`` that runs it (None
    for a group, whose subcommand runs, or for a form, whose parent's handler runs), and its
    ``subcommands`` (one of which a command line must name; the name goes to ``dest``)."""

    name: str
    summary: str
    arguments: tuple[Arg | OneOf, ...] = ()
    handler: Handler | None = None
    subcommands: tuple[Command, ...] = ()
    dest: str = ""
    metavar: str = "WHAT"

    def __call__(self, run: Runner) -> int:
        """Run the handler (a command is still the function it was declared on)."""
        if self.handler is None:
            raise TypeError(f"the command {self.name!r} has no handler of its own")
        return self.handler(run)


def command(
    name: str,
    summary: str,
    *arguments: Arg | OneOf,
    subcommands: tuple[Command, ...] = (),
    dest: str = "",
    metavar: str = "WHAT",
) -> Callable[[Handler], Command]:
    """Declare the decorated handler as the command ``name`` (see :class:`Command`)."""

    def declare(handler: Handler) -> Command:
        return Command(name, summary, arguments, handler, subcommands, dest, metavar)

    return declare


def group(
    name: str,
    summary: str,
    *arguments: Arg | OneOf,
    subcommands: tuple[Command, ...],
    dest: str,
    metavar: str = "WHAT",
) -> Command:
    """A command that only holds ``subcommands``: the one named runs."""
    return Command(name, summary, arguments, None, subcommands, dest, metavar)


def form(name: str, summary: str, *arguments: Arg | OneOf) -> Command:
    """A subcommand without a handler of its own: its parent's handler runs it, reading
    which form was named from the parent's ``dest``."""
    return Command(name, summary, arguments)
