"""Metrics of a store through the OpenTelemetry metrics API (the ``metrics`` extra), and a
Prometheus text endpoint for them.

Two kinds:

* **Per call, in the process that makes the calls** (recorded while a meter provider is
  set: globally with ``metrics.set_meter_provider``, or here with :func:`use_provider`;
  otherwise a store call checks one flag, as for spans):
  ``shardstore.client.operation.duration`` (histogram, seconds; attributes
  ``db.operation.name`` = the store method, ``gen_ai.operation.name``, ``error.type`` on
  failure), and for ``append_turn`` / ``append_turns``: ``shardstore.appended.turns`` and
  ``shardstore.appended.bytes`` (counters; attribute ``shardstore.tenant_id``; turns that a
  repeated idempotency key did not store are not counted; bytes are those of the messages'
  stored JSON). The tenant of a session is looked up once per session and process (one
  statement, after the first append of a session not created in this process; none on a
  tenant-bound store).
* **From the database, one statement per collection** (:func:`observe_database`, the
  named statement ``metrics_snapshot``): ``shardstore.embedding.backlog`` (chunks queued
  for embedding), ``shardstore.partitions.ahead`` (attached partitions after the current
  one) and ``shardstore.partitions.ahead.time`` (seconds until the last of them ends),
  ``shardstore.buffer.turns`` and ``shardstore.buffer.oldest.age`` (turns not folded yet
  and the age of the oldest), ``shardstore.runs.awaiting_human`` and
  ``shardstore.runs.awaiting_human.oldest.age``, ``shardstore.maintenance.last.timestamp``
  (when the last maintenance run finished, Unix seconds) and
  ``shardstore.maintenance.last.healthy`` (1 or 0), and ``shardstore.database.up`` (1 when
  the statement ran, 0 when it failed: the other gauges are then left out). A gauge with
  nothing to report (no maintenance run yet, nothing buffered) is left out.

:func:`serve` starts a Prometheus endpoint (``prometheus_client``'s HTTP server with
``opentelemetry-exporter-prometheus``'s reader) holding both; :func:`exposition` is the
database gauges once, in the Prometheus text format; :func:`snapshot` their values as a
:class:`DatabaseSnapshot`. ``shardstore metrics [--serve HOST:PORT]`` is the command-line
flavour. Telemetry never fails a store call: a failed tenant look-up counts the appends
under the tenant ``unknown``."""

from __future__ import annotations

import inspect
import logging
import math
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from ..core import validate
from ..core.connector import Connector
from ..core.executor import run_sync
from ..core.jsoncodec import encode_message
from ..core.sql import query
from ..core.steps import Op, Q
from ..errors import ConfigurationError, InvalidInput, MissingDependency
from ..settings import Settings
from ._otel import global_provider_set, import_api

__all__ = [
    "OPERATOR_GRANTS",
    "DatabaseGauges",
    "DatabaseSnapshot",
    "MetricsServer",
    "exposition",
    "observe_database",
    "parse_address",
    "recording",
    "serve",
    "snapshot",
    "use_provider",
]

log = logging.getLogger(__name__)

METER_NAME: Final = "shardstore"
# seconds; the boundaries the semantic conventions advise for db.client.operation.duration
# (1 ms to 10 s) with a step between each two and one at 0.5 ms, where a tail or an
# append lands
DURATION_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
UNKNOWN_TENANT: Final = "unknown"
_TENANT_CACHE_SIZE = 4096
_APPENDS = ("append_turn", "append_turns")

_provider: Any = None  # set by use_provider()
_api: Any = None  # opentelemetry.metrics._internal once imported; False: not installed


def _metrics_internal() -> Any:
    global _api
    if _api is None:
        _api = import_api("opentelemetry.metrics", "_internal")
    return _api


def use_provider(provider: Any) -> None:
    """Record shardstore's call metrics with this MeterProvider (None: the global one
    again, if one is set)."""
    global _provider, _instruments
    _provider = provider
    _instruments = None


def recording() -> bool:
    """Whether call metrics are recorded: a meter provider is given (:func:`use_provider`)
    or set globally (and is not the no-op one)."""
    if _provider is not None:
        return True
    api = _api if _api is not None else _metrics_internal()
    return global_provider_set(api, "_METER_PROVIDER", "NoOpMeterProvider")


