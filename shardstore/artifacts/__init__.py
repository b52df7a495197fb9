"""The artifact store: large content (a 1 MB tool output, a file a user downloads) stored
once per tenant, with small references in turns, checkpoints and traces.

* :mod:`.model`: :class:`ArtifactRef`, ids and object keys;
* :mod:`.ops`: put / get / open / ref / unref / list (store methods);
* :mod:`.sweep`: the delayed mark-and-sweep and a purge's immediate release;
* :mod:`.offload`: big strings of appended messages replaced by cards, and expanded back;
* :mod:`.backends`: the file and S3 backends (postgres is the default, in the database).

Schema and protocol: docs/artifacts.md, "How it works"; statements: ``sql/ops.sql``."""

from __future__ import annotations

from .model import MARKER, ArtifactInfo, ArtifactRef
from .sweep import SweepReport

__all__ = ["MARKER", "ArtifactInfo", "ArtifactRef", "SweepReport"]
