"""The SQL layer has one current source: a database installed from the baseline and the
function files has the same catalog as one that replayed the legacy migrations (from the
first, or from an intermediate version) and then got the function files; every function
lives in exactly one file named after it, and no migration after the baseline defines one."""

from __future__ import annotations

import ast
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from shardstore.core.executor import run_sync
from shardstore.schema import migrate
from shardstore.schema.sqlsplit import split_statements

ROOT = Path(__file__).resolve().parents[2]
# each feature package keeps its SQL in <feature>/sql/ (shardstore.core.sql)
FUNCTION_FILES = sorted((ROOT / "shardstore").glob("*/sql/functions/*.sql"))
VIEW_FILES = sorted((ROOT / "shardstore").glob("*/sql/views/*.sql"))
STATEMENT_FILES = sorted((ROOT / "shardstore").glob("*/sql/*.sql"))
LEGACY = ROOT / "migrations" / "legacy"
CREATE = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\s+(?:\"?shardstore\"?\.)?\"?(\w+)",
    re.I,
)

# One query per part of the catalog; each returns rows of text, compared as sorted lists.
# Columns by position among the live ones (a replay has dropped columns, a baseline none).
CATALOG: dict[str, str] = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.relforcerowsecurity,
               c.reloptions::text, c.relacl::text, pg_get_partkeydef(c.oid),
               pg_get_expr(c.relpartbound, c.oid), obj_description(c.oid, 'pg_class'),
               (SELECT i.inhparent::regclass::text FROM pg_inherits i WHERE i.inhrelid = c.oid)
          FROM pg_class c WHERE c.relnamespace = 'shardstore'::regnamespace""",
    "columns": """
        SELECT c.relname, row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
               a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
               a.attcollation::regcollation::text, a.attacl::text,
               col_description(c.oid, a.attnum)
          FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE c.relnamespace = 'shardstore'::regnamespace AND a.attnum > 0
           AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f')""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid),
               condeferrable, condeferred, convalidated, conislocal, coninhcount
          FROM pg_constraint WHERE connamespace = 'shardstore'::regnamespace""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'shardstore'""",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
          FROM pg_policies WHERE schemaname = 'shardstore'""",
    "triggers": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = 'shardstore'::regnamespace AND NOT t.tgisinternal""",
    "views": """
        SELECT viewname, definition FROM pg_views WHERE schemaname = 'shardstore'""",
    "sequences": """
        SELECT sequencename, data_type::text, start_value, min_value, max_value,
               increment_by, cycle, cache_size, last_value
          FROM pg_sequences WHERE schemaname = 'shardstore'""",
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proacl::text,
               obj_description(p.oid, 'pg_proc')
          FROM pg_proc p WHERE p.pronamespace = 'shardstore'::regnamespace""",
    "schema": """
        SELECT nspname, nspacl::text, obj_description(oid, 'pg_namespace')
          FROM pg_namespace WHERE nspname = 'shardstore'""",
    "extensions": "SELECT extname, extnamespace::regnamespace::text FROM pg_extension",
    "migrations": "SELECT version, name, checksum FROM shardstore.schema_migrations",
    "function_files": "SELECT name, checksum FROM shardstore.schema_functions",
}
# the runner's bookkeeping is compared above; install times differ by nature
RUNNER_TABLES = ("schema_migrations", "schema_functions")
INSTALL_TIME_DEFAULTS = ("now()", "CURRENT_TIMESTAMP", "clock_timestamp()")


