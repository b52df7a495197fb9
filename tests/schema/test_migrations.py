"""Migrations: idempotent, safe when run concurrently, and every statement the code sends
is valid against the schema they build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid
import zipfile
from pathlib import Path

import psycopg
import pytest

import shardstore
from shardstore.core.executor import run_sync
from shardstore.core.sql import _queries, definition_entries, statement_files
from shardstore.schema.migrate import (
    BASELINE_PARTS,
    Migration,
    all_migrations,
    definition_files,
    migrate_op,
)


@pytest.mark.slow
def test_concurrent_migrators_apply_each_version_once(empty_dsn: str) -> None:
    applied: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def migrate() -> None:
        try:
            with psycopg.connect(empty_dsn, autocommit=True) as conn:
                barrier.wait()
                applied.append(run_sync(conn, migrate_op()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    versions = [m.version for m in all_migrations()]
    assert sorted(v for run in applied for v in run) == versions
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert run_sync(conn, migrate_op()) == []
        rows = conn.execute(
            "SELECT version FROM shardstore.schema_migrations ORDER BY 1"
        ).fetchall()
        assert [r[0] for r in rows] == versions


def test_every_query_is_valid_against_the_migrated_schema(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, sql in _queries().items():
            counter = iter(range(1, 100))
            numbered = re.sub(r"%s", lambda _, c=counter: f"${next(c)}", sql)
            names: dict[str, int] = {}  # %(name)s: one number per name
            numbered = re.sub(
                r"%\((\w+)\)s",
                lambda m, n=names: f"${n.setdefault(m.group(1), len(n) + 1)}",
                numbered,
            )
            # PREPARE parses and analyses: every table, column, function and type must exist
            conn.execute(f"PREPARE check_{name} AS {numbered}")
            conn.execute(f"DEALLOCATE check_{name}")


def test_a_changed_migration_is_reported(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE shardstore.schema_migrations SET checksum = 'edited' WHERE version = 1"
        )
        with pytest.raises(shardstore.ConfigurationError, match="differs"):
            run_sync(conn, migrate_op())


# sha256 of the files as databases created before the move to migrations/ recorded them
APPLIED_CHECKSUMS = {
    1: "c2ec455e838ed55eb11cc89a6e223e7a75af4fac53bbd0eedfb3c238c55d8418",
    2: "f1e28d0d382e421ddd09d8281d77bb73ea08f02e359c12b610af4cc90e6fc462",
    3: "e59c702e23c85346ab03d6921ea29c8a948ff4fdc81b17e7fbb2dcd01b53158d",
    4: "d26d5e995db3bd6a9b6ae36d5925063263ba056949e80a1765dc0215b87126a5",
    5: "1c4fd9261d83f2d53b9548eaf0a76886b62b493c4a26df38b7b93f888f882a04",
}


def _shipped_path(m: Migration) -> str:
    """Where a migration lies inside the package: the legacy ones in legacy/."""
    return f"{'legacy/' if m.legacy else ''}{m.version:04d}_{m.name}.sql"


def test_the_files_are_read_from_the_package_unchanged() -> None:
    from importlib import resources

    from shardstore.schema.migrate import (
        LEGACY_FOLDER,
        MIGRATIONS_PACKAGE,
        definition_files,
    )

    root = resources.files(MIGRATIONS_PACKAGE)
    names = sorted(
        [e.name for e in root.iterdir() if e.name.endswith(".sql")]
        + [f"legacy/{e.name}" for e in (root / LEGACY_FOLDER).iterdir() if e.name.endswith(".sql")]
    )
    shipped = all_migrations()
    assert names == sorted(_shipped_path(m) for m in shipped)
    for version, checksum in APPLIED_CHECKSUMS.items():
        assert shipped[version - 1].checksum == checksum, version
    # the function and view files are read whole, one per file of the features'
    # sql/functions/ and sql/views/ folders
    on_disk = {e.name[: -len(".sql")]: e.read_text("utf-8") for _, e in definition_entries()}
    assert {f.name: f.sql for f in definition_files()} == on_disk
    assert {"turns", "purge_targets"} <= set(on_disk)


@pytest.mark.slow
def test_a_database_of_version_5_upgrades_with_rls_on(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0006 on a database made before it: row security stays on (the registry gets it too)
    and a tenant role granted before keeps working, purges included."""
    from shardstore.schema import migrate, rls

    full = all_migrations()
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        monkeypatch.setattr(migrate, "all_migrations", lambda: full[:5])
        assert run_sync(conn, migrate.migrate_op()) == [1, 2, 3, 4, 5]
        monkeypatch.undo()
        role = f"ss_up_{uuid.uuid4().hex[:8]}"
        conn.execute(f'CREATE ROLE "{role}" NOLOGIN')
        conn.execute("SELECT shardstore.grant_tenant_role_v1(%s::text::regrole)", (role,))
        conn.execute("SELECT shardstore.enable_rls_v1()")
    try:
        store = shardstore.connect(empty_dsn, chunk_tokens=200)  # applies 0006
        try:
            acme = store.create_session("acme")
            other = store.create_session("globex")
            for sid in (acme, other):
                store.append_turns(sid, [{"role": "user", "content": "hi " * 50}] * 10)
        finally:
            store.close()
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            # every registered table (partitions made later need enable_rls again, as before)
            (on,) = conn.execute(
                "SELECT bool_and(c.relrowsecurity) FROM shardstore.rls_tables() t"
                " JOIN pg_class c ON c.oid = t.r_table"
            ).fetchone() or (False,)
            assert on
            rows = conn.execute(
                "SELECT version FROM shardstore.schema_migrations ORDER BY 1"
            ).fetchall()
            assert [r[0] for r in rows] == [m.version for m in full]
            conn.execute(f'SET ROLE "{role}"')
            rls.set_session_tenant(conn, "acme")
            tenant = rls.connect_tenant(conn)
            ids = {r[0] for r in conn.execute("SELECT session_id FROM shardstore.sessions")}
            assert ids == {acme}
            assert conn.execute("SELECT count(*) FROM shardstore.table_registry").fetchone()
            assert tenant.purge_session(acme).tombstoned
            conn.execute("RESET ROLE")
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


