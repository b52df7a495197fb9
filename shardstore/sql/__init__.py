"""Named SQL statements loaded from the ``.sql`` files in this folder (``queries.sql`` for the
core, one file per feature beside it). Names are unique across files."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_BLOCK = re.compile(r"^-- name: (\w+)\n(.*?)(?=^-- name: |\Z)", re.S | re.M)


def named_statements(text: str) -> dict[str, str]:
    """The statements of one file of named SQL: each ``-- name: <name>`` line starts one,
    which runs to the next; comment lines and the closing semicolon are dropped."""
    found: dict[str, str] = {}
    for name, body in _BLOCK.findall(text):
        if name in found:
            raise RuntimeError(f"SQL statement {name!r} is defined twice")
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        found[name] = "\n".join(lines).rstrip().rstrip(";")
    return found


@cache
def _queries() -> dict[str, str]:
    found: dict[str, str] = {}
    files = sorted(
        (f for f in resources.files(__name__).iterdir() if f.name.endswith(".sql")),
        key=lambda f: f.name,
    )
    for file in files:
        for name, body in named_statements(file.read_text("utf-8")).items():
            if name in found:
                raise RuntimeError(f"SQL statement {name!r} is defined twice ({file.name})")
            found[name] = body
    return found


def query(name: str) -> str:
    """The SQL text of the named statement in ``queries.sql``."""
    return _queries()[name]
