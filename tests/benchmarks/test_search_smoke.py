"""The vector search benchmark (python -m benchmarks search) runs end to end in --quick mode.

No timing assertions: only that it finishes, writes its tables, JSON and plan, and that every
recall it reports lies between 0 and 1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_search_scale_quick(server_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks",
        "search",
        "--quick",
        "--dsn",
        server_dsn,
        "--out",
        str(out / "search"),
        "--chunks",
        "2000",
        "--partitions",
        "2,3",
        "--queries",
        "20",
        "--big-queries",
        "10",
        "--variant-queries",
        "5",
        "--warmup",
        "2",
        "--variants",
        "largest",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    md = (out / "search.md").read_text(encoding="utf-8")
    for section in (
        "## Targets",
        "## 1. store.search",
        "## 2. Setting variants",
        "## 3. Load and HNSW build",
        "## 4. Plans",
    ):
        assert section in md, section
    # | partitions | tenant | path | recall@10 | ...
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \| ([0-9.]+) \|", md, flags=re.MULTILINE)
    store_rows = [r for r in rows if r[2].startswith("store.search (")]
    assert sorted({int(r[0]) for r in store_rows}) == [2, 3]
    assert {r[1].split()[0] for r in store_rows} == {"small", "big"}
    assert any("HNSW forced" in r[2] for r in rows) and any("exact" in r[2] for r in rows)
    assert all(0.0 <= float(r[3]) <= 1.0 for r in rows)

    data = json.loads((out / "search.json").read_text(encoding="utf-8"))
    assert [x["partitions"] for x in data["layouts"]] == [2, 3]
    for r in data["results"]:
        assert 0.0 <= r["recall"] <= 1.0
        assert 0.0 <= r["recall_min"] <= r["recall"]
    assert "Limit" in (out / "search_explain.txt").read_text(encoding="utf-8")