def _meter_provider() -> Any:
    if _provider is not None:
        return _provider
    from opentelemetry import metrics

    return metrics.get_meter_provider()


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shardstore")
    except PackageNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class _Instruments:
    provider: Any
    duration: Any
    turns: Any
    bytes: Any


_instruments: _Instruments | None = None
_instruments_lock = threading.Lock()


def _call_instruments() -> _Instruments:
    global _instruments
    provider = _meter_provider()
    made = _instruments
    if made is not None and made.provider is provider:
        return made
    with _instruments_lock:
        meter = provider.get_meter(METER_NAME, _version())
        made = _Instruments(
            provider,
            meter.create_histogram(
                "shardstore.client.operation.duration",
                unit="s",
                description="Duration of shardstore store calls, by method",
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
            ),
            meter.create_counter(
                "shardstore.appended.turns",
                unit="{turn}",
                description="Turns stored by append_turn / append_turns, by tenant",
            ),
            meter.create_counter(
                "shardstore.appended.bytes",
                unit="By",
                description="Bytes of the messages' JSON stored by appends, by tenant",
            ),
        )
        _instruments = made
        return made


# ---------------------------------------------------------------- tenants of sessions

_tenants: OrderedDict[uuid.UUID, str] = OrderedDict()
_tenants_lock = threading.Lock()


def _remember_tenant(session: uuid.UUID, tenant: str) -> None:
    with _tenants_lock:
        _tenants[session] = tenant
        _tenants.move_to_end(session)
        while len(_tenants) > _TENANT_CACHE_SIZE:
            _tenants.popitem(last=False)


def _known_tenant(store: Any, session: uuid.UUID) -> str | None:
    bound = getattr(getattr(store, "connector", None), "tenant", None)
    if isinstance(bound, str) and bound:
        return bound  # a tenant-bound store sees its own tenant's sessions only
    with _tenants_lock:
        tenant = _tenants.get(session)
        if tenant is not None:
            _tenants.move_to_end(session)
        return tenant


def _tenant_op(session: uuid.UUID) -> Op[str | None]:
    row = yield Q(query("metrics_session_tenant"), (session,), fetch="one")
    return None if row is None else str(row[0])


def _session(arguments: dict[str, Any] | None) -> uuid.UUID | None:
    return None if arguments is None else validate.parsed_uuid(arguments.get("session_id"))


class _Call:
    """One store call being measured (made by :func:`start_call`)."""

    __slots__ = ("arguments", "method", "operation", "started")

    def __init__(self, method: str, operation: str | None, arguments: dict[str, Any] | None):
        self.method = method
        self.operation = operation
        self.arguments = arguments
        self.started = time.perf_counter()

    def _attributes(self) -> dict[str, str]:
        attrs = {"db.system.name": "postgresql", "db.operation.name": self.method}
        if self.operation is not None:
            attrs["gen_ai.operation.name"] = self.operation
        return attrs

    def failed(self, error_type: str) -> None:
        """Record the duration of a call that raised ``error_type``."""
        try:
            elapsed = time.perf_counter() - self.started
            attrs = {**self._attributes(), "error.type": error_type}
            _call_instruments().duration.record(elapsed, attrs)
        except Exception:  # telemetry never fails a store call
            log.exception("shardstore metrics: recording a failed call")

    def _record(self, store: Any, result: Any) -> _Appended | None:
        """Record the duration; for an append, what it stored."""
        elapsed = time.perf_counter() - self.started
        _call_instruments().duration.record(elapsed, self._attributes())
        if self.method == "create_session" and isinstance(result, uuid.UUID):
            tenant = None if self.arguments is None else self.arguments.get("tenant_id")
            if isinstance(tenant, str):
                _remember_tenant(result, tenant)
            return None
        if self.method not in _APPENDS or self.arguments is None:
            return None
        session = _session(self.arguments)
        if session is None:
            return None
        if self.method == "append_turn":
            messages, results = [self.arguments.get("message")], [result]
        else:
            messages, results = list(self.arguments.get("messages") or ()), list(result)
        turns = size = 0
        for message, outcome in zip(messages, results, strict=False):
            if getattr(outcome, "duplicate", True):
                continue
            turns += 1
            size += len(encode_message(message).encode("utf-8", "surrogatepass"))
        if not turns:
            return None
        return _Appended(session, turns, size, _known_tenant(store, session))

    def done(self, store: Any, result: Any) -> None:
        """Record a call that returned ``result`` (sync store)."""
        try:
            appended = self._record(store, result)
            if appended is not None:
                appended.count(appended.tenant or _look_up_tenant(store, appended.session))
        except Exception:
            log.exception("shardstore metrics: recording a call")

    async def adone(self, store: Any, result: Any) -> None:
        """Record a call that returned ``result`` (asyncio store)."""
        try:
            appended = self._record(store, result)
            if appended is not None:
                tenant = appended.tenant or await _alook_up_tenant(store, appended.session)
                appended.count(tenant)
        except Exception:
            log.exception("shardstore metrics: recording a call")


