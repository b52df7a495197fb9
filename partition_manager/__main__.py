"""``python -m partition_manager [options]``: the same as ``shardstore maintain [options]``
(``--dsn``, ``--json`` and the maintain options; see ``--help``)."""

from __future__ import annotations

import sys

from shardstore.cli import main


def run(argv: list[str] | None = None) -> int:
    """Run one maintenance pass; returns the exit status of ``shardstore maintain``."""
    return main(["maintain", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(run())
