"""``shardstore artifacts``: put, get, list and sweep artifacts."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import IO, Any

from ...artifacts import ArtifactInfo
from ...core.rows import json_fields
from ..app import Runner
from ..args import interval, open_file
from ..declare import arg, command, flag, group
from ..output import format_table, num, printable, when

_HEADERS = ("artifact", "state", "bytes", "refs", "content type", "stored (UTC)")


def _store(run: Runner) -> Any:
    url = run.args.store or os.environ.get("SHARDSTORE_ARTIFACTS") or "postgres"
    return run.connect(artifacts=url)


def _info_json(info: ArtifactInfo) -> dict[str, Any]:
    return {**info.ref.fields(), **json_fields(info, leave_out=("ref",))}


@command(
    "put",
    "store a file as an artifact and print its reference",
    arg("file", metavar="FILE", help="the file ('-': stdin)"),
    arg("--tenant", required=True, help="the artifact's tenant"),
    arg("--content-type", default="application/octet-stream"),
)
def cmd_put(run: Runner) -> int:
    """Store a file (``-`` for stdin) and print its reference; 0 on success. A file that
    cannot be opened (missing, a directory, unreadable) is a usage error (exit 2) found
    before anything connects: nothing is written."""
    args = run.args
    # opened first, so that a wrong path is refused before the database is even reached
    source: IO[bytes] = sys.stdin.buffer if args.file == "-" else open_file(args.file, "rb", "FILE")
    try:
        with _store(run) as store:
            ref = store.put_artifact(args.tenant, source, content_type=args.content_type)
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    if run.json:
        run.emit(ref.fields())
    else:
        run.line(f"{ref.artifact_id}  {ref.size_bytes} bytes  sha256 {ref.sha256}  {ref.uri}")
    return 0


@command(
    "get",
    "write an artifact's bytes to a file or stdout",
    arg("id", metavar="ID", help="the artifact id"),
    arg("--tenant", required=True, help="the artifact's tenant"),
    arg("-o", "--output", metavar="FILE", help="write here (default: stdout)"),
)
def cmd_get(run: Runner) -> int:
    """Write an artifact's bytes to ``-o FILE`` (default stdout); 0 on success."""
    args = run.args
    with _store(run) as store, store.open_artifact(args.tenant, args.id) as stream:
        out = open_file(args.output, "wb", "--output") if args.output else sys.stdout.buffer
        try:
            while piece := stream.read(1 << 20):
                out.write(piece)
        finally:
            if args.output:
                out.close()
            else:
                out.flush()
    return 0


@command(
    "ls",
    "list a tenant's artifacts, newest first",
    arg("--tenant", required=True),
    arg(
        "--limit",
        type=int,
    ),
)
def cmd_ls(run: Runner) -> int:
    """List a tenant's artifacts, newest first; 0 on success."""
    with _store(run) as store:
        found = store.list_artifacts(run.args.tenant, limit=run.args.limit)
    return run.listing(found, "artifacts", _info_json, _table)


def _table(found: Sequence[ArtifactInfo]) -> str:
    rows = [
        [
            str(a.ref.artifact_id),
            a.state,
            num(a.ref.size_bytes),
            num(a.live_refs),
            printable(a.ref.content_type),
            when(a.created_at),
        ]
        for a in found
    ]
    return format_table(_HEADERS, rows, "llrrll")


@command(
    "sweep",
    "delete artifacts unreferenced for longer than the grace",
    flag("--dry-run", help="report only"),
    arg("--grace", type=interval, metavar="AGE", help="e.g. '1 day' (default: 1 day)"),
)
def cmd_sweep(run: Runner) -> int:
    """Sweep unreferenced artifacts (``--dry-run``: only report); 0 on success."""
    args = run.args
    with _store(run) as store:
        report = store.sweep_artifacts(grace=args.grace, dry_run=args.dry_run)
    if run.json:
        run.emit(report.to_dict())
    else:
        verb = "would delete" if report.dry_run else "deleted"
        run.line(f"{verb} {report.deleted} artifacts ({report.bytes_deleted} bytes)")
    return 0


COMMANDS = (
    group(
        "artifacts",
        "store, read, list and sweep artifacts (large content)",
        arg(
            "--store",
            metavar="URL",
            help="the artifact backend: postgres (default), file:///dir or s3://bucket/prefix "
            "(default: $SHARDSTORE_ARTIFACTS)",
        ),
        subcommands=(cmd_put, cmd_get, cmd_ls, cmd_sweep),
        dest="action",
        metavar="ACTION",
    ),
)