@dataclass(frozen=True, slots=True)
class _Appended:
    """What an append stored: its session, turns and bytes, and the session's tenant where
    it is known without a statement."""

    session: uuid.UUID
    turns: int
    size: int
    tenant: str | None

    def count(self, tenant: str) -> None:
        instruments = _call_instruments()
        attrs = {"shardstore.tenant_id": tenant}
        instruments.turns.add(self.turns, attrs)
        instruments.bytes.add(self.size, attrs)


def _look_up_tenant(store: Any, session: uuid.UUID) -> str:
    try:
        found = store._run(_tenant_op(session))
    except Exception:  # a role that may not read sessions: counted, as unknown
        found = None
    return _found_tenant(session, found)


async def _alook_up_tenant(store: Any, session: uuid.UUID) -> str:
    try:
        found = await store._run(_tenant_op(session))
    except Exception:  # as in _look_up_tenant
        found = None
    return _found_tenant(session, found)


def _found_tenant(session: uuid.UUID, found: Any) -> str:
    """The tenant a look-up found (``unknown`` where it found none or failed), remembered
    for the session."""
    tenant = str(found or UNKNOWN_TENANT)
    _remember_tenant(session, tenant)
    return tenant


def start_call(
    method: str, operation: str | None, arguments: dict[str, Any] | None
) -> _Call | None:
    """A call of store method ``method`` to measure, or None while nothing records."""
    if not recording():
        return None
    return _Call(method, operation, arguments)


# ---------------------------------------------------------------- database gauges


#: What an operator role needs to read the metrics statement (``{role}``: the role's quoted
#: name), and nothing more: counts, ages and times, never a message, fact or payload. With
#: Row-Level Security on, the role also needs BYPASSRLS (set by a superuser) to count every
#: tenant's rows; without it, it counts none.
OPERATOR_GRANTS: Final = (
    "GRANT USAGE ON SCHEMA shardstore TO {role}",
    "GRANT SELECT (partition_interval, partition_origin) ON shardstore.config TO {role}",
    "GRANT SELECT (queued_at) ON shardstore.embed_queue TO {role}",
    "GRANT SELECT (created_at) ON shardstore.turn_buffer TO {role}",
    "GRANT SELECT (status, awaiting_since) ON shardstore.runs TO {role}",
    "GRANT SELECT (run_id, finished_at, healthy) ON shardstore.maintenance_runs TO {role}",
)


@dataclass(frozen=True, slots=True)
class DatabaseSnapshot:
    """The database-derived gauges at one moment (one statement). Ages and times are in
    seconds; None where there is nothing to measure (nothing buffered, no run awaiting a
    human, no maintenance run recorded)."""

    embedding_backlog: int
    partitions_ahead: int
    partitions_ahead_seconds: float
    buffered_turns: int
    oldest_buffered_age_seconds: float | None
    runs_awaiting_human: int
    oldest_awaiting_age_seconds: float | None
    last_maintenance_time: float | None
    last_maintenance_healthy: bool | None


