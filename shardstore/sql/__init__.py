"""Named SQL statements loaded from the ``.sql`` files in this folder (``queries.sql`` for the
core, one file per feature beside it). Names are unique across files."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_BLOCK = re.compile(r"^-- name: (\w+)\n(.*?)(?=^-- name: |\Z)", re.S | re.M)


@cache
def _queries() -> dict[str, str]:
    found: dict[str, str] = {}
    files = sorted(
        (f for f in resources.files(__name__).iterdir() if f.name.endswith(".sql")),
        key=lambda f: f.name,
    )
    for file in files:
        for name, body in _BLOCK.findall(file.read_text("utf-8")):
            if name in found:
                raise RuntimeError(f"SQL statement {name!r} is defined twice ({file.name})")
            lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
            found[name] = "\n".join(lines).rstrip().rstrip(";")
    return found


def query(name: str) -> str:
    """The SQL text of the named statement in ``queries.sql``."""
    return _queries()[name]
