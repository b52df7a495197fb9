"""Metrics through the OpenTelemetry metrics API and the Prometheus endpoint: the endpoint
started on a free port and scraped over HTTP (values parsed with prometheus_client's own
parser move after appends, a run awaiting a human and maintenance; one statement per
scrape), the ``shardstore metrics`` command (one-shot, ``--json``, ``--serve`` in a child
process), call metrics on the asyncio store, the operator role's privileges, tenant
isolation under Row-Level Security, and hostile input (addresses, sources, DSNs)."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.cli import main
from shardstore.integrations import metrics
from shardstore.schema import rls
from tests.tenancy import as_tenant

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
SECRET = "metrics-secret-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def shared_dsn(server_dsn: str, _databases: Any) -> Iterator[str]:
    """One migrated database for the module's tests that only add to it."""
    name = _databases.take()
    yield make_conninfo(server_dsn, dbname=name)
    _databases.drop_later([name])


@pytest.fixture(scope="module")
def shared_store(shared_dsn: str) -> Iterator[shardstore.Store]:
    store = shardstore.connect(shared_dsn, pool_min_size=1, pool_max_size=2)
    yield store
    store.close()


def _samples(text: str) -> Samples:
    """Every sample of a Prometheus text page, without the OpenTelemetry scope labels."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = frozenset(
                (k, v) for k, v in sample.labels.items() if not k.startswith("otel_scope_")
            )
            found[(sample.name, labels)] = sample.value
    return found


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return _samples(response.read().decode())


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    wanted = frozenset(labels.items())
    for (sample, have), value in samples.items():
        if sample == name and wanted <= have:
            return value
    return None


def _calls(samples: Samples, method: str) -> float:
    count = _value(
        samples, "shardstore_client_operation_duration_seconds_count", db_operation_name=method
    )
    return count or 0.0


@pytest.mark.slow
def test_endpoint_values_move_after_appends_and_maintenance(
    shared_store: shardstore.Store,
) -> None:
    store = shared_store
    with metrics.serve(store, "127.0.0.1:0") as server:
        assert server.port > 0 and server.url.endswith("/metrics")
        before = _scrape(server.url)
        assert server.gauges.statements == 1  # one statement per scrape
        assert _value(before, "shardstore_database_up") == 1
        assert _value(before, "shardstore_partitions_ahead") == 4  # connect()'s premake
        assert (_value(before, "shardstore_partitions_ahead_time_seconds") or 0) > 0
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        sid = store.create_session(tenant)
        store.append_turn(sid, {"role": "user", "content": SECRET}, idempotency_key="k1")
        store.append_turn(sid, {"role": "user", "content": SECRET}, idempotency_key="k1")
        store.append_turns(
            sid, [{"role": "assistant", "content": "é" * 10}, {"role": "user", "content": "x"}]
        )
        run = store.open_run(sid, framework="test", thread_key="t1")
        store.mark_awaiting(run.run_id, {"approve": "refund"})
        with pytest.raises(shardstore.SessionNotFound):
            store.tail(uuid.uuid4())
        after = _scrape(server.url)
        assert server.gauges.statements == 2
        # the repeated key stored nothing and is not counted
        assert _value(after, "shardstore_appended_turns_total", shardstore_tenant_id=tenant) == 3
        size = _value(after, "shardstore_appended_bytes_total", shardstore_tenant_id=tenant)
        assert size is not None and size > 2 * len(SECRET) // 2 + 20
        assert _calls(after, "append_turn") == _calls(before, "append_turn") + 2
        assert _calls(after, "append_turns") == _calls(before, "append_turns") + 1
        failed = _value(
            after,
            "shardstore_client_operation_duration_seconds_count",
            db_operation_name="tail",
            error_type="SessionNotFound",
            gen_ai_operation_name="search_memory",
        )
        assert failed is not None and failed >= 1
        buffered_before = _value(before, "shardstore_buffer_turns") or 0
        assert _value(after, "shardstore_buffer_turns") == buffered_before + 3
        assert _value(after, "shardstore_buffer_oldest_age_seconds") is not None
        awaiting_before = _value(before, "shardstore_runs_awaiting_human") or 0
        assert _value(after, "shardstore_runs_awaiting_human") == awaiting_before + 1
        assert _value(after, "shardstore_runs_awaiting_human_oldest_age_seconds") is not None
        last_before = _value(before, "shardstore_maintenance_last_timestamp_seconds") or 0
        store.resume_run(run.run_id)
        report = store.maintain(embed=False, premake=6, flush_idle=timedelta(0))
        assert report.healthy
        done = _scrape(server.url)
        assert server.gauges.statements == 3
        assert (_value(done, "shardstore_maintenance_last_timestamp_seconds") or 0) > last_before
        assert _value(done, "shardstore_maintenance_last_healthy") == 1
        assert _value(done, "shardstore_partitions_ahead") == 6
        assert _value(done, "shardstore_runs_awaiting_human") == awaiting_before
        assert _value(done, "shardstore_buffer_turns") == 0  # every idle buffer folded
        assert _value(done, "shardstore_buffer_oldest_age_seconds") is None
        assert _value(done, "shardstore_embedding_backlog") is not None
        page = urllib.request.urlopen(server.url, timeout=30).read().decode()
        assert SECRET not in page and "refund" not in page
    assert not metrics.recording()  # closing it stopped recording into its provider
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url, timeout=5)


def test_one_shot_command_and_json(
    shared_dsn: str, shared_store: shardstore.Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dsn", shared_dsn, "metrics"]) == 0
    text = capsys.readouterr().out
    samples = _samples(text)
    assert _value(samples, "shardstore_database_up") == 1
    expected = metrics.snapshot(shared_store)
    assert _value(samples, "shardstore_partitions_ahead") == expected.partitions_ahead
    assert _value(samples, "shardstore_embedding_backlog") == expected.embedding_backlog
    assert main(["--dsn", shared_dsn, "--json", "metrics"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["partitions_ahead"] == expected.partitions_ahead
    assert set(doc) == {
        "embedding_backlog",
        "partitions_ahead",
        "partitions_ahead_seconds",
        "buffered_turns",
        "oldest_buffered_age_seconds",
        "runs_awaiting_human",
        "oldest_awaiting_age_seconds",
        "last_maintenance_time",
        "last_maintenance_healthy",
    }


def _first_line(proc: subprocess.Popen[str], timeout: float = 120.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the metrics command printed nothing"
    return proc.stdout.readline()


@pytest.mark.slow
def test_serve_command_in_a_child_process(shared_dsn: str, shared_store: shardstore.Store) -> None:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "shardstore", "--dsn", shared_dsn, "--json", "metrics"),
            *("--serve", "127.0.0.1:0"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = json.loads(_first_line(proc))["url"]
        before = _scrape(url)
        sid = shared_store.create_session("cli-tenant")
        shared_store.append_turns(sid, [{"role": "user", "content": "a"}] * 2)
        after = _scrape(url)
        moved = (_value(after, "shardstore_buffer_turns") or 0) - (
            _value(before, "shardstore_buffer_turns") or 0
        )
        assert moved == 2
        # the child records no calls of its own: database gauges only
        assert _value(after, "shardstore_appended_turns_total") is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


BAD_ADDRESSES = [
    "",
    "localhost",
    "localhost:",
    ":9464",
    "127.0.0.1:65536",
    "127.0.0.1:-1",
    "127.0.0.1:http",
    "127.0.0.1:1:2",
    "local host:9464",
    "127.0.0.1\n:9464",
    "[::1:9464",
    "[127.0.0.1]:9464",
    "127.0.0.1:٣",  # a non-ASCII digit
    "h" * 400 + ":1",
    "\udcff:1",
]


@pytest.mark.parametrize("address", BAD_ADDRESSES, ids=range(len(BAD_ADDRESSES)))
def test_bad_addresses_are_refused(address: str) -> None:
    with pytest.raises(shardstore.InvalidInput):
        metrics.parse_address(address)


def test_bad_serve_arguments(
    shared_dsn: str, shared_store: shardstore.Store, capsys: pytest.CaptureFixture[str]
) -> None:
    for bad in (None, 9464, b"127.0.0.1:1", ["127.0.0.1", 1]):
        with pytest.raises(shardstore.InvalidInput):
            metrics.parse_address(bad)
    assert metrics.parse_address("[::1]:0") == ("::1", 0)
    assert metrics.parse_address("localhost:9464") == ("localhost", 9464)
    # a bad address: exit 2 before connecting (the DSN is never reached)
    nowhere = "postgresql://127.0.0.1:1/none?connect_timeout=1"
    for address in ("nohost", "127.0.0.1:99999"):
        assert main(["--dsn", nowhere, "--json", "metrics", "--serve", address]) == 2
        error = json.loads(capsys.readouterr().err)["error"]
        assert error["type"] == "InvalidInput" and error["exit_code"] == 2
    # a port in use, a host that is not this machine's: ConfigurationError, exit 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(shardstore.ConfigurationError, match="cannot serve"):
            metrics.serve(shared_store, f"127.0.0.1:{port}")
        assert main(["--dsn", shared_dsn, "metrics", "--serve", f"127.0.0.1:{port}"]) == 2
        assert "cannot serve metrics" in capsys.readouterr().err
    with pytest.raises(shardstore.ConfigurationError):
        metrics.serve(shared_store, "192.0.2.1:0")  # TEST-NET-1: no interface has it
    assert not metrics.recording()  # a refused serve() left nothing recording


def test_bad_sources(shared_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (None, 12, b"dbname=x", {"dsn": shared_dsn}, "dbname=x\x00"):
        with pytest.raises(shardstore.InvalidInput):
            metrics.snapshot(bad)

    async def with_async_store() -> None:
        store = await shardstore.connect_async(shared_dsn, pool_min_size=1, pool_max_size=1)
        try:
            with pytest.raises(shardstore.InvalidInput, match="AsyncStore"):
                metrics.snapshot(store)
        finally:
            await store.close()

    asyncio.run(with_async_store())
    nowhere = "postgresql://127.0.0.1:1/none"
    with pytest.raises(shardstore.DatabaseUnavailable):
        metrics.snapshot(nowhere, connect_timeout=2)
    assert main(["--dsn", nowhere, "--connect-timeout", "2", "metrics"]) == 6
    assert "error:" in capsys.readouterr().err
    with pytest.raises(shardstore.ConfigurationError):
        metrics.snapshot("not a dsn at all ===")


def test_async_store_records_calls(shared_dsn: str) -> None:
    reader = InMemoryMetricReader()
    mine = MeterProvider(metric_readers=[reader])
    metrics.use_provider(mine)
    tenant = f"a-{uuid.uuid4().hex[:8]}"

    async def main_() -> None:
        async with await shardstore.connect_async(
            shared_dsn, pool_min_size=1, pool_max_size=2
        ) as store:
            sid = await store.create_session(tenant)
            await store.append_turn(sid, {"role": "user", "content": SECRET})
            await store.append_turns(sid, [{"role": "user", "content": "b"}] * 2)
            assert len([t async for t in store.history(sid)]) == 3

    other = shardstore.connect(shared_dsn, pool_min_size=1, pool_max_size=1)
    try:
        asyncio.run(main_())
        # a session this process did not create: its tenant is looked up once
        sid = other.create_session("elsewhere")
        metrics._tenants.pop(sid, None)
        other.append_turn(sid, {"role": "user", "content": "z"})
        other.append_turn(sid, {"role": "user", "content": "z"})
        # an endpoint takes the calls over while it runs, and gives them back
        with metrics.serve(shared_dsn, "127.0.0.1:0") as server:
            assert metrics._provider is server.provider
        assert metrics._provider is mine
    finally:
        other.close()
        metrics.use_provider(None)
    data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    turns = {
        p.attributes["shardstore.tenant_id"]: p.value for p in points["shardstore.appended.turns"]
    }
    assert turns == {tenant: 3, "elsewhere": 2}
    methods = {
        p.attributes["db.operation.name"] for p in points["shardstore.client.operation.duration"]
    }
    assert {"create_session", "append_turn", "append_turns", "history"} <= methods
    assert SECRET not in json.dumps(data.to_json())


@pytest.mark.slow
def test_operator_role_reads_counts_not_content(
    dsn: str, store: shardstore.Store, tenant_role: str
) -> None:
    """The documented operator role (column SELECTs, BYPASSRLS with RLS on) reads every
    tenant's counts and no message; a tenant role is refused, and given the grants counts
    its own tenant's rows only; a role without the grants gets AccessDenied and an
    endpoint reporting up 0."""
    a, b = store.create_session("tenant-a"), store.create_session("tenant-b")
    store.append_turns(a, [{"role": "user", "content": SECRET}] * 2)
    store.append_turns(b, [{"role": "user", "content": SECRET}] * 3)
    role, bare = f"ss_metrics_{uuid.uuid4().hex[:8]}", f"ss_bare_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        rls.enable_rls(admin)
        admin.execute(f'CREATE ROLE "{role}" LOGIN BYPASSRLS')
        admin.execute(f'CREATE ROLE "{bare}" LOGIN')
        for grant in metrics.OPERATOR_GRANTS:
            admin.execute(grant.format(role=f'"{role}"'))
        admin.execute(f'GRANT USAGE ON SCHEMA shardstore TO "{bare}"')
    try:
        operator_dsn = make_conninfo(dsn, user=role)
        seen = metrics.snapshot(operator_dsn)
        assert seen.buffered_turns == 5 and seen.partitions_ahead == 4
        with psycopg.connect(operator_dsn, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT message FROM shardstore.turn_buffer")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT tenant_id FROM shardstore.sessions")
        # a tenant role lacks the grants: refused, it never sees another tenant's counts
        with as_tenant(dsn, tenant_role, "tenant-a") as conn, rls.connect_tenant(conn) as mine:
            with pytest.raises(shardstore.AccessDenied):
                metrics.snapshot(mine)
            with psycopg.connect(dsn, autocommit=True) as admin:
                for grant in metrics.OPERATOR_GRANTS:
                    admin.execute(grant.format(role=f'"{tenant_role}"'))
            # given them, without BYPASSRLS Row-Level Security still applies: its own rows
            assert metrics.snapshot(mine).buffered_turns == 2
        bare_dsn = make_conninfo(dsn, user=bare)
        with pytest.raises(shardstore.AccessDenied):
            metrics.snapshot(bare_dsn)
        with pytest.raises(shardstore.AccessDenied):
            metrics.exposition(bare_dsn)
        with metrics.serve(bare_dsn, "127.0.0.1:0", record_calls=False) as server:
            denied = _scrape(server.url)
        assert _value(denied, "shardstore_database_up") == 0
        assert _value(denied, "shardstore_buffer_turns") is None
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            rls.disable_rls(admin)
            for name in (role, bare):
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (name,),
                )
                admin.execute(f'DROP OWNED BY "{name}"')
                admin.execute(f'DROP ROLE "{name}"')
