"""`manage.py drf_create_token USERNAME [--days N] [--reset]`: a new API token for a user,
printed once as `Generated token KEY for user USERNAME` (DRF's own command's name and
words, so scripts that read the third word keep working). raywatch keeps only its hash
(django-rest-knox); it stops working after --days (RAYWATCH_API_TOKEN_DAYS). Unlike
DRF's command each call makes a new token; --reset revokes the user's others first.
Revoke one in /admin/ (Knox: Auth tokens)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from knox.models import AuthToken


class Command(BaseCommand):
    help = "Make an API token for a user (shown once; stored hashed; it expires)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--days", type=int, default=None,
                            help="days until it stops working (default "
                                 "RAYWATCH_API_TOKEN_DAYS)")
        parser.add_argument("-r", "--reset", action="store_true",
                            help="revoke the user's other tokens first")

    def handle(self, *args: Any, username: str, days: int | None, reset: bool,
               **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        days = settings.API_TOKEN_DAYS if days is None else days
        if days < 1:
            raise CommandError(f"--days {days}: a token lasts at least one day")
        if reset:
            revoked, _ = AuthToken.objects.filter(user=user).delete()
            self.stderr.write(f"revoked {revoked} token(s) of {username}")
        row, key = AuthToken.objects.create(user, expiry=timedelta(days=days))
        self.stdout.write(f"Generated token {key} for user {username}")
        self.stderr.write(f"It stops working {row.expiry:%Y-%m-%d %H:%M} UTC. raywatch keeps "
                          "only its hash: this is the one time it is shown.")
