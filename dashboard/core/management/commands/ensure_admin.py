from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand

from dashboard.core.roles import ADMIN


class Command(BaseCommand):
    help = "Create an admin login if none exists, and print it."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        User = get_user_model()
        existing = User.objects.filter(is_superuser=True).order_by("id").first()
        password_file = settings.DATA_DIR / "admin-password.txt"
        if existing:
            where = f" (password in {password_file})" if password_file.exists() else ""
            self.stdout.write(f"admin login: {existing.get_username()}{where}")
            return
        password = secrets.token_urlsafe(12)
        user = User.objects.create_superuser(username=username, email="", password=password)
        user.groups.add(Group.objects.get_or_create(name=ADMIN)[0])
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        password_file.write_text(f"{username}\n{password}\n")
        password_file.chmod(0o600)
        self.stdout.write(self.style.SUCCESS(
            f"created admin login: user {username!r}, password {password!r} "
            f"(also saved in {password_file})"
        ))
