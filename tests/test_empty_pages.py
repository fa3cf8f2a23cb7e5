"""A page with nothing to show says why and what to do next: which directories
raywatch reads and how to add one, or that node agents send the logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def page(user, path: str) -> str:  # type: ignore[no-untyped-def]
    client = Client()
    client.login(username=user.username, password=PASSWORD)
    return client.get(path).content.decode()


def test_no_experiment_yet_names_the_directories_read(settings, viewer, tmp_path: Path  # type: ignore[no-untyped-def]
                                                       ) -> None:
    settings.LOG_DIRS = [str(tmp_path / "results"), str(tmp_path / "more")]
    html = page(viewer, "/experiments/")
    assert f"<li>{tmp_path / 'results'}</li>" in html and f"<li>{tmp_path / 'more'}</li>" in html
    assert "RAYWATCH_LOG_DIRS=" in html


def test_with_central_logs_off_it_points_at_the_agents(settings, viewer) -> None:  # type: ignore[no-untyped-def]
    settings.CENTRAL_LOGS = False
    html = page(viewer, "/experiments/")
    assert "RAYWATCH_CENTRAL_LOGS=0" in html and "make agent" in html
    assert 'id="watched-dirs"' not in html
