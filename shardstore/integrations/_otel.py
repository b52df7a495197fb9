"""What :mod:`.tracing` and :mod:`.metrics` share of the OpenTelemetry API: importing it only
when asked, and telling whether a global provider is set without asking the API for it."""

from __future__ import annotations

from typing import Any


def import_api(package: str, name: str) -> Any:
    """``from <package> import <name>`` (an OpenTelemetry API module), or False where
    OpenTelemetry is not installed (callers keep the answer, so that the import is tried
    once)."""
    try:
        return getattr(__import__(package, fromlist=[name]), name)
    except (ImportError, AttributeError):
        return False


def global_provider_set(api: Any, attribute: str, no_op: str) -> bool:
    """Whether the API module ``api`` (False: not installed) holds a global provider that
    its ``set_*_provider()`` stored (``api.<attribute>``) and that is not the no-op one
    (``api.<no_op>``). Read from the attribute because the API's ``get_*_provider()`` reads
    the environment on every call while none is set (~7 us measured, per store call)."""
    if api is False:
        return False
    provider = getattr(api, attribute, None)
    return provider is not None and not isinstance(provider, getattr(api, no_op))
