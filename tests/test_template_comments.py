"""Django's `{# #}` comments end on the line they start on; a longer one is printed
into the page as text (it was, under the confirm dialog of four pages)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.template.loader import render_to_string

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


@pytest.mark.parametrize("path", sorted(p.relative_to(TEMPLATES).as_posix()
                                        for p in TEMPLATES.rglob("*.html")))
def test_no_comment_runs_past_its_line(path: str) -> None:
    for number, line in enumerate((TEMPLATES / path).read_text().splitlines(), 1):
        start = line.find("{#")
        assert start < 0 or "#}" in line[start:], (
            f"{path}:{number}: a {{# comment must close on its line; use "
            f"{{% comment %}} for more")


def test_the_confirm_dialog_prints_no_template_text() -> None:
    html = render_to_string("actions/dialog.html")
    assert "{#" not in html and "#}" not in html and "{%" not in html
    assert 'id="action-dialog"' in html