def catalog(dsn: str) -> dict[str, list[str]]:
    """Every part of the shardstore schema a migration makes, and the rows of its tables
    (the registry, the configuration) less the install-time timestamps."""
    out: dict[str, list[str]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute('SET search_path = "$user", public')
        for part, sql in CATALOG.items():
            out[part] = sorted(repr(tuple(row)) for row in conn.execute(sql))
        tables = conn.execute(
            "SELECT c.oid, c.oid::regclass::text FROM pg_class c"
            " WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind = 'r'"
            "   AND c.relname <> ALL(%s) ORDER BY 2",
            (list(RUNNER_TABLES),),
        ).fetchall()
        for oid, table in tables:
            columns = [
                name
                for name, default in conn.execute(
                    "SELECT quote_ident(a.attname), pg_get_expr(d.adbin, d.adrelid)"
                    "  FROM pg_attribute a LEFT JOIN pg_attrdef d"
                    "    ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
                    " WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped"
                    " ORDER BY a.attnum",
                    (oid,),
                )
                if default not in INSTALL_TIME_DEFAULTS
            ]
            rows = conn.execute(f"SELECT {', '.join(columns)} FROM ONLY {table}").fetchall()
            out[f"rows of {table}"] = sorted(repr(tuple(row)) for row in rows)
    return out


@pytest.fixture
def empty_database(server_dsn: str) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        name = f"shardstore_layout_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return make_conninfo(server_dsn, dbname=name)

    yield make
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in made:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def upgraded_from(
    dsn: str, version: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[int], list[int]]:
    """Build the database as the shardstore of ``version`` did (its migrations replayed one
    by one, no baseline; function files only from the newest legacy version on, where this
    runner replaying the legacy files stands for the shardstore that introduced them), then
    migrate it with this one."""
    full = migrate.all_migrations()
    newest_legacy = migrate.baseline().version
    with psycopg.connect(dsn, autocommit=True) as conn:
        monkeypatch.setattr(migrate, "all_migrations", lambda: full[:version])
        first = run_sync(conn, migrate.migrate_op(use_baseline=False))
        monkeypatch.undo()
        files = conn.execute("SELECT to_regclass('shardstore.schema_functions')").fetchone()
        assert files == (None,) if version < newest_legacy else files != (None,)
        return first, run_sync(conn, migrate.migrate_op())


@pytest.mark.slow
def test_a_fresh_install_runs_the_baseline(empty_database: Callable[[], str]) -> None:
    dsn = empty_database()
    legacy = [m.version for m in migrate.all_migrations() if m.legacy]
    assert legacy == list(range(1, migrate.baseline().version + 1))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert run_sync(conn, migrate.migrate_op()) == [m.version for m in migrate.all_migrations()]
        assert run_sync(conn, migrate.migrate_op()) == []
        files: dict[str, str] = dict(
            conn.execute("SELECT name, checksum FROM shardstore.schema_functions")
        )
        assert files == {f.name: f.checksum for f in migrate.definition_files()}


@pytest.mark.slow
def test_fresh_equals_replayed_from_the_first_migration(
    empty_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh, replayed = empty_database(), empty_database()
    with psycopg.connect(fresh, autocommit=True) as conn:
        run_sync(conn, migrate.migrate_op())
    newest = migrate.baseline().version
    first, then = upgraded_from(replayed, newest, monkeypatch)
    assert first == list(range(1, newest + 1))
    assert then == [m.version for m in migrate.all_migrations() if m.version > newest]
    expected, got = catalog(fresh), catalog(replayed)
    assert expected.keys() == got.keys()
    for part in expected:
        assert got[part] == expected[part], part
    # the catalog's functions are the files' functions, each in the file of its name
    with psycopg.connect(fresh, autocommit=True) as conn:
        names = {
            r[0]
            for r in conn.execute(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'shardstore'::regnamespace"
            )
        }
    assert names == {p.stem for p in FUNCTION_FILES}
    # and its views the view files'
    with psycopg.connect(fresh, autocommit=True) as conn:
        views = {
            r[0]
            for r in conn.execute("SELECT viewname FROM pg_views WHERE schemaname = 'shardstore'")
        }
    assert views == {p.stem for p in VIEW_FILES}


@pytest.mark.slow
def test_a_database_at_an_intermediate_version_upgrades_to_the_same_catalog(
    empty_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh, old = empty_database(), empty_database()
    with psycopg.connect(fresh, autocommit=True) as conn:
        run_sync(conn, migrate.migrate_op())
    first, then = upgraded_from(old, 20, monkeypatch)
    assert first == list(range(1, 21))
    assert then == [m.version for m in migrate.all_migrations() if m.version > 20]
    expected, got = catalog(fresh), catalog(old)
    for part in expected:
        assert got[part] == expected[part], part


def test_a_changed_function_file_is_applied_once(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner applies a file whose checksum is not the recorded one, and only then."""
    shipped = migrate.definition_files()
    target = next(f for f in shipped if f.name == "rls_tenant_v2")
    edited = migrate.DefinitionFile(target.name, target.sql + "-- an edit\n")
    assert edited.checksum != target.checksum
    replaced = tuple(edited if f.name == target.name else f for f in shipped)
    monkeypatch.setattr(migrate, "definition_files", lambda: replaced)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER FUNCTION shardstore.rls_tenant_v2() SET application_name = 'stale'")
        assert run_sync(conn, migrate.migrate_op()) == []
        recorded: dict[str, str] = dict(
            conn.execute("SELECT name, checksum FROM shardstore.schema_functions")
        )
        assert recorded[target.name] == edited.checksum
        # CREATE OR REPLACE restated the definition: the setting made by hand is gone
        (config,) = conn.execute(
            "SELECT proconfig FROM pg_proc WHERE oid = 'shardstore.rls_tenant_v2()'::regprocedure"
        ).fetchone() or (None,)
        assert config is None
        conn.execute("ALTER FUNCTION shardstore.rls_tenant_v2() SET application_name = 'stale'")
        assert run_sync(conn, migrate.migrate_op()) == []  # unchanged file: not applied again
        (config,) = conn.execute(
            "SELECT proconfig FROM pg_proc WHERE oid = 'shardstore.rls_tenant_v2()'::regprocedure"
        ).fetchone() or (None,)
        assert config == ["application_name=stale"]


def test_function_files_apply_in_dependency_order() -> None:
    """A LANGUAGE sql body names only functions whose files come before its own."""
    files = migrate.definition_files()
    position = {f.name: i for i, f in enumerate(files)}
    for f in files:
        for dep in migrate._references(f.sql, set(position), f.name):
            assert position[dep] < position[f.name], (f.name, dep)


def _code(sql: str) -> str:
    """The statements of a script less comments (a comment may name a function)."""
    out = []
    for statement in split_statements(sql):
        out.append(re.sub(r"--[^\n]*", "", statement))
    return "\n".join(out)


def _defined(path: Path) -> set[str]:
    return {m.group(1).lower() for m in CREATE.finditer(_code(path.read_text("utf-8")))}


def _sql_files() -> list[Path]:
    skip = {".venv", ".git", "build", "dist", "node_modules"}
    return [
        p
        for p in ROOT.rglob("*.sql")
        if not skip & set(p.relative_to(ROOT).parts) and LEGACY not in p.parents
    ]


def test_every_function_is_defined_in_one_file_named_after_it() -> None:
    where: dict[str, list[str]] = {}
    for path in _sql_files():
        for name in _defined(path):
            where.setdefault(name, []).append(str(path.relative_to(ROOT)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert twice == {}
    for path in FUNCTION_FILES:
        assert _defined(path) == {path.stem}, path
    assert {n for n, files in where.items() if "/sql/functions/" in files[0]} == {
        p.stem for p in FUNCTION_FILES
    }


VIEW = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(?:\"?shardstore\"?\.)?\"?(\w+)", re.I)


def test_every_view_is_defined_in_one_file_named_after_it() -> None:
    """A view's one definition is its file (shardstore/<feature>/sql/views/<name>.sql): not the
    baseline, not a migration after it."""
    for path in VIEW_FILES:
        assert VIEW.findall(_code(path.read_text())) == [path.stem], path
    base = migrate.baseline()
    for part in (base.before_functions, base.after_functions):
        assert VIEW.findall(_code(part)) == []
    for m in migrate.all_migrations():
        if not m.legacy:
            assert VIEW.findall(_code(m.sql)) == [], f"{m.version:04d}_{m.name}.sql defines a view"


def test_no_migration_after_the_baseline_defines_a_function() -> None:
    newer = [m for m in migrate.all_migrations() if not m.legacy]
    for m in newer:
        assert not CREATE.search(_code(m.sql)), f"{m.version:04d}_{m.name}.sql defines a function"
    # and the baseline itself has none: they are the function files' alone
    base = migrate.baseline()
    for part in (base.before_functions, base.after_functions):
        assert not CREATE.search(_code(part))


def test_the_rule_catches_a_function_in_a_new_migration(tmp_path: Path) -> None:
    """The scan above sees a definition however it is spelled."""
    for text in (
        "CREATE FUNCTION shardstore.x_v1() RETURNS int LANGUAGE sql AS 'SELECT 1';",
        'create or replace procedure "shardstore".y_v1() language sql as $$ $$;',
        "CREATE OR REPLACE FUNCTION\n  shardstore.z_v1(a int) RETURNS int AS $$ $$ LANGUAGE sql;",
    ):
        path = tmp_path / "0099_new.sql"
        path.write_text("-- CREATE FUNCTION shardstore.only_a_comment()\n" + text)
        assert len(_defined(path)) == 1
        assert "only_a_comment" not in _defined(path)


# Entry points that no named statement calls: an operator or a migration calls them by name
# (docs/security.md, docs/maintenance.md), and the policies that rls_install_policy writes
# call rls_tenant_v1 and rls_tenant_v2.
OPERATOR_ENTRY_POINTS = {
    "register_global_table_v1",
    "register_session_table_v2",
    "rls_tenant_v2",
    "run_maintenance",
}
VERSIONED = re.compile(r"_v\d+$")
# a string the Python could send: one that holds a statement, not a message naming a function
STATEMENT = re.compile(r"\b(SELECT|CALL|PERFORM)\b", re.I)


def _names_called_by_statements() -> set[str]:
    code = " ".join(re.sub(r"--[^\n]*", "", p.read_text()) for p in STATEMENT_FILES)
    return set(re.findall(r"\bshardstore\.([a-z_][a-z0-9_]*)\s*\(", code))


def test_versions_mark_entry_points() -> None:
    """A _vN suffix marks an entry point, a function a client calls by name: one of the
    named statements (shardstore/<feature>/sql/*.sql, the only SQL the Python sends) or an
    operator's call. Every other function is a helper with a plain name, free to change with its
    callers; an entry point keeps its name until its signature changes."""
    files = {p.stem for p in FUNCTION_FILES}
    called = _names_called_by_statements() & files
    entry_points = called | OPERATOR_ENTRY_POINTS
    assert files >= OPERATOR_ENTRY_POINTS
    versioned = {name for name in files if VERSIONED.search(name)}
    assert sorted(versioned - entry_points) == [], "helpers must have plain names"
    assert sorted(entry_points - versioned - {"run_maintenance"}) == [], (
        "entry points carry their API version"
    )


def test_python_calls_functions_only_through_named_statements() -> None:
    """The Python never spells a function call of its own: what it calls is in the named
    statements (where the test above sees it) or, for Citus delegation, a name it looks up
    in the catalog (distribute.DELEGATED)."""
    from shardstore.schema import distribute

    files = {p.stem for p in FUNCTION_FILES}
    pattern = re.compile(r"\bshardstore\.([a-z_][a-z0-9_]*)\s*\(")
    spelled = set()
    for path in (ROOT / "shardstore").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and STATEMENT.search(node.value)
            ):
                spelled |= {name for name in pattern.findall(node.value) if name in files}
    assert spelled == set(), "call these through a named statement in shardstore/<feature>/sql/"
    assert set(distribute.DELEGATED) <= files