def snapshot_op() -> Op[DatabaseSnapshot]:
    """The operation reading a :class:`DatabaseSnapshot` (the ``metrics_snapshot``
    statement)."""
    row = yield Q(query("metrics_snapshot"), fetch="one", named=True)
    return DatabaseSnapshot(
        embedding_backlog=int(row["embedding_backlog"]),
        partitions_ahead=int(row["partitions_ahead"]),
        partitions_ahead_seconds=max(0.0, float(row["partitions_ahead_seconds"])),
        buffered_turns=int(row["buffered_turns"]),
        oldest_buffered_age_seconds=_float(row["oldest_buffered_age_seconds"]),
        runs_awaiting_human=int(row["runs_awaiting_human"]),
        oldest_awaiting_age_seconds=_float(row["oldest_awaiting_age_seconds"]),
        last_maintenance_time=_float(row["last_maintenance_time"]),
        last_maintenance_healthy=row["last_maintenance_healthy"],
    )


def _float(value: Any) -> float | None:
    return None if value is None else max(0.0, float(value))


class _Source:
    """Where snapshots are read: a sync store's connections, or a DSN's own one-connection
    pool (closed with :meth:`close`)."""

    def __init__(self, source: Any, connect_timeout: float) -> None:
        self._store: Any = None
        self._connector: Connector | None = None
        run = getattr(source, "_run", None)
        if run is not None and hasattr(source, "connector"):  # a store (StoreState)
            if inspect.iscoroutinefunction(run):
                raise InvalidInput(
                    "database gauges are read from the exporter's thread, which cannot "
                    "await an AsyncStore: pass its DSN (a string) or a shardstore.Store"
                )
            self._store = source
        elif isinstance(source, str):
            if "\x00" in source:
                raise InvalidInput("the DSN holds a NUL character")
            settings = Settings.from_kwargs(
                {"pool_min_size": 1, "pool_max_size": 1, "connect_timeout": connect_timeout}
            )
            self._connector = Connector(source, settings)
        else:
            raise InvalidInput(
                f"metrics need a shardstore.Store or a DSN string, not {type(source).__name__}"
            )

    def read(self) -> DatabaseSnapshot:
        if self._store is not None:
            found: DatabaseSnapshot = self._store._run(snapshot_op())
            return found
        assert self._connector is not None
        return run_sync(self._connector, snapshot_op())

    def close(self) -> None:
        if self._connector is not None:
            self._connector.close()


def snapshot(source: Any, *, connect_timeout: float = 30.0) -> DatabaseSnapshot:
    """The database-derived gauges now, read with one statement from ``source`` (a
    :class:`~shardstore.Store`, or a DSN string: then one connection is opened, waiting
    at most ``connect_timeout`` seconds, and closed).
    It needs the :data:`OPERATOR_GRANTS` (tenant roles lack them); with Row-Level Security
    on, a role without BYPASSRLS counts its own tenant's rows only. Errors are shardstore's:
    ``InvalidInput`` for another kind of source, ``DatabaseUnavailable``,
    ``AccessDenied`` for a role without the SELECT rights the statement needs."""
    reader = _Source(source, connect_timeout)
    try:
        return reader.read()
    finally:
        reader.close()


# (name, unit, description, value from a snapshot)
_GAUGES: Final[tuple[tuple[str, str, str, Callable[[DatabaseSnapshot], float | None]], ...]] = (
    (
        "shardstore.embedding.backlog",
        "{chunk}",
        "Chunks queued for embedding",
        lambda s: s.embedding_backlog,
    ),
    (
        "shardstore.partitions.ahead",
        "{partition}",
        "Attached agent_history partitions after the current one",
        lambda s: s.partitions_ahead,
    ),
    (
        "shardstore.partitions.ahead.time",
        "s",
        "Seconds until the last partition attached ahead ends (0: the current one is missing)",
        lambda s: s.partitions_ahead_seconds,
    ),
    (
        "shardstore.buffer.turns",
        "{turn}",
        "Turns in turn_buffer, not folded into their chunk yet",
        lambda s: s.buffered_turns,
    ),
    (
        "shardstore.buffer.oldest.age",
        "s",
        "Age of the oldest turn not folded yet",
        lambda s: s.oldest_buffered_age_seconds,
    ),
    (
        "shardstore.runs.awaiting_human",
        "{run}",
        "Runs waiting on a human",
        lambda s: s.runs_awaiting_human,
    ),
    (
        "shardstore.runs.awaiting_human.oldest.age",
        "s",
        "How long the longest-waiting run has waited on a human",
        lambda s: s.oldest_awaiting_age_seconds,
    ),
    (
        "shardstore.maintenance.last.timestamp",
        "s",
        "When the last maintenance run finished (Unix time)",
        lambda s: s.last_maintenance_time,
    ),
    (
        "shardstore.maintenance.last.healthy",
        "1",
        "Whether the last maintenance run left the store healthy (1) or not (0)",
        lambda s: None if s.last_maintenance_healthy is None else int(s.last_maintenance_healthy),
    ),
)
UP_GAUGE: Final = "shardstore.database.up"


