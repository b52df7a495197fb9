"""The ``shardstore`` command line (``shardstore = "shardstore.cli:main"``).

:mod:`.app` builds the parser and runs commands, :mod:`.output` prints, :mod:`.args` parses
option values, and :mod:`.commands` holds one module per feature.
"""

from __future__ import annotations

from .app import PROG, Runner, build_parser, main
from .args import UsageError

__all__ = ["PROG", "Runner", "UsageError", "build_parser", "main"]
