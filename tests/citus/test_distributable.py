"""The schema stays distributable on Citus (docs/scale-out.md), checked on any PostgreSQL.

Each check reads the catalog of the migrated test database (no Citus needed) and lists
what Citus would refuse: a session table's unique key without its distribution column, a
foreign key between tables that are not colocated, a LANGUAGE sql function with parameters
naming a session table, a policy with a subquery, a trigger on a session table. The same
queries are the preflight of ``store.distribute()``. The last test adds one offender of
each kind and sees every check catch it, so none of them passes vacuously.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.cli import main
from shardstore.errors import InvalidInput
from shardstore.schema.distribute import CHECKS, DistributeReport, distributability_problems


def _problems(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return distributability_problems(conn)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_migrated_schema_passes(dsn: str, check: str) -> None:
    found = _problems(dsn)[check]
    assert found == [], f"{CHECKS[check]}: {found}"


def test_every_check_catches_an_offender(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """
            CREATE TABLE shardstore.bad_items (
                session_id uuid NOT NULL, item bigint NOT NULL, tenant_id text NOT NULL,
                PRIMARY KEY (session_id, item), UNIQUE (item));
            SELECT shardstore.register_session_table_v2('shardstore.bad_items',
                                                        tenant_column => 'tenant_id');
            CREATE TABLE shardstore.bad_refs (
                session_id uuid NOT NULL, tenant_id text NOT NULL,
                item bigint NOT NULL REFERENCES shardstore.bad_items (item),
                PRIMARY KEY (session_id, item));
            SELECT shardstore.register_session_table_v2('shardstore.bad_refs',
                                                        tenant_column => 'tenant_id');
            CREATE POLICY bad_policy ON shardstore.bad_items
                USING (EXISTS (SELECT 1 FROM shardstore.sessions s
                                WHERE s.session_id = bad_items.session_id));
            CREATE FUNCTION shardstore.bad_count(p uuid) RETURNS bigint LANGUAGE sql
                AS $$ SELECT count(*) FROM shardstore.bad_items WHERE session_id = p $$;
            CREATE FUNCTION shardstore.bad_trigger() RETURNS trigger LANGUAGE plpgsql
                AS $$ BEGIN RETURN NEW; END $$;
            CREATE TRIGGER bad_trigger AFTER INSERT ON shardstore.bad_items
                FOR EACH ROW EXECUTE FUNCTION shardstore.bad_trigger();
            """
        )
        found = distributability_problems(conn)
    assert ("shardstore.bad_items", "shardstore.bad_items_item_key") in found["keys"]
    assert ("shardstore.bad_refs", "bad_refs_item_fkey", "shardstore.bad_items") in found[
        "foreign_keys"
    ]
    assert ("shardstore.bad_count(uuid)", "bad_items") in found["sql_functions"]
    assert ("shardstore.bad_items", "bad_policy") in found["policies"]
    assert ("shardstore.bad_items", "bad_trigger") in found["triggers"]


_CATALOG = """
SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'shardstore'::regnamespace),
       (SELECT count(*) FROM pg_policy), (SELECT count(*) FROM pg_trigger),
       (SELECT coalesce(string_agg(p.oid::regprocedure::text || coalesce(p.proconfig::text, ''),
                                   ',' ORDER BY p.oid), '')
          FROM pg_proc p WHERE p.pronamespace = 'shardstore'::regnamespace),
       (SELECT count(*) FROM pg_db_role_setting)
"""


def test_distribute_without_citus_changes_nothing(store: shardstore.Store, dsn: str) -> None:
    before = _one_row(dsn, _CATALOG)
    report = store.distribute()
    assert report.citus_version is None and not report.changed
    assert report.to_json()["distributed_tables"] == []
    assert _one_row(dsn, _CATALOG) == before
    with pytest.raises(InvalidInput):
        store.distribute(delegate="yes")  # type: ignore[arg-type]


def test_distribute_without_citus_async(dsn: str) -> None:
    async def go() -> DistributeReport:
        astore = await shardstore.connect_async(dsn)
        try:
            return await astore.distribute(delegate=False)
        finally:
            await astore.close()

    assert asyncio.run(go()).citus_version is None


def test_cli_says_citus_is_absent(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dsn", dsn, "distribute"]) == 0
    assert "Citus is not installed" in capsys.readouterr().out
    assert main(["--dsn", dsn, "distribute", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["citus_version"] is None and doc["changed"] is False


def _one_row(dsn: str, sql: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return tuple(row)


def test_tenant_keyed_global_tables_are_checked_too(dsn: str) -> None:
    """``artifacts`` and ``artifact_chunks`` (global tables distributed by tenant since
    0034, ``citus_tenant_tables_v1()``) pass the checks, and an offender on them is found:
    a unique key without ``tenant_id``, a trigger, a LANGUAGE sql function naming them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        listed = conn.execute(
            "SELECT r_table::text, r_column FROM shardstore.citus_tenant_tables_v1() ORDER BY 1"
        ).fetchall()
        assert listed == [
            ("shardstore.artifact_chunks", "tenant_id"),
            ("shardstore.artifact_erasures", "tenant_id"),
            ("shardstore.artifacts", "tenant_id"),
        ]
        assert conn.execute("SELECT count(*) FROM shardstore.citus_kept_local_v1()").fetchone() == (
            0,
        )
        conn.execute(
            """
            CREATE UNIQUE INDEX bad_chunk_key ON shardstore.artifact_chunks (upload_id, chunk_no);
            CREATE FUNCTION shardstore.bad_artifact_count(p text) RETURNS bigint LANGUAGE sql
                AS $$ SELECT count(*) FROM shardstore.artifacts WHERE tenant_id = p $$;
            CREATE FUNCTION shardstore.bad_artifact_trigger() RETURNS trigger LANGUAGE plpgsql
                AS $$ BEGIN RETURN NULL; END $$;
            CREATE TRIGGER bad_artifact_trigger AFTER DELETE ON shardstore.artifacts
                FOR EACH STATEMENT EXECUTE FUNCTION shardstore.bad_artifact_trigger();
            """
        )
        found = distributability_problems(conn)
    assert ("shardstore.artifact_chunks", "shardstore.bad_chunk_key") in found["keys"]
    assert ("shardstore.bad_artifact_count(text)", "artifacts") in found["sql_functions"]
    assert ("shardstore.artifacts", "bad_artifact_trigger") in found["triggers"]
