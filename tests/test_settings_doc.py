"""docs/settings.md cannot drift from the code: it is what dashboard/settingsdoc.py makes
of the code now, it documents every RAYWATCH_* variable the code names, each with a
description, and the settings modules point at docs/ pages, not at README sections.
Plain pytest: nothing here needs Django or a database."""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
from pathlib import Path

from dashboard import settingsdoc

ROOT = Path(__file__).resolve().parent.parent
VARIABLE = re.compile(r"\bRAYWATCH_[A-Z0-9_]+")
# Names the code holds that are not settings: raywatch sets them for processes it starts.
NOT_SETTINGS: set[str] = set()


def documented() -> dict[str, str]:
    """Each variable in docs/settings.md's tables -> its description (the italic kind and
    readers at the end of the cell left out)."""
    rows = {}
    for line in (ROOT / settingsdoc.DOC).read_text().splitlines():
        cells = re.split(r"(?<!\\)\|", line)[1:-1]
        if len(cells) != 3 or cells[0].strip() in ("variable", "---"):
            continue
        description = re.sub(r"\*\([^*]*\)\*\s*$", "", cells[2]).strip()
        for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0]):
            rows[name] = description
    return rows


def named_in_code() -> dict[str, str]:
    """Every RAYWATCH_* name in a string literal under dashboard/ or collectors/
    (migrations aside) -> where first."""
    names: dict[str, str] = {}
    for path in settingsdoc.python_files(("dashboard", "collectors")):
        for node in ast.walk(ast.parse((ROOT / path).read_text(), path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in VARIABLE.findall(node.value):
                    names.setdefault(name, f"{path}:{node.lineno}")
    return names


def test_the_page_is_what_the_code_says_now() -> None:
    expected = settingsdoc.generate()
    current = (ROOT / settingsdoc.DOC).read_text()
    diff = "".join(difflib.unified_diff(
        current.splitlines(keepends=True), expected.splitlines(keepends=True),
        "docs/settings.md", "from the code"))
    assert current == expected, f"docs/settings.md is stale: run `make settings-doc`\n{diff}"


def test_every_variable_the_code_names_is_documented() -> None:
    named = named_in_code()
    missing = {n: where for n, where in named.items()
               if n not in NOT_SETTINGS and n not in documented()}
    assert not missing, f"named in the code, not in docs/settings.md: {missing}"
    assert set(named) >= NOT_SETTINGS, "an exclusion the code no longer names: drop it"


def test_every_documented_variable_says_what_it_does() -> None:
    rows = documented()
    assert len(rows) > 100  # the parse above found the tables
    assert not [n for n, text in rows.items() if not text], "documented without a description"
    found = settingsdoc.collect()
    assert not [s.name for s in found if not s.description.strip()]
    assert {s.name for s in found} <= set(rows)


def test_settings_comments_point_at_docs_not_readme() -> None:
    for path in (settingsdoc.SETTINGS, settingsdoc.AGENT_CONFIG):
        text = (ROOT / path).read_text()
        comments = [(tok.start[0], tok.string) for tok in
                    tokenize.generate_tokens(io.StringIO(text).readline)
                    if tok.type == tokenize.COMMENT]
        tree = ast.parse(text)
        docstrings = [(node.body[0].lineno, ast.get_docstring(node) or "")
                      for node in ast.walk(tree)
                      if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                      and ast.get_docstring(node)]
        readme = [f"{path}:{line}: {text.strip()}" for line, text in comments + docstrings
                  if "README" in text]
        assert not readme, "point at docs/ pages instead:\n" + "\n".join(readme)