@pytest.mark.slow
def test_the_wheel_ships_the_migrations(empty_dsn: str, tmp_path: Path) -> None:
    """The built wheel holds migrations/ as shardstore.migrations; a fresh interpreter on the
    unpacked wheel (not the source tree) reads the files and migrates a fresh database."""
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            str(root),
            "-w",
            str(tmp_path / "wheel"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = (tmp_path / "wheel").glob("shardstore-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    for m in all_migrations():
        assert f"shardstore/migrations/{_shipped_path(m)}" in names
    for part in BASELINE_PARTS:
        assert f"shardstore/migrations/baseline/{part}" in names
    shipped_files = {f"shardstore/{path}" for path, _ in definition_entries()} & names
    assert len(shipped_files) == len(definition_files())
    statements = {f"shardstore/{path}" for path, _ in statement_files()}
    assert statements and statements <= names
    assert "shardstore/importers/source.sql" in names  # the SQL sent to a source database
    script = (
        "import sys, psycopg, shardstore, shardstore.migrations as pkg\n"
        "from shardstore.schema.migrate import all_migrations, definition_files\n"
        "assert shardstore.__file__.startswith(sys.argv[2]), shardstore.__file__\n"
        "assert pkg.__file__.startswith(sys.argv[2]), pkg.__file__\n"
        "shardstore.connect(sys.argv[1]).close()\n"
        "with psycopg.connect(sys.argv[1]) as c:\n"
        "    rows = dict(c.execute('SELECT version, checksum FROM shardstore.schema_migrations'))\n"
        "assert rows == {m.version: m.checksum for m in all_migrations()}, rows\n"
        "with psycopg.connect(sys.argv[1]) as c:\n"
        "    done = dict(c.execute('SELECT name, checksum FROM shardstore.schema_functions'))\n"
        "assert done == {f.name: f.checksum for f in definition_files()}, done\n"
        "assert len(done) > 100, done\n"
        "print(len(rows))\n"
    )
    site = str(tmp_path / "site")
    out = subprocess.run(
        [sys.executable, "-c", script, empty_dsn, site],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": site},
        timeout=120,
    )
    assert out.stdout.strip() == str(len(all_migrations()))