class DatabaseGauges:
    """The database-derived gauges registered on a meter provider
    (:func:`observe_database`). Each collection runs the ``metrics_snapshot`` statement
    once: the snapshot is read again when a gauge that already reported from it is asked
    again, which in a collection (every gauge once) is its first gauge."""

    def __init__(self, source: Any, provider: Any, connect_timeout: float = 30.0) -> None:
        self._source = _Source(source, connect_timeout)
        self._lock = threading.Lock()
        self._snapshot: DatabaseSnapshot | None = None
        self._up = 0
        self._reported: set[str] = set()
        self._closed = False
        self.statements = 0  # snapshots read: one per collection
        self.error: Exception | None = None  # why the last statement failed
        from opentelemetry.metrics import Observation

        self._observation = Observation
        meter = provider.get_meter(f"{METER_NAME}.database", _version())
        for name, unit, description, value in _GAUGES:
            meter.create_observable_gauge(
                name, callbacks=[self._callback(name, value)], unit=unit, description=description
            )
        meter.create_observable_gauge(
            UP_GAUGE,
            callbacks=[self._callback(UP_GAUGE, lambda _s: self._up)],
            unit="1",
            description="Whether the last metrics statement ran (1) or failed (0)",
        )

    def _current(self, name: str) -> DatabaseSnapshot | None:
        with self._lock:
            if self._closed:
                return None
            if self.statements == 0 or name in self._reported:
                self._reported = set()
                self.statements += 1
                try:
                    self._snapshot, self._up, self.error = self._source.read(), 1, None
                except Exception as exc:
                    self._snapshot, self._up, self.error = None, 0, exc
                    log.warning("shardstore metrics: the metrics statement failed: %s", exc)
            self._reported.add(name)
            return self._snapshot

    def _callback(
        self, name: str, value: Callable[[DatabaseSnapshot], float | None]
    ) -> Callable[[Any], Iterable[Any]]:
        def observe(_options: Any) -> Iterable[Any]:
            current = self._current(name)
            if name == UP_GAUGE:
                return [] if self._closed else [self._observation(self._up)]
            number = None if current is None else value(current)
            if number is None or not math.isfinite(number):
                return []
            return [self._observation(number)]

        return observe

    def close(self) -> None:
        """Stop reading the database (the gauges report nothing more) and close a DSN's
        connection."""
        with self._lock:
            self._closed = True
        self._source.close()


def _require_sdk() -> Any:
    try:
        from opentelemetry.sdk.metrics import MeterProvider
    except ImportError:
        raise MissingDependency(
            "metrics need opentelemetry-sdk: pip install 'shardstore[metrics]'"
        ) from None
    return MeterProvider


def observe_database(
    source: Any, provider: Any = None, *, connect_timeout: float = 30.0
) -> DatabaseGauges:
    """Register the database-derived gauges (the module docstring lists them) on
    ``provider`` (default: shardstore's meter provider, :func:`use_provider` or the global
    one), read from ``source`` (a :class:`~shardstore.Store` or a DSN string) with one
    statement per collection. A failed statement reports ``shardstore.database.up`` 0 and
    leaves the other gauges out; it never raises into the exporter. ``close()`` the
    handle to stop."""
    try:
        from opentelemetry import metrics  # noqa: F401  (the API: the otel extra)
    except ImportError:
        raise MissingDependency(
            "metrics need opentelemetry-api: pip install 'shardstore[metrics]'"
        ) from None
    chosen = provider if provider is not None else _meter_provider()
    return DatabaseGauges(source, chosen, connect_timeout)


# ---------------------------------------------------------------- Prometheus

_HOST = re.compile(r"[A-Za-z0-9.\-_:%]+")


