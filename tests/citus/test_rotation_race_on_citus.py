"""A subject's data-key rotation on Citus against a fact writer connected straight to a
worker: the subject's lock, which a fact writer takes shared before it reads the data key
and the rotation's final check takes exclusively, is an advisory lock, and an advisory lock
holds on one node only. Both sides take it on the node holding the tenant's facts shard
(the statement is routed there), so the writer, stopped after its key read on a worker
that does not hold that shard, makes the rotation wait, and its value is re-sealed before
the old version is shredded.

Skipped unless ``SHARDSTORE_CITUS_DSN`` names a database on a Citus coordinator (as the
other tests of this folder)."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.settings import Settings
from shardstore.store import Store
from tests.encryption.test_rotation_race_artifacts import race

CITUS_DSN = os.environ.get("SHARDSTORE_CITUS_DSN")
pytestmark = pytest.mark.skipif(not CITUS_DSN, reason="SHARDSTORE_CITUS_DSN is not set")
MARKER = "quokka-citus-6620"


def _raw(dsn: str, sql: str, params: Any = None) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture(scope="module")
def citus() -> Iterator[str]:
    assert CITUS_DSN
    store = shardstore.connect(CITUS_DSN)
    try:
        store.distribute()
    finally:
        store.close()
    yield CITUS_DSN


def _node_dsn(dsn: str, host: str, port: int) -> str:
    params = conninfo_to_dict(dsn)
    params.update(host=host, port=str(port))
    return make_conninfo(**params)  # type: ignore[arg-type]


def _store_on(dsn: str, sealer: Any) -> Store:
    """A store whose connections go straight to ``dsn`` (a worker), sealing with
    ``sealer``; built without connect()'s setup, which migrates (a coordinator's job)."""
    from shardstore.core.connector import Connector
    from shardstore.history.tokens import make_counter

    config = Settings.from_kwargs({})
    store = Store(Connector(dsn, config), config, make_counter(None))
    store.ctx = dataclasses.replace(store.ctx, sealer=sealer)
    return store


def test_a_fact_writer_on_a_worker_makes_the_rotation_wait(
    citus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    enc = shardstore.connect(citus, encryption=keys)
    tenant, subject = f"citus-race-{uuid.uuid4().hex[:8]}", "ana"
    try:
        enc.remember(tenant, subject, "city", f"{MARKER} first", source=None)
        current = keys.key_for(Scope("subject", tenant, subject), create=False)
        assert current is not None
        old = current.kid
        workers = _raw(
            citus, "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid <> 0 AND isactive"
        )
        ((holder,),) = _raw(
            citus,
            "SELECT p.nodeport FROM pg_dist_shard_placement p"
            " WHERE p.shardid = get_shard_id_for_distribution_column("
            "'shardstore.facts', %s::text)",
            (tenant,),
        )
        # a worker that does not hold the tenant's facts, when there is one: its own advisory
        # lock would be of no use to the rotation
        host, port = next(((h, p) for h, p in workers if p != holder), workers[0])
        nodes = [citus] + [_node_dsn(citus, h, p) for h, p in workers]
        direct = _store_on(_node_dsn(citus, host, port), enc.ctx.sealer)
        try:
            writer, report, waited = race(
                monkeypatch,
                keys,
                nodes,
                lambda: direct.remember(tenant, subject, "likes", MARKER, source=None),
                lambda: enc.rotate_data_key(tenant_id=tenant, subject_id=subject),
            )
        finally:
            direct.close()
        assert writer.error is None
        assert waited and report.shredded_keys == (old,) and report.resealed["facts"] == 2
        assert [f.value for f in enc.recall(tenant, subject, ["city", "likes"])] == [
            f"{MARKER} first",
            MARKER,
        ]
    finally:
        enc.close()
