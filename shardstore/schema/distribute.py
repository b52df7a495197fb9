"""Scale-out on Citus: the same schema and API, every session-scoped table distributed and
colocated by ``session_id`` (docs/scale-out.md).

``store.distribute()`` / ``shardstore distribute`` on a Citus coordinator, idempotently:

1. checks that the schema is distributable (:data:`CHECKS`, the same queries as
   ``tests/citus/test_distributable.py``) and changes nothing if it is not;
2. makes the config-like tables every node reads reference tables (``config``,
   ``embedding_config``, ``rls_role_tenants``: the policies look tenant bindings up on the
   shards);
3. distributes every session table of the registry by its session column, colocated with
   ``sessions`` (a table whose session column may be NULL, ``facts``, by its tenant
   column, and with it the tenant-keyed global tables of ``citus_tenant_tables_v1()``:
   ``artifacts``, ``artifact_chunks``), partitions included; tables registered by later
   migrations are distributed by the next run, and standalone partition tables waiting for
   archive too;
4. propagates every shardstore function to the workers (so that what a shard query or a
   delegated call needs exists there) and, with ``delegate``, delegates the hot functions
   (:data:`DELEGATED`) by their session argument: their call runs on the worker holding the
   session, one network hop instead of one per statement inside;
5. sets ``citus.propagate_set_commands = 'local'`` for the database, so that ``SET LOCAL``
   (the search settings; a transaction's tenant) reaches the shard queries, and lets
   ``rls_tenant_v2()`` (which the policies call on the shards) read the reference table of
   role bindings there (``citus.allow_nested_distributed_execution`` on that function).

On PostgreSQL without Citus it changes nothing and says so (``citus_version`` None).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from ..core import validate
from ..core.executor import run_sync
from ..core.rows import json_fields
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q
from ..errors import ConfigurationError

CHECKS: dict[str, str] = {
    "keys": "a session table's unique key lacks its distribution column",
    "foreign_keys": "a foreign key between tables that are not colocated",
    "sql_functions": "a LANGUAGE sql function with parameters names a session table",
    "policies": "a policy holds a subquery",
    "triggers": "a session table (or a partition of one) has a trigger",
}
"""The distributability checks: name -> what a finding means."""

DELEGATED: dict[str, str] = {
    "append_one_v2": "p_session_id",
    "append_sealed_one_v1": "p_session_id",
    "append_sealed_v1": "p_session_id",
    "append_to_open_chunk": "p_session_id",
    "append_v2": "p_session_id",
    "tail_sealed_v1": "p_session_id",
    "tail_v1": "p_session_id",
    "tail_window_v1": "p_session_id",
}
"""The hot calls delegated to the worker that holds their session (measured in
docs/scale-out.md), by function name -> the argument that names the session; the signatures
are read from the catalog. Folds are not: a fold may create a partition, DDL a worker cannot
run."""


@dataclass(frozen=True, slots=True)
class DistributeReport:
    """What :func:`distribute` did. ``citus_version`` None: Citus is not installed in this
    database and nothing was changed. The lists name what THIS run changed; ``unchanged``
    what was already as wanted (a second run lists everything there)."""

    citus_version: str | None
    workers: int = 0
    reference_tables: list[str] = field(default_factory=list)
    distributed_tables: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    functions_propagated: int = 0
    functions_delegated: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether this run changed anything."""
        return bool(
            self.reference_tables
            or self.distributed_tables
            or self.functions_propagated
            or self.functions_delegated
            or self.settings
        )

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return json_fields(self, changed=self.changed)


