"""LangGraph's own conformance suite (langgraph-checkpoint-conformance 0.0.2) against
ShardstoreSaver: the 58 base tests (put, put_writes, get_tuple, list, delete_thread) and
the extended copy_thread, delete_for_runs and prune suites, on an AsyncStore (the async
methods await it) and on a Store (the async methods run the sync operations in a thread)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate

import shardstore
from shardstore.integrations.langgraph import ShardstoreSaver

BASE = {"put": 17, "put_writes": 10, "get_tuple": 10, "list": 16, "delete_thread": 5}
EXTENDED = {"copy_thread": 8, "delete_for_runs": 7, "prune": 8}


def _run(dsn: str, flavour: str) -> dict[str, tuple[bool | None, int, int, list[str]]]:
    @checkpointer_test(name=f"shardstore-{flavour}")
    async def factory() -> AsyncIterator[ShardstoreSaver]:
        if flavour == "async":
            astore = await shardstore.connect_async(dsn)
            try:
                yield ShardstoreSaver(astore, tenant_id="conformance")
            finally:
                await astore.close()
        else:
            store = shardstore.connect(dsn)
            try:
                yield ShardstoreSaver(store, tenant_id="conformance")
            finally:
                store.close()

    report = asyncio.run(validate(factory))
    return {
        name: (r.passed, r.tests_passed, r.tests_failed, r.failures)
        for name, r in report.results.items()
    }


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_conformance_base_and_extended(dsn: str, flavour: str) -> None:
    results = _run(dsn, flavour)
    for name, count in {**BASE, **EXTENDED}.items():
        passed, n_passed, n_failed, failures = results[name]
        assert failures == [] and n_failed == 0, (name, failures)
        assert passed is True and n_passed == count, (name, n_passed)
    assert sum(results[name][1] for name in BASE) == 58
