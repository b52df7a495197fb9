"""Where the tests' own PostgreSQL servers keep their data: a memory-backed file system
when the machine has one with room to spare, else the usual temporary directory.

Why: a test database is a clone of the migrated template, some eight hundred relation
files, and on ext4 most of a clone's time is the kernel looking for free inodes among the
thousands that earlier tests' dropped databases just freed (a profile of ``CREATE
DATABASE`` shows it: 0.4 s of CPU a clone on ext4, 0.03 s on tmpfs, for the same
template). Nothing a test checks depends on the file system: a killed server loses what
the kernel did not have in either case, and the suite's servers are thrown away.
``SHARDSTORE_TEST_TMPDIR`` names another directory (an empty value: the default one)."""

from __future__ import annotations

import os
import tempfile

# a test server's data stays under a few hundred MiB; leave the machine far more than that
_MIN_FREE_BYTES = 4 << 30
_MEMORY_BACKED = "/dev/shm"


def scratch_root() -> str | None:
    """The directory to make test servers' data directories in (None: the default
    temporary directory)."""
    configured = os.environ.get("SHARDSTORE_TEST_TMPDIR")
    if configured is not None:
        return configured or None
    try:
        stats = os.statvfs(_MEMORY_BACKED)
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < _MIN_FREE_BYTES or not os.access(
        _MEMORY_BACKED, os.W_OK | os.X_OK
    ):
        return None
    return _MEMORY_BACKED


def scratch_dir(prefix: str) -> str:
    """A new private directory under :func:`scratch_root` (the caller removes it)."""
    return tempfile.mkdtemp(prefix=prefix, dir=scratch_root())
