"""Metrics behind a real PgBouncer in transaction mode (tests/pgbouncer.py): the metrics
statement runs from a DSN through the pooler and from a pooled store, scrape after scrape
(each may meet another server connection: nothing is left prepared), and call metrics
look a session's tenant up through it."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import shardstore
from shardstore.integrations import metrics


def _scrape(url: str) -> dict[str, float]:
    """The page's samples by name (the first of each name)."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, float(sample.value))
    return found


@pytest.mark.slow
def test_metrics_through_the_pooler(pooled_dsn: str) -> None:
    # before any store connected (no config row, no partition yet): one row of zeros
    assert metrics.snapshot(pooled_dsn).partitions_ahead == 0
    with shardstore.connect(pooled_dsn, pool_min_size=2, pool_max_size=4) as store:
        assert store.connector.pooler is True
        assert metrics.snapshot(pooled_dsn).partitions_ahead == 4
        with (
            metrics.serve(store, "127.0.0.1:0") as server,
            metrics.serve(pooled_dsn, "127.0.0.1:0", record_calls=False) as by_dsn,
        ):
            sid = store.create_session("pooled")
            for n in range(1, 4):
                store.append_turn(sid, {"role": "user", "content": f"turn {n}"})
                seen, seen_by_dsn = _scrape(server.url), _scrape(by_dsn.url)
                assert seen["shardstore_buffer_turns"] == n
                assert seen["shardstore_appended_turns_total"] == n
                assert seen_by_dsn["shardstore_buffer_turns"] == n
                assert seen_by_dsn["shardstore_database_up"] == 1
            assert server.gauges.statements == by_dsn.gauges.statements == 3
            # a session made elsewhere: its tenant is looked up through the pooler
            other = shardstore.connect(pooled_dsn, pool_min_size=1, pool_max_size=1)
            try:
                theirs = other.create_session("theirs")
            finally:
                other.close()
            metrics._tenants.pop(theirs, None)
            store.append_turn(theirs, {"role": "user", "content": "x"})
            with urllib.request.urlopen(server.url, timeout=30) as response:
                page = response.read().decode()
            assert 'shardstore_tenant_id="theirs"' in page
