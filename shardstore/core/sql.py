"""Where the SQL lives and how it is read.

Every feature package keeps its SQL beside its Python, in a ``sql/`` folder:

* ``<feature>/sql/<name>.sql``: named statements, the only SQL the Python sends. Each
  ``-- name: <name>`` line starts one, which runs to the next. Names are unique across all
  features; :func:`query` finds a statement by name alone.
* ``<feature>/sql/functions/<name>.sql``: the current definition of one SQL function (every
  overload of that name), and ``<feature>/sql/views/<name>.sql`` of one view. The migrator
  (:mod:`shardstore.schema.migrate`) installs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from importlib.abc import Traversable

# the packages (under shardstore) that hold a sql/ folder; a tuple, not a directory scan,
# because an installed wheel also holds shardstore/migrations/*.sql, which are not statements
FEATURE_PACKAGES = (
    "history",
    "search",
    "state",
    "artifacts",
    "context",
    "lifecycle",
    "schema",
    "integrations",
    "importers",
    "encryption",
)
SQL_FOLDER = "sql"
FUNCTIONS_FOLDER = "functions"
VIEWS_FOLDER = "views"
DEFINITION_FOLDERS = (FUNCTIONS_FOLDER, VIEWS_FOLDER)

_BLOCK = re.compile(r"^-- name: (\w+)\n(.*?)(?=^-- name: |\Z)", re.S | re.M)


def named_statements(text: str) -> dict[str, str]:
    """The statements of one file of named SQL: each ``-- name: <name>`` line starts one,
    which runs to the next; comment lines and the closing semicolon are dropped. A name
    defined twice raises RuntimeError."""
    found: dict[str, str] = {}
    for name, body in _BLOCK.findall(text):
        if name in found:
            raise RuntimeError(f"SQL statement {name!r} is defined twice")
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        found[name] = "\n".join(lines).rstrip().rstrip(";")
    return found


def feature_sql_folders() -> Iterator[tuple[str, Traversable]]:
    """``(feature, its sql/ folder)`` for every feature package that has one, in the order
    of :data:`FEATURE_PACKAGES`."""
    root = resources.files("shardstore")
    for feature in FEATURE_PACKAGES:
        folder = root / feature / SQL_FOLDER
        if folder.is_dir():
            yield feature, folder


def statement_files() -> list[tuple[str, Traversable]]:
    """Every file of named statements as ``(path relative to the package, file)``, sorted by
    that path."""
    files = [
        (f"{feature}/{SQL_FOLDER}/{entry.name}", entry)
        for feature, folder in feature_sql_folders()
        for entry in folder.iterdir()
        if entry.name.endswith(".sql") and entry.is_file()
    ]
    return sorted(files, key=lambda pair: pair[0])


def definition_entries() -> list[tuple[str, Traversable]]:
    """Every function and view file as ``(path relative to the package, file)``, sorted by
    that path."""
    files = [
        (f"{feature}/{SQL_FOLDER}/{sub}/{entry.name}", entry)
        for feature, folder in feature_sql_folders()
        for sub in DEFINITION_FOLDERS
        if (folder / sub).is_dir()
        for entry in (folder / sub).iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(files, key=lambda pair: pair[0])


@cache
def _queries() -> dict[str, str]:
    found: dict[str, str] = {}
    for path, file in statement_files():
        for name, body in named_statements(file.read_text("utf-8")).items():
            if name in found:
                raise RuntimeError(f"SQL statement {name!r} is defined twice ({path})")
            found[name] = body
    return found


def query(name: str) -> str:
    """The SQL text of the named statement ``name``, from whichever feature defines it
    (KeyError for an unknown name)."""
    return _queries()[name]
