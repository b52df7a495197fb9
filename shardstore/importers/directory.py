"""An export directory: every tenant's export (``shardstore export --all -o DIR``), a file
each, named by the tenant's place in the sorted list of tenants (a tenant id may hold any
character), and ``manifest.json`` naming each file's tenant and counts. The manifest is
written last, so a directory without one is an export that did not finish."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from ..core import validate
from ..errors import InvalidInput

MANIFEST = "manifest.json"
KIND = "shardstore export directory"
VERSION = 1
_MANIFEST_LIMIT = 1 << 26  # bytes: a manifest lists tenants, not turns


def tenant_file(number: int) -> str:
    """The file name of the ``number``-th tenant (1-based) of an export directory."""
    return f"tenant-{number:06d}.jsonl"


def write_manifest(directory: str, entries: Sequence[dict[str, Any]]) -> None:
    """Write ``directory``'s manifest: each entry a tenant's ``tenant_id``, ``file`` and
    export counts."""
    manifest = {"kind": KIND, "version": VERSION, "tenants": list(entries)}
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as out:
        out.write(json.dumps(manifest, ensure_ascii=True) + "\n")


def manifest_files(directory: str) -> list[str]:
    """The paths of an export directory's files in its manifest's order. ``InvalidInput``
    when the manifest is missing (an unfinished export), malformed, of another version, or
    names a file outside the directory."""
    path = os.path.join(directory, MANIFEST)
    shown = validate.shown(path)
    try:
        with open(path, encoding="utf-8") as src:
            text = src.read(_MANIFEST_LIMIT + 1)
    except OSError as exc:
        raise InvalidInput(
            f"{shown} cannot be read ({exc.strerror}): not a finished export directory"
        ) from None
    except ValueError as exc:  # not UTF-8, a NUL in the path
        raise InvalidInput(f"{shown} cannot be read: {exc}") from None
    if len(text) > _MANIFEST_LIMIT:
        raise InvalidInput(f"{shown} is larger than an export manifest can be")
    try:
        manifest = json.loads(text)
        kind, version, tenants = manifest["kind"], manifest["version"], manifest["tenants"]
        files = [entry["file"] for entry in tenants]
    except (ValueError, TypeError, KeyError, RecursionError):
        raise InvalidInput(f"{shown} is not an export manifest") from None
    if kind != KIND or version != VERSION:
        raise InvalidInput(f"{shown} is not a version-{VERSION} export manifest")
    for name in files:
        if not (
            isinstance(name, str) and name == os.path.basename(name) and name.endswith(".jsonl")
        ):
            raise InvalidInput(
                f"{shown} names a file outside its directory: {validate.shown(name)}"
            )
    return [os.path.join(directory, name) for name in files]