def parse_address(address: Any) -> tuple[str, int]:
    """``HOST:PORT`` (``127.0.0.1:9464``, ``localhost:9464``, ``[::1]:9464``, port 0: a
    free one) as ``(host, port)``; ``InvalidInput`` for anything else (no host, a port
    out of 0-65535, spaces, control characters, over 300 characters, not a string)."""
    text = validate.text(address, "address", limit=300)
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep or ":" not in host:
            raise InvalidInput(f"address must be HOST:PORT or [IPv6]:PORT, not {text!r}")
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:
            raise InvalidInput(
                f"address must be HOST:PORT (an IPv6 host in brackets), not {text!r}"
            )
    if not host or not _HOST.fullmatch(host):
        raise InvalidInput(f"address needs a host name or IP address, not {text!r}")
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise InvalidInput(f"address port must be 0-65535, not {port!r}")
    return host, int(port)


def _prometheus() -> tuple[Any, Any]:
    MeterProvider = _require_sdk()
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry
    except ImportError:
        raise MissingDependency(
            "a Prometheus endpoint needs opentelemetry-exporter-prometheus and "
            "prometheus-client: pip install 'shardstore[metrics]'"
        ) from None
    registry = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(disable_target_info=True, registry=registry)
    return MeterProvider(metric_readers=[reader]), registry


class MetricsServer:
    """A running Prometheus endpoint (:func:`serve`): ``url``, ``host``, ``port``;
    :meth:`close` (or ``with``) stops it."""

    def __init__(
        self, httpd: Any, thread: Any, provider: Any, gauges: DatabaseGauges, owns_calls: bool
    ) -> None:
        self._httpd = httpd
        self._thread = thread
        self.provider = provider
        self.gauges = gauges
        self._owns_calls = owns_calls
        self._previous = _provider  # shardstore's meter provider before serve() took over
        host, port = httpd.server_address[:2]
        self.host: str = str(host)
        self.port: int = int(port)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{shown}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving, stop reading the database, and (if :func:`serve` set it) record
        calls with the meter provider shardstore had before again."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)
        self.gauges.close()
        if self._owns_calls and _provider is self.provider:
            use_provider(self._previous)
        self.provider.shutdown()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    source: Any,
    address: str = "127.0.0.1:9464",
    *,
    record_calls: bool = True,
    connect_timeout: float = 30.0,
) -> MetricsServer:
    """Serve the metrics in the Prometheus text format at ``http://address/metrics``
    (``HOST:PORT``, :func:`parse_address`; port 0 picks a free one: see ``.port``), on a
    background thread, until ``close()``. It holds the database gauges read from
    ``source`` (a :class:`~shardstore.Store` or a DSN string) once per scrape, and, with
    ``record_calls`` (default), this process's call metrics: its provider becomes
    shardstore's (:func:`use_provider`) until it is closed. ``InvalidInput`` for a bad
    address, ``ConfigurationError`` when it cannot listen there (in use, not an address
    of this machine), ``MissingDependency`` without the ``metrics`` extra."""
    host, port = parse_address(address)
    provider, registry = _prometheus()
    try:
        gauges = observe_database(source, provider, connect_timeout=connect_timeout)
    except BaseException:
        provider.shutdown()
        raise
    from prometheus_client import start_http_server

    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except (OSError, UnicodeError) as exc:
        gauges.close()
        provider.shutdown()
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigurationError(f"cannot serve metrics on {address!r}: {reason}") from None
    server = MetricsServer(httpd, thread, provider, gauges, record_calls)
    if record_calls:
        use_provider(provider)
    return server


def exposition(source: Any, *, connect_timeout: float = 30.0) -> str:
    """The database gauges now, in the Prometheus text format (one statement; the same
    names and values as :func:`serve`'s endpoint, without call metrics). Unlike the
    endpoint, a failed statement raises its shardstore error (``DatabaseUnavailable``,
    ``AccessDenied``, ...) instead of reporting ``shardstore_database_up 0``."""
    provider, registry = _prometheus()
    try:
        gauges = observe_database(source, provider, connect_timeout=connect_timeout)
        try:
            from prometheus_client import generate_latest

            text: bytes = generate_latest(registry)
        finally:
            gauges.close()
    finally:
        provider.shutdown()
    if gauges.error is not None:
        raise gauges.error
    return text.decode("utf-8")
