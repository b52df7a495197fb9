"""Schema migrations: a baseline, versioned SQL files, and one file per SQL function.

Where the schema lives (docs/architecture.md, "The SQL layer"):

* ``shardstore/<feature>/sql/functions/<name>.sql``: the current definition of every
  function and procedure of schema ``shardstore`` (all overloads of a name, their grants and
  comments), and ``shardstore/<feature>/sql/views/<name>.sql`` of every view
  (:mod:`shardstore.core.sql` says where). These files are the source: a
  change to a function or a view is an edit of its file.
* ``migrations/baseline/``: the rest of the schema as the legacy migrations left it, squashed
  (``before_functions.sql``: tables, sequences, constraints, indexes, the registry rows;
  ``after_functions.sql``: what needs the functions, policies and row security).
* ``migrations/legacy/NNNN_<feature>.sql``: the historical migrations 1..B, kept only so
  that a database created by an older shardstore (at any version) upgrades. Never edited.
* ``migrations/NNNN_<feature>.sql`` (versions after B): what must run once (tables, columns,
  indexes, data moves, DROPs); they never define a function.

A fresh database gets the baseline (with the function and view files between its two parts) and is
recorded at versions 1..B, as a database that replayed the legacy files is; an existing one
gets its missing legacy and versioned migrations one by one. Then every function or view
file whose sha256 differs from the one recorded in ``shardstore.schema_functions`` is
applied (all of them after any versioned migration ran, since a migration may drop a
function or a view), in dependency order. Everything happens under
``pg_advisory_xact_lock``, so concurrent migrators serialise, and running the runner on an
up-to-date database changes nothing.

The files ship inside the wheel: ``migrations/`` as the package ``shardstore.migrations``
(a package-dir mapping, see setup.py), the function and view files as data of the feature packages.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from ..core.sql import definition_entries
from ..core.steps import Op, Q, Tx
from ..errors import ConfigurationError
from .sqlsplit import split_statements

# An arbitrary 64-bit key, fixed forever: every shardstore migrator takes this lock.
MIGRATION_LOCK_KEY = 0x5348_4152_4453_0001
# the package the schema files are installed as (the source tree's migrations/ folder)
MIGRATIONS_PACKAGE = "shardstore.migrations"
# sub-folders of it: the historical migrations, and the squashed schema they produce
LEGACY_FOLDER = "legacy"
BASELINE_FOLDER = "baseline"
BASELINE_PARTS = ("before_functions.sql", "after_functions.sql")
# the runner's own tables (the baseline leaves them out: the runner makes them first)
SCHEMA_MIGRATIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS shardstore.schema_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)
# which function or view file is installed: its name and the sha256 of its text
SCHEMA_FUNCTIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS shardstore.schema_functions ("
    " name text PRIMARY KEY, checksum text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_FUNCTION_FILE = re.compile(r"^([a-z_][a-z0-9_]*)\.sql$")
_COMMENT = re.compile(r"--[^\n]*")
# definitions PostgreSQL resolves when they are created: SQL-language bodies and views
_CHECKED_BODY = re.compile(
    r"\bLANGUAGE\s+'?sql\b|\bBEGIN\s+ATOMIC\b|\bCREATE\s+(?:OR\s+REPLACE\s+)?VIEW\b", re.I
)


@dataclass(frozen=True, slots=True)
class Migration:
    """One versioned file of ``migrations/``: applied once, in version order, its checksum
    recorded (a changed applied file is refused)."""

    version: int
    name: str
    sql: str
    # True for the historical files that the baseline squashes (migrations/legacy/)
    legacy: bool = False

    @property
    def checksum(self) -> str:
        """sha256 of the file's text, hex."""
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def statements(self) -> list[str]:
        """The file's statements, sent one at a time: Citus forwards the whole query string
        of some DDL to its workers, which refuse a string of several commands (sqlsplit)."""
        return split_statements(self.sql)


@dataclass(frozen=True, slots=True)
class DefinitionFile:
    """``shardstore/<feature>/sql/functions/<name>.sql`` (every overload of one function
    name) or ``shardstore/<feature>/sql/views/<name>.sql`` (one view)."""

    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """sha256 of the file's text, hex: the file is applied again when it changes."""
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def statements(self) -> list[str]:
        """The file's statements, sent one at a time (as :attr:`Migration.statements`)."""
        return split_statements(self.sql)


@dataclass(frozen=True, slots=True)
class Baseline:
    """The schema as the legacy migrations 1..``version`` leave it, less the functions."""

    version: int
    before_functions: str
    after_functions: str


def _migration_files(folder: Traversable, legacy: bool) -> list[Migration]:
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8"), legacy)
            )
    return found


