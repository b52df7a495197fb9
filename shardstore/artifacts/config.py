"""The artifact options of ``connect()``: where the bytes go, when a message is offloaded,
how long unreferenced objects are kept and how long trajectory payloads live."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..core.state import StoreState
from ..errors import ConfigurationError
from ..settings import parse_interval
from .backends import ObjectBackend, open_backend

OPTIONS = ("artifacts", "offload_over", "artifact_grace", "trajectory_retention")
DEFAULT_GRACE = timedelta(days=1)
DEFAULT_TRAJECTORY_RETENTION = timedelta(days=7)
MIN_OFFLOAD = 256


@dataclass(frozen=True)
class ArtifactConfig:
    """``url``: ``"postgres"`` (default), ``"file:///dir"`` or ``"s3://bucket/prefix"``;
    ``backend``: the object backend for it (None: postgres). ``offload_over``: a string in an
    appended message longer than this many UTF-8 bytes is stored as an artifact (None: never).
    ``grace``: how long an object without any live reference is kept before a sweep deletes
    it. ``trajectory_retention``: how long payloads attached to spans are referenced."""

    url: str = "postgres"
    backend: ObjectBackend | None = None
    offload_over: int | None = None
    grace: timedelta = DEFAULT_GRACE
    trajectory_retention: timedelta = DEFAULT_TRAJECTORY_RETENTION

    @property
    def backend_name(self) -> str:
        """``postgres``, ``file`` or ``s3``."""
        return "postgres" if self.backend is None else self.backend.name


DEFAULT = ArtifactConfig()


def _duration(value: Any, what: str) -> timedelta:
    if isinstance(value, str):
        value = parse_interval(value)
    if not isinstance(value, timedelta) or value < timedelta(0):
        raise ConfigurationError(f"{what} must be a timedelta >= 0 or a text like '1 day'")
    return value


def pop_config(settings: dict[str, Any]) -> ArtifactConfig:
    """Take the artifact options out of ``connect()``'s keywords (the rest are Settings)."""
    found = {name: settings.pop(name) for name in OPTIONS if name in settings}
    url = found.get("artifacts", "postgres")
    over = found.get("offload_over")
    if over is not None and (type(over) is not int or over < MIN_OFFLOAD):
        raise ConfigurationError(f"offload_over must be None or an int >= {MIN_OFFLOAD} (bytes)")
    return ArtifactConfig(
        url=url,
        backend=open_backend(url),
        offload_over=over,
        grace=_duration(found.get("artifact_grace", DEFAULT_GRACE), "artifact_grace"),
        trajectory_retention=_duration(
            found.get("trajectory_retention", DEFAULT_TRAJECTORY_RETENTION),
            "trajectory_retention",
        ),
    )


def config_of(store: StoreState) -> ArtifactConfig:
    """The store's artifact configuration (the default for a store built by hand)."""
    return store.artifact_config or DEFAULT
