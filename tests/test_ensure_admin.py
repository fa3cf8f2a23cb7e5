"""The first admin: on `make run` a new password, printed once and saved beside the data;
in a deployment (docker compose's migrate) the password an operator put in a secret
file, printed nowhere and written nowhere (issue 43, L9), and held to the same password
rules as any other."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def ensure_admin(**options: str) -> str:
    out = StringIO()
    call_command("ensure_admin", stdout=out, **options)
    return out.getvalue()


def test_the_password_from_a_file_is_neither_printed_nor_written(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_DIR = tmp_path / "data"
    secret = tmp_path / "admin_password"
    secret.write_text("Xq7-correct-horse-battery\n")
    said = ensure_admin(password_file=str(secret))
    assert "Xq7-correct-horse-battery" not in said and str(secret) in said
    assert authenticate(username="admin", password="Xq7-correct-horse-battery") is not None
    assert not (settings.DATA_DIR / "admin-password.txt").exists()
    assert User.objects.get().groups.filter(name="admin").exists()
    again = ensure_admin(password_file=str(secret))  # every later start: nothing new
    assert again.startswith("admin login: admin") and User.objects.count() == 1


@pytest.mark.parametrize("content, why", [("", "is empty"), ("short1", "too short")])
def test_a_bad_password_file_stops_the_start_and_makes_no_admin(  # type: ignore[no-untyped-def]
        settings, tmp_path: Path, content: str, why: str) -> None:
    settings.DATA_DIR = tmp_path / "data"
    secret = tmp_path / "admin_password"
    secret.write_text(content)
    with pytest.raises(CommandError, match=why):
        ensure_admin(password_file=str(secret))
    assert not User.objects.exists()


def test_make_runs_first_admin_is_printed_once_and_saved(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_DIR = tmp_path / "data"
    said = ensure_admin()
    username, password = (settings.DATA_DIR / "admin-password.txt").read_text().split()
    assert password in said and authenticate(username=username, password=password)