@cache
def all_migrations() -> tuple[Migration, ...]:
    """Every versioned migration shipped with this version of shardstore, in order: the
    legacy ones (which the baseline stands for on a fresh database), then the newer ones."""
    root = resources.files(MIGRATIONS_PACKAGE)
    found = _migration_files(root / LEGACY_FOLDER, True) + _migration_files(root, False)
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration versions must be 1..n without gaps, found {versions}")
    newest_legacy = max((m.version for m in found if m.legacy), default=0)
    if any(not m.legacy and m.version < newest_legacy for m in found):
        raise RuntimeError("every migration in migrations/legacy/ must precede the others")
    return tuple(found)


@cache
def baseline() -> Baseline:
    """The baseline, which stands for every legacy migration."""
    folder = resources.files(MIGRATIONS_PACKAGE) / BASELINE_FOLDER
    before, after = (folder.joinpath(part).read_text("utf-8") for part in BASELINE_PARTS)
    version = max((m.version for m in all_migrations() if m.legacy), default=0)
    match = re.search(r"legacy migrations 1\.\.(\d+)\b", before)
    if match is None or int(match.group(1)) != version:
        raise RuntimeError(
            f"migrations/baseline/ does not stand for legacy migrations 1..{version}: "
            "run scripts/gen_schema.py"
        )
    return Baseline(version, before, after)


def _references(sql: str, names: set[str], own: str) -> set[str]:
    """The other functions and views a file needs at creation: those a view, a LANGUAGE sql
    or a BEGIN ATOMIC body names (PostgreSQL resolves them then); a PL/pgSQL body is
    resolved at its first call, so it needs none (and PL/pgSQL functions may call each
    other in cycles)."""
    code = _COMMENT.sub("", sql)
    if not _CHECKED_BODY.search(code):
        return set()
    words = set(re.findall(r"[a-z_][a-z0-9_]*", code.lower()))
    return (words & names) - {own}


@cache
def definition_files() -> tuple[DefinitionFile, ...]:
    """Every function and view file, what is used before its users: a view, a LANGUAGE sql
    body (and a BEGIN ATOMIC one) is checked when it is created, so what it names must exist
    by then (see _references); ties go by name. A name is a function's or a view's, never
    both."""
    files: dict[str, DefinitionFile] = {}
    for path, entry in definition_entries():
        match = _FUNCTION_FILE.match(entry.name)
        if match:
            if match.group(1) in files:
                raise RuntimeError(f"{match.group(1)} has two files (one is {path})")
            files[match.group(1)] = DefinitionFile(match.group(1), entry.read_text("utf-8"))
    names = set(files)
    needs = {name: _references(f.sql, names, name) for name, f in files.items()}
    users: dict[str, set[str]] = {name: set() for name in files}
    for name, deps in needs.items():
        for dep in deps:
            users[dep].add(name)
    waiting = {name: len(deps) for name, deps in needs.items()}
    ready = [name for name, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    ordered: list[str] = []
    while len(ordered) < len(files):
        if not ready:  # a cycle: release the name with the fewest unmet dependencies
            stuck = min((n, name) for name, n in waiting.items() if n > 0)[1]
            waiting[stuck] = 0
            heapq.heappush(ready, stuck)
        name = heapq.heappop(ready)
        if waiting[name] < 0:
            continue
        waiting[name] = -1
        ordered.append(name)
        for user in users[name]:
            if waiting[user] > 0:
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready, user)
    return tuple(files[name] for name in ordered)


def _apply(statements: list[str]) -> Iterator[Q]:
    for statement in statements:
        yield Q(statement, None, fetch="none", prepare=False)


