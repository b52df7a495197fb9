"""Maintenance (issue 3): store methods live here as mixins of Store / AsyncStore."""

from __future__ import annotations


class MaintenanceMethods:
    """Maintenance methods of :class:`shardstore.Store`."""


class AsyncMaintenanceMethods:
    """Maintenance methods of :class:`shardstore.AsyncStore`."""
