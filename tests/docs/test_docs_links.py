"""Every relative link in README.md and docs/**/*.md points to a file that exists and, when it
names an anchor (`page.md#section`, `#section`), to a heading of that page, by GitHub's rule
for heading anchors.

Links into benchmarks/results/ are checked apart: those files are being moved into
results/latest/ and results/archive/, and the links follow once the move is done; until then
that check is an expected failure (remove its marker when it passes)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)
_CODE = re.compile(r"(`+).+?\1", re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    return _CODE.sub("", _FENCE.sub("", text))


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    result = set()
    for match in _HEADING.finditer(text):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))  # link text only
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result


def relative_links(path: Path) -> list[str]:
    links = []
    for target in _LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, mailto:, ...
            continue
        links.append(target)
    return links


def test_the_pages_are_found() -> None:
    assert ROOT / "README.md" in PAGES and ROOT / "docs" / "architecture.md" in PAGES


def broken_links(page: Path, *, results: bool) -> list[str]:
    """The page's relative links that do not resolve: those into benchmarks/results/ when
    ``results``, the others otherwise."""
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / unquote(file_part)).resolve() if file_part else page
        if dest.is_relative_to(RESULTS) != results:
            continue
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = broken_links(page, results=False)
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_every_link_into_benchmark_results_resolves() -> None:
    broken = [
        f"{page.relative_to(ROOT)}: {link}"
        for page in PAGES
        for link in broken_links(page, results=True)
    ]
    assert not broken, "\n".join(broken)
