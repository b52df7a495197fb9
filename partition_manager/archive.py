"""The archive hook: what happens to an expired partition between its detach and its drop.

A hook is a callable taking the detached table's schema-qualified name (``app.events_r…``);
it may be a coroutine function (the asyncio driver awaits it; the sync driver runs it to
completion). The runner calls it as a :class:`~partition_manager.steps.Call` step, so a
plain callable runs in a worker thread under asyncio. The table is dropped only when the
hook returns; when it raises, the table stays, detached, and the next run offers it to the
hook again.

:func:`command_hook` makes a hook of a shell command line.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

ArchiveHook = Callable[[str], Any]


class ArchiveFailed(Exception):
    """An archive command failed; the message says how (exit status, its last lines)."""


def command_line(command: str, table: str) -> str:
    """The shell command line that archives ``table``: the name (shell quoted) in place of
    ``{table}`` when the command has that placeholder, else appended as its last argument."""
    quoted = shlex.quote(table)
    if "{table}" in command:
        return command.replace("{table}", quoted)
    return f"{command} {quoted}"


def command_hook(
    command: str, *, table_env: str | None = None, env: Mapping[str, str] | None = None
) -> Callable[[str], None]:
    """A hook that runs ``command`` through the shell (see :func:`command_line`), with
    ``env`` added to the environment and the table's name in ``table_env`` when given.

    The hook returns when the command exits 0 and raises :class:`ArchiveFailed` otherwise
    (or when it cannot be started)."""

    def hook(table: str) -> None:
        full = dict(os.environ)
        full.update(env or {})
        if table_env:
            full[table_env] = table
        try:
            done = subprocess.run(
                command_line(command, table),
                shell=True,
                env=full,
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError as exc:
            raise ArchiveFailed(f"cannot run the archive command: {exc}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
            detail = "; ".join(tail)
            raise ArchiveFailed(
                f"archive command exited with status {done.returncode}"
                + (f": {detail}" if detail else "")
            )

    hook.__name__ = "archive_command"
    hook.__qualname__ = "archive_command"
    return hook


def describe_failure(exc: BaseException) -> str:
    """What went wrong with a hook, as one line for a report."""
    if isinstance(exc, ArchiveFailed):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
