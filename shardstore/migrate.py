"""Schema migrations: versioned SQL files applied in order, each in its own transaction.

The files are the top-level ``migrations/`` folder of the source tree, shipped inside the
wheel as the package ``shardstore.migrations`` (a package-dir mapping, see setup.py) and
read with importlib.resources. The runner serialises concurrent migrators with
``pg_advisory_xact_lock``, records each applied version in ``shardstore.schema_migrations``
and is idempotent: running it on an up-to-date database changes nothing.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from .core.steps import Op, Q, Tx
from .errors import ConfigurationError
from .sqlsplit import split_statements

# An arbitrary 64-bit key, fixed forever: every shardstore migrator takes this lock.
MIGRATION_LOCK_KEY = 0x5348_4152_4453_0001
# the package the schema files are installed as (the source tree's migrations/ folder)
MIGRATIONS_PACKAGE = "shardstore.migrations"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def statements(self) -> list[str]:
        """The file's statements, sent one at a time: Citus forwards the whole query string
        of some DDL to its workers, which refuse a string of several commands (sqlsplit)."""
        return split_statements(self.sql)


@cache
def all_migrations() -> tuple[Migration, ...]:
    """Every migration shipped with this version of shardstore, in order."""
    found = []
    for entry in resources.files(MIGRATIONS_PACKAGE).iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration versions must be 1..n without gaps, found {versions}")
    return tuple(found)


def migrate_op() -> Op[list[int]]:
    """Apply every pending migration; returns the versions applied by this call."""
    applied: list[int] = []
    shipped = {m.version: m.checksum for m in all_migrations()}
    # an up-to-date database needs no lock and no DDL, so a role without CREATE rights
    # (e.g. a tenant role under Row-Level Security) can connect
    (table,) = yield Q("SELECT to_regclass('shardstore.schema_migrations')::text", fetch="one")
    if table is not None:
        rows = yield Q("SELECT version, checksum FROM shardstore.schema_migrations")
        if dict(rows) == shipped:
            return applied
    yield Tx.BEGIN
    yield Q("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,), fetch="none")
    yield Q("CREATE SCHEMA IF NOT EXISTS shardstore", fetch="none")
    yield Q(
        "CREATE TABLE IF NOT EXISTS shardstore.schema_migrations ("
        " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())",
        fetch="none",
    )
    yield Tx.COMMIT
    for migration in all_migrations():
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
            for statement in migration.statements:
                yield Q(statement, None, fetch="none", prepare=False)
            yield Q(
                "INSERT INTO shardstore.schema_migrations (version, name, checksum)"
                " VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
                fetch="none",
            )
            applied.append(migration.version)
        yield Tx.COMMIT
    return applied