def _baseline_op(base: Baseline, legacy: list[Migration]) -> Op[list[int]]:
    """A fresh database: the baseline and the function and view files in one transaction,
    recorded as the legacy versions it stands for (and each file's checksum)."""
    yield Tx.BEGIN
    yield Q("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,), fetch="none")
    (recorded,) = yield Q("SELECT count(*) FROM shardstore.schema_migrations", fetch="one")
    if recorded:  # another migrator got there first
        yield Tx.COMMIT
        return []
    yield from _apply(split_statements(base.before_functions))
    for f in definition_files():
        yield from _apply(f.statements)
    yield from _apply(split_statements(base.after_functions))
    for m in legacy:
        yield Q(
            "INSERT INTO shardstore.schema_migrations (version, name, checksum)"
            " VALUES (%s, %s, %s)",
            (m.version, m.name, m.checksum),
            fetch="none",
        )
    for f in definition_files():
        yield Q(
            "INSERT INTO shardstore.schema_functions (name, checksum) VALUES (%s, %s)",
            (f.name, f.checksum),
            fetch="none",
        )
    yield Tx.COMMIT
    return [m.version for m in legacy]


def _functions_op(every: bool) -> Op[None]:
    """Apply each function or view file whose checksum is not the recorded one (``every``: all)."""
    yield Tx.BEGIN
    yield Q("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,), fetch="none")
    rows = yield Q("SELECT name, checksum FROM shardstore.schema_functions")
    recorded = dict(rows)
    shipped = definition_files()
    for f in shipped:
        if every or recorded.get(f.name) != f.checksum:
            yield from _apply(f.statements)
            yield Q(
                "INSERT INTO shardstore.schema_functions AS s (name, checksum)"
                " VALUES (%s, %s) ON CONFLICT (name) DO UPDATE"
                " SET checksum = EXCLUDED.checksum, applied_at = now()",
                (f.name, f.checksum),
                fetch="none",
            )
    gone = sorted(set(recorded) - {f.name for f in shipped})
    if gone:  # the file was removed with the migration that dropped the function
        yield Q(
            "DELETE FROM shardstore.schema_functions WHERE name = ANY(%s)", (gone,), fetch="none"
        )
    yield Tx.COMMIT


def migrate_op(*, use_baseline: bool = True) -> Op[list[int]]:
    """Apply every pending migration, then every changed function or view file; returns the
    versions applied by this call (on a fresh database, those the baseline stands for).
    ``use_baseline=False`` replays the legacy migrations one by one on a fresh database too,
    as the shardstore versions before the baseline did (the tests prove that both routes
    give the same schema)."""
    applied: list[int] = []
    migrations = all_migrations()
    shipped = {m.version: m.checksum for m in migrations}
    base = baseline()
    # a caller may ask for the schema of an older version (tests build old databases so):
    # the function and view files and the baseline are the newest schema, which needs every legacy
    # migration
    current = bool(migrations) and migrations[-1].version >= base.version
    functions = {f.name: f.checksum for f in definition_files()} if current else {}
    # an up-to-date database needs no lock and no DDL, so a role without CREATE rights
    # (e.g. a tenant role under Row-Level Security) can connect
    table, ftable, readable = yield Q(
        "SELECT to_regclass('shardstore.schema_migrations')::text,"
        " to_regclass('shardstore.schema_functions')::text,"
        " CASE WHEN to_regclass('shardstore.schema_functions') IS NOT NULL"
        " THEN has_table_privilege('shardstore.schema_functions', 'SELECT') END",
        fetch="one",
    )
    if table is not None:
        rows = yield Q("SELECT version, checksum FROM shardstore.schema_migrations")
        if dict(rows) == shipped:
            if not current:
                return applied
            if ftable is not None and not readable:
                # only the schema's owner applies these files: others check the versions
                return applied
            if ftable is not None:
                rows = yield Q("SELECT name, checksum FROM shardstore.schema_functions")
                if dict(rows) == functions:
                    return applied
    yield Tx.BEGIN
    yield Q("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,), fetch="none")
    yield Q("CREATE SCHEMA IF NOT EXISTS shardstore", fetch="none")
    yield Q(SCHEMA_MIGRATIONS_DDL, fetch="none")
    if current:
        yield Q(SCHEMA_FUNCTIONS_DDL, fetch="none")
    yield Tx.COMMIT
    # a versioned migration may drop (or re-create) a function: the files are applied after
    # every one of them
    stale = False
    if current:
        (recorded,) = yield Q("SELECT count(*) FROM shardstore.schema_migrations", fetch="one")
        if not recorded and use_baseline:
            applied += yield from _baseline_op(base, [m for m in migrations if m.legacy])
    for migration in migrations:
        if migration.version in applied:
            continue
        yield Tx.BEGIN
        yield Q("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,), fetch="none")
        done = yield Q(
            "SELECT checksum FROM shardstore.schema_migrations WHERE version = %s",
            (migration.version,),
            fetch="one",
        )
        if done is not None and done[0] != migration.checksum:
            raise ConfigurationError(
                f"migration {migration.version} ({migration.name}) in this database differs "
                "from the one this shardstore ships: the database was built by another "
                "(development) version. Use a fresh database, or reinstall the version that "
                "created it."
            )
        if done is None:
            yield from _apply(migration.statements)
            yield Q(
                "INSERT INTO shardstore.schema_migrations (version, name, checksum)"
                " VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
                fetch="none",
            )
            applied.append(migration.version)
            stale = True
        yield Tx.COMMIT
    if current:
        yield from _functions_op(stale)
    return applied
