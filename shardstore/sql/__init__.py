"""Named SQL statements loaded from ``queries.sql``."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_BLOCK = re.compile(r"^-- name: (\w+)\n(.*?)(?=^-- name: |\Z)", re.S | re.M)


@cache
def _queries() -> dict[str, str]:
    text = resources.files(__name__).joinpath("queries.sql").read_text("utf-8")
    found: dict[str, str] = {}
    for name, body in _BLOCK.findall(text):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        found[name] = "\n".join(lines).rstrip().rstrip(";")
    return found


def query(name: str) -> str:
    """The SQL text of the named statement in ``queries.sql``."""
    return _queries()[name]
