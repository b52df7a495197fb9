"""The migrator's statement splitter (shardstore.schema.sqlsplit): psql's rules on tricky text, a
model of statements joined and split again, and every shipped migration applied one
statement at a time through the extended protocol (which, as Citus's workers, refuses a
string of two commands) giving the same schema as the whole files sent as they are."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg.conninfo import make_conninfo

from shardstore.schema import migrate
from shardstore.schema.sqlsplit import split_statements


def test_semicolons_inside_comments_strings_and_bodies_do_not_split() -> None:
    script = (
        "-- a comment; with a semicolon\n"
        "CREATE TABLE t (a text DEFAULT 'x;y', \"we;ird\" int);\n"
        "/* block; /* nested; */ still comment; */\n"
        "SELECT E'it\\'s; fine', 'doubled '';' AS q;\n"
        "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $fn$ BEGIN RETURN 1; END $fn$;\n"
        "DO $$ BEGIN PERFORM 1; END $$;\n"
        "CREATE FUNCTION g() RETURNS int LANGUAGE sql\n"
        "BEGIN ATOMIC\n  SELECT CASE WHEN true THEN 1 ELSE 2 END;\n  SELECT 3;\nEND;\n"
        "SELECT $1, a$b$c FROM t;\n"
        "SELECT 'tail without semicolon'\n"
    )
    pieces = split_statements(script)
    assert "".join(pieces) == script
    firsts = [" ".join(p.split()) for p in pieces]
    assert len(pieces) == 7, firsts
    assert firsts[0].startswith("-- a comment; with a semicolon CREATE TABLE t")
    assert firsts[1].startswith("/* block;") and firsts[1].endswith("AS q;")
    assert firsts[2].startswith("CREATE FUNCTION f()") and firsts[2].endswith("END $fn$;")
    assert firsts[3] == "DO $$ BEGIN PERFORM 1; END $$;"
    assert firsts[4].startswith("CREATE FUNCTION g()") and firsts[4].endswith("SELECT 3; END;")
    assert firsts[5] == "SELECT $1, a$b$c FROM t;"
    assert firsts[6] == "SELECT 'tail without semicolon'"  # code after the last ';'


def test_parentheses_and_unicode_identifiers() -> None:
    script = "CREATE RULE r AS ON INSERT TO t DO ALSO (NOTIFY a; NOTIFY b);\nSELECT größe FROM t;"
    assert split_statements(script) == [
        "CREATE RULE r AS ON INSERT TO t DO ALSO (NOTIFY a; NOTIFY b);",
        "\nSELECT größe FROM t;",
    ]
    assert split_statements("SELECT $é$;$é$; SELECT 1;") == ["SELECT $é$;$é$;", " SELECT 1;"]


def test_comments_after_the_last_statement_stay_with_it() -> None:
    assert split_statements("SELECT 1;\n-- done\n") == ["SELECT 1;\n-- done\n"]
    assert split_statements("-- nothing but comments;\n/* ; */\n") == []
    assert split_statements("BEGIN; SELECT 1; COMMIT;") == ["BEGIN;", " SELECT 1;", " COMMIT;"]


# fragments that hold no top-level semicolon however they are combined
FRAGMENTS = [
    "1",
    "'a;b'",
    "'it''s;'",
    "E'x\\';y'",
    '"col;name"',
    "$q$ ; $q$",
    "$$;$$",
    "/* ; /* ; */ ; */",
    "-- ; comment\n",
    "CASE WHEN true THEN ';' END",
    "(SELECT ';')",
    "größe",
    "$1",
    "a$b",
]


@given(st.lists(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6), max_size=6))
def test_joined_statements_split_back(parts: list[list[str]]) -> None:
    statements = ["SELECT " + " ".join(fragments) + "\n;" for fragments in parts]
    script = "\n".join(statements)
    pieces = split_statements(script)
    assert "".join(pieces) == script
    assert [p.strip() for p in pieces] == [s.strip() for s in statements]


@pytest.fixture
def two_databases(server_dsn: str) -> Iterator[tuple[str, str]]:
    names = [f"shardstore_split_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(server_dsn, dbname=names[0]), make_conninfo(server_dsn, dbname=names[1])
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# what the migrator creates before the first migration
PREAMBLE = (
    "CREATE SCHEMA shardstore; CREATE TABLE shardstore.schema_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)
FINGERPRINT = """
SELECT
  (SELECT md5(string_agg(p.oid::regprocedure::text || ':' || md5(pg_get_functiondef(p.oid)),
                         ',' ORDER BY p.oid::regprocedure::text))
     FROM pg_proc p WHERE p.pronamespace = 'shardstore'::regnamespace AND p.prokind <> 'a'),
  (SELECT md5(string_agg(x.col, ',' ORDER BY x.col))
     FROM (SELECT c.table_name || '.' || c.column_name || ':' || c.data_type || ':'
                  || coalesce(c.column_default, '') AS col
             FROM information_schema.columns c WHERE c.table_schema = 'shardstore') x),
  (SELECT md5(string_agg(indexdef, ',' ORDER BY indexdef))
     FROM pg_indexes WHERE schemaname = 'shardstore'),
  (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'shardstore'::regnamespace)
"""


@pytest.mark.slow
def test_every_migration_applies_statement_by_statement(two_databases: tuple[str, str]) -> None:
    whole, split = two_databases
    with psycopg.connect(whole) as conn:
        conn.execute(PREAMBLE)
        for m in migrate.all_migrations():
            conn.execute(m.sql.encode())  # bytes, no parameters: the simple protocol
            conn.commit()
        want = conn.execute(FINGERPRINT).fetchone()
    pieces = 0
    with psycopg.connect(split) as conn:
        conn.execute(PREAMBLE)
        for m in migrate.all_migrations():
            for statement in m.statements:
                # parameters (none) force the extended protocol: one command per string
                conn.execute(statement.replace("%", "%%"), ())
                pieces += 1
            conn.commit()
        got = conn.execute(FINGERPRINT).fetchone()
    # the legacy functions, less those the later migrations drop, are there in both
    assert want is not None and want[3] > 50
    assert got == want
    assert pieces > 2 * len(migrate.all_migrations())
