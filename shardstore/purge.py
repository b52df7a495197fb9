"""GDPR purge (issue 3): store methods live here as mixins of Store / AsyncStore."""

from __future__ import annotations


class PurgeMethods:
    """Purge methods of :class:`shardstore.Store`."""


class AsyncPurgeMethods:
    """Purge methods of :class:`shardstore.AsyncStore`."""
