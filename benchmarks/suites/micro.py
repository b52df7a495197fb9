"""The pytest-benchmark microbenchmarks of benchmarks/micro, one hot path each, on the test
suite's embedded server (``tests/conftest.py``)::

    python -m benchmarks micro [--quick] [pytest options, e.g. -k tail]
    python -m benchmarks micro --benchmark-save=before   # ... change ..., then
    python -m benchmarks micro --benchmark-compare        # against the saved run

``--quick`` gives each benchmark at most 0.2 s (3 rounds at least). With ``--out OUT``
pytest's table goes to ``OUT.md`` and pytest-benchmark's numbers to ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from benchmarks.lib.report import tee_stdout, write_results

HERE = Path(__file__).resolve().parent.parent / "micro"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--quick", action="store_true", help="at most 0.2 s per benchmark")
    p.add_argument("--out", help="write OUT.md (the table) and OUT.json (the numbers)")
    a, rest = p.parse_known_args(argv)
    args = [
        str(HERE),
        "-p",
        "no:cacheprovider",
        "-n",
        "0",
        "--benchmark-columns=median,iqr,min,max,rounds",
        *rest,
    ]
    if a.quick:
        args += ["--benchmark-max-time=0.2", "--benchmark-min-rounds=3"]
    if not a.out:
        return int(pytest.main(args))
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "micro.json"
        with tee_stdout() as printed:
            rc = int(pytest.main([*args, f"--benchmark-json={raw}"]))
        data = json.loads(raw.read_text()) if raw.is_file() else None
    write_results(a.out, "```\n" + printed.getvalue() + "```\n", data)
    return rc


if __name__ == "__main__":
    sys.exit(main())