def checks_op() -> Op[dict[str, list[tuple[Any, ...]]]]:
    """Run every distributability check; each maps to the offending objects (empty: fine).
    Reads the catalog only; works on any PostgreSQL."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    for name in CHECKS:
        rows = yield Q(query(f"dist_check_{name}"))
        found[name] = [tuple(r) for r in rows]
    return found


def distributability_problems(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """:func:`checks_op` on a plain psycopg connection (tests, scripts)."""
    return run_sync(conn, checks_op())


def _state_op(table: str) -> Op[tuple[str, str | None] | None]:
    row = yield Q(query("dist_table_state"), (table,), fetch="one")
    return None if row is None else (str(row[0]), None if row[1] is None else str(row[1]))


def _table_op(table: str, column: str | None, colocate: str, report: _Progress) -> Op[None]:
    """Distribute ``table`` by ``column`` (None: a reference table) unless Citus holds it
    so already; ConfigurationError when Citus holds it another way."""
    want = "n" if column is None else "h"
    state = yield from _state_op(table)
    if state is not None:
        if state[0] != want or (column is not None and state[1] != column):
            raise ConfigurationError(
                f"{table} is held by Citus as {state[0]!r} ({state[1]}), not as wanted "
                f"({'a reference table' if column is None else 'distributed by ' + column})"
            )
        report.unchanged.append(table)
        return
    yield Q(query("dist_create_table"), (table, column, colocate), fetch="one")
    if column is None:
        report.reference.append(table)
    else:
        report.distributed.append(f"{table}({column})")


@dataclass(slots=True)
class _Progress:
    reference: list[str] = field(default_factory=list)
    distributed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def distribute_op(delegate: bool = True) -> Op[DistributeReport]:
    """Distribute the store on a Citus coordinator (see the module docstring); nothing on a
    server without Citus. Raises ConfigurationError on a Citus worker, when the schema is
    not distributable (naming every finding; nothing is changed), or when a table is held
    by Citus in another way than wanted."""
    version_row = yield Q(query("dist_citus_version"), fetch="one")
    if version_row is None:
        return DistributeReport(citus_version=None)
    version = str(version_row[0])
    group, workers = yield Q(query("dist_node"), fetch="one")
    if group is None or int(group) != 0:
        raise ConfigurationError(
            "this is not a Citus coordinator: run distribute on the coordinator (every "
            "client goes through the coordinator)"
        )
    problems = yield from checks_op()
    bad = [f"{CHECKS[k]}: {v}" for k, v in problems.items() if v]
    if bad:
        raise ConfigurationError(
            "the schema is not distributable; nothing changed: " + "; ".join(bad)
        )
    done = _Progress()
    for (table,) in (yield Q(query("dist_reference_candidates"))):
        yield from _table_op(table, None, "none", done)
    # sessions first (a colocation group of its own), then the rest colocated with it;
    # tenant-keyed tables (session column may be NULL) form a group of their own: the
    # group of one distributed already (an upgraded store: facts before the artifact
    # tables), else the first one's
    tables = yield Q(query("dist_tables"))
    tenant_group = "none"
    for table, _column, by_tenant in tables:
        if by_tenant and (yield from _state_op(table)) is not None:
            tenant_group = table
            break
    for table, column, by_tenant in tables:
        if table == "shardstore.sessions":
            colocate = "none"
        elif by_tenant:
            colocate = tenant_group
        else:
            colocate = "shardstore.sessions"
        yield from _table_op(table, column, colocate, done)
        if by_tenant:
            tenant_group = table
    for (table,) in (yield Q(query("dist_standalone_tables"))):
        yield from _table_op(table, "session_id", "shardstore.sessions", done)

    propagated = 0
    for (signature,) in (yield Q(query("dist_functions_pending"))):
        yield Q(query("dist_distribute_function"), (signature, None), fetch="one")
        propagated += 1
    delegated: list[str] = []
    if delegate:
        signatures = dict((yield Q(query("dist_signatures"), (list(DELEGATED),))))
        missing = sorted(set(DELEGATED) - set(signatures))
        if missing:
            raise ConfigurationError(
                f"functions to delegate are missing from schema shardstore: {missing}"
                " (was the schema migrated by this version of shardstore?)"
            )
        for name, argument in sorted(DELEGATED.items()):
            signature = signatures[name]
            (already,) = yield Q(query("dist_function_delegated"), (signature,), fetch="one")
            if not already:
                yield Q(query("dist_distribute_function"), (signature, argument), fetch="one")
                delegated.append(signature.split("(")[0])
    settings: list[str] = []
    (changed,) = yield Q(query("dist_tenant_on_shards"), fetch="one")
    if changed:
        settings.append("shardstore.rls_tenant_v2(): citus.allow_nested_distributed_execution = on")
    (changed,) = yield Q(query("dist_propagate_set_local"), fetch="one")
    if changed:
        settings.append("citus.propagate_set_commands = 'local' for the database")
    return DistributeReport(
        citus_version=version,
        workers=int(workers),
        reference_tables=done.reference,
        distributed_tables=done.distributed,
        unchanged=done.unchanged,
        functions_propagated=propagated,
        functions_delegated=delegated,
        settings=settings,
    )


def distribute(store: StoreState, *, delegate: bool = True) -> Op[DistributeReport]:
    """Distribute this store's tables on Citus, idempotently, and report what changed.

    On a Citus coordinator: reference tables for the config-like tables, every registered
    session table hash-distributed by its session column and colocated with ``sessions``
    (partitions included; tables of later migrations on the next run), every shardstore
    function known on the workers, the hot calls delegated by their session argument
    (``delegate=False``: not), and ``SET LOCAL`` propagated to the shards. Without Citus:
    nothing changed, ``report.citus_version`` is None. Existing rows move into the shards.
    Raises ConfigurationError on a worker or when the schema is not distributable (then
    nothing is changed). Needs the tables' owner."""
    return distribute_op(validate.flag(delegate, "delegate"))
