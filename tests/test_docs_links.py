"""README.md stays the newcomer's page and the docs hold together: the README is at most
250 lines and links every page under docs/, and every relative link in README.md and
docs/*.md (a file, a file#anchor, or an #anchor of the page itself) points at a file that
exists and, for a Markdown page, at a heading it has. No database, no server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 250

# [text](target) and ![alt](target), an optional "title" after the target.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


BENCH_README = ROOT / "bench" / "README.md"
BENCH_PAGES = DOCS / "benchmarks"


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md")), BENCH_README, *sorted(BENCH_PAGES.glob("*.md"))]


def prose(path: Path, code_spans: bool = False) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with inline code spans blanked out unless
    code_spans (a heading's anchor keeps their text)."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line if code_spans else CODE_SPAN.sub("", line)))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, no punctuation, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose(path, code_spans=True):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    return [(number, target) for number, line in prose(path) for target in LINK.findall(line)]


def broken(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(root)}:{number}: {target}"
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{where}: no such file")
            continue
        if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: {linked.relative_to(root)} has no heading #{anchor}")
    return problems


def test_the_readme_is_a_page_a_newcomer_reads():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: move the detail to docs/")


def test_the_readme_links_every_docs_page():
    targets = {(ROOT / target.partition("#")[0]).resolve()
               for _, target in links(README) if not target.startswith(("http:", "https:"))}
    missing = [page.name for page in sorted(DOCS.glob("*.md")) if page.resolve() not in targets]
    assert not missing, f"README.md links no docs page named {missing}"


def test_every_bench_has_a_page_and_the_bench_index_links_it():
    """One page per script in bench/ (docs/benchmarks/<script>.md), each linked from
    bench/README.md's index, and no page for a bench that is gone."""
    from tests.test_benches_smoke import BENCHES

    wanted = {(BENCH_PAGES / bench).with_suffix(".md") for bench in BENCHES}
    linked = {(BENCH_README.parent / target.partition("#")[0]).resolve()
              for _, target in links(BENCH_README)}
    assert {p.name for p in wanted if not p.exists()} == set(), "benches with no page"
    assert {p.name for p in wanted if p.resolve() not in linked} == set(), \
        "pages bench/README.md does not link"
    assert {p.name for p in BENCH_PAGES.glob("*.md")} - {p.name for p in wanted} == set(), \
        "pages of no bench"


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_points_at_something_that_exists(page: Path):
    assert not broken(page), "\n".join(broken(page))


def test_the_link_check_finds_a_broken_link(tmp_path: Path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# There\n\n## A `code` heading (yes)\n")
    page.write_text("# Page\n\n[ok](there.md#a-code-heading-yes) [own](#page)\n"
                    "[gone](missing.md) [bad](there.md#nowhere) [web](https://example.org)\n"
                    "`[not a link](nowhere.md)`\n\n```\n[nor this](nowhere.md)\n```\n")
    assert broken(page, root=tmp_path) == ["page.md:4: missing.md: no such file",
                        "page.md:4: there.md#nowhere: there.md has no heading #nowhere"]
