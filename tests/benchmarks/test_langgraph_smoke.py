"""The LangGraph benchmark (python -m benchmarks langgraph) runs end to end on 20 turns.

No timing assertions: only that it finishes and that its table has every row, for both
checkpointers, with the agent's messages counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

pytest.importorskip("langgraph.checkpoint.postgres")

ROOT = Path(__file__).resolve().parents[2]
ROWS = (
    "bytes on disk (pg_total_relation_size)",
    "bytes after VACUUM",
    "step, first 10: median (p10-p90) ms",
    "step, last 10: median (p10-p90) ms",
    "checkpointer part of a step: last / first 10 (medians)",
    "resume: new connection + saver, get_state (ms)",
    "resume: the first invoke after it (ms)",
    "20 turns / 1 turn (medians)",
)


@pytest.mark.slow
def test_bench_langgraph_20_turns(server_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "langgraph"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks",
        "langgraph",
        "--dsn",
        server_dsn,
        "--turns",
        "20",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    text = out.with_suffix(".md").read_text()
    assert "20 user turns" in text and "(54 messages after the run" in text
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    for row in ROWS:
        assert row in lines, row
        cells = [c.strip() for c in lines[row].strip("|").split("|")]
        assert cells[1] and cells[2], row  # a value for each checkpointer
