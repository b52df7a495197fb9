"""The import benchmark (python -m benchmarks import) runs end to end in --quick mode (2,000
turns) and writes its table. No timing assertions: only that every step ran and reported a rate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_bench_import_quick(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "import"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "import", "--quick", "--dsn", dsn, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    table = out.with_suffix(".md").read_text()
    for step in ("import single-row", "export jsonl", "import jsonl"):
        assert f"| {step} | 1 |" in table, table
    assert "2,000 turns" in table
