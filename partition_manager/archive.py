"""The archive hook: what happens to an expired partition between its detach and its drop.

A hook is a callable taking the detached table's schema-qualified name (``shardstore.
agent_history_r20260105t000000``), or a shell command. A command gets the name substituted
for ``{table}`` when it contains that placeholder, else appended as its last argument (shell
quoted); its environment also carries ``SHARDSTORE_ARCHIVE_TABLE`` (the name) and, when the
store knows it, ``SHARDSTORE_DSN``. The table is dropped only when the hook succeeds (the
callable returns, the command exits 0); otherwise it stays, detached, and the next run
offers it to the hook again.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable
from typing import Any

ArchiveHook = Callable[[str], Any] | str


def command_line(command: str, table: str) -> str:
    """The shell command line that archives ``table``."""
    quoted = shlex.quote(table)
    if "{table}" in command:
        return command.replace("{table}", quoted)
    return f"{command} {quoted}"


def run_archive_hook(hook: ArchiveHook, table: str, dsn: str | None) -> str | None:
    """Run the hook for ``table``; None on success, else what went wrong."""
    if callable(hook):
        try:
            hook(table)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None
    env = dict(os.environ, SHARDSTORE_ARCHIVE_TABLE=table)
    if dsn:
        env["SHARDSTORE_DSN"] = dsn
    try:
        done = subprocess.run(
            command_line(hook, table),
            shell=True,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        return f"cannot run the archive command: {exc}"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
        detail = "; ".join(tail)
        return f"archive command exited with status {done.returncode}" + (
            f": {detail}" if detail else ""
        )
    return None
