"""CLI commands of a lifecycle feature; registered by shardstore.cli.build_parser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def register(command: Callable[..., Any]) -> None:
    """Add this module's subcommands with ``command(name, handler, help) -> parser``."""
