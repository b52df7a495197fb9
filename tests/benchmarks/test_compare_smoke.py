"""The peer benchmark (python -m benchmarks compare) runs end to end in --quick mode on tiny sizes.

No timing assertions: only that it finishes, writes its results table and plots, and that
the table names every contender.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

for _mod in ("matplotlib", "langchain_postgres", "langgraph.checkpoint.postgres"):
    pytest.importorskip(_mod)

ROOT = Path(__file__).resolve().parents[2]
CONTENDERS = (
    "shardstore",
    "naive jsonb ||",
    "langchain-postgres",
    "langgraph PostgresSaver",
    "floor (INSERT / COPY)",
)
PLOTS = ("growth_append.png", "growth_tail.png", "storage.png", "throughput.png")


@pytest.mark.slow
def test_compare_quick_tiny(server_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks",
        "compare",
        "--quick",
        "--dsn",
        server_dsn,
        "--out",
        str(out / "compare"),
        "--sizes",
        "20,60",
        "--rounds",
        "2",
        "--appends",
        "8",
        "--writers",
        "3",
        "--conc-appends",
        "3",
        "--tail-calls",
        "2",
        "--size-appends",
        "2",
        "--read-reps",
        "1",
        "--batch",
        "25",
        "--corpus",
        "200",
        "--cap",
        "120",
    ]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    md = (out / "compare.md").read_text(encoding="utf-8")
    assert (out / "compare.json").is_file()
    for name in CONTENDERS:
        assert f"| {name} |" in md, name
    for section in ("## Targets", "## 1. Appends", "## 2. Storage", "## 3. Latency"):
        assert section in md
    assert "pgvector extension" in md and "langgraph-checkpoint-postgres" in md
    for png in PLOTS:
        path = out / png
        assert path.is_file() and path.stat().st_size > 1000, png
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
