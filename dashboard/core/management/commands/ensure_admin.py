from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from dashboard.core.roles import ADMIN


class Command(BaseCommand):
    help = ("Create an admin login if none exists: with the password in --password-file "
            "(a deployment's secret, never printed), else a new one, printed and saved in "
            "DATA_DIR/admin-password.txt (a first `make run`).")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password-file", default="",
                            help="the first admin's password, from a file (docker compose's "
                                 "admin_password secret): not printed, nothing written")

    def handle(self, *args: Any, username: str, password_file: str = "",
               **options: Any) -> None:
        User = get_user_model()
        existing = User.objects.filter(is_superuser=True).order_by("id").first()
        saved = settings.DATA_DIR / "admin-password.txt"
        if existing:
            where = f" (password in {saved})" if saved.exists() and not password_file else ""
            self.stdout.write(f"admin login: {existing.get_username()}{where}")
            return
        password = _given(password_file) if password_file else secrets.token_urlsafe(12)
        user = User(username=username, email="", is_staff=True, is_superuser=True)
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError(f"{password_file}: {' '.join(exc.messages)}") from None
        user.set_password(password)
        user.save()
        user.groups.add(Group.objects.get_or_create(name=ADMIN)[0])
        if password_file:
            self.stdout.write(self.style.SUCCESS(
                f"created admin login: user {username!r}, password from {password_file}"))
            return
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        saved.write_text(f"{username}\n{password}\n")
        saved.chmod(0o600)
        self.stdout.write(self.style.SUCCESS(
            f"created admin login: user {username!r}, password {password!r} "
            f"(also saved in {saved})"
        ))


def _given(path: str) -> str:
    try:
        password = Path(path).read_text().strip()
    except OSError as exc:
        raise CommandError(f"cannot read the admin password file {path}: {exc.strerror}") \
            from None
    if not password:
        raise CommandError(f"the admin password file {path} is empty")
    return password
