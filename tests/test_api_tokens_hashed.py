"""API tokens are stored only as hashes and expire: a copy of the database (a backup, a
read-only SQL role) holds no token that opens the API, and a token handed to a script
stops working after RAYWATCH_API_TOKEN_DAYS. Tokens made before raywatch hashed them
keep working after the upgrade (hashed in its migration, with the same expiry), and the
table that held them in plain text is gone."""

from __future__ import annotations

import importlib
import time
from io import StringIO

import pytest
import time_machine
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.test import Client

pytestmark = pytest.mark.django_db
UPGRADE = importlib.import_module("dashboard.core.migrations.0002_api_tokens_hashed")


def new_token(username: str, *args: str) -> str:
    """What a script does: `manage.py drf_create_token NAME | awk '{print $3}'`."""
    out = StringIO()
    call_command("drf_create_token", username, *args, stdout=out, stderr=StringIO())
    return out.getvalue().split()[2]


def reads_the_api(key: str) -> int:
    return Client().get("/api/nodes/", HTTP_AUTHORIZATION=f"Token {key}").status_code


def everything_stored() -> str:
    """Every row of every table, as text: what a database dump holds."""
    rows = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            rows.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(rows)


def test_the_database_holds_no_usable_token(viewer) -> None:  # type: ignore[no-untyped-def]
    key = new_token(viewer.username)
    assert reads_the_api(key) == 200
    assert key not in everything_stored()


def test_a_token_stops_working_after_its_days(viewer, settings) -> None:  # type: ignore[no-untyped-def]
    assert settings.API_TOKEN_DAYS > 3  # a token made without --days outlives the short one
    key, short = new_token(viewer.username), new_token(viewer.username, "--days", "2")
    with time_machine.travel(time.time() + 3 * 86400, tick=False):
        assert reads_the_api(short) == 401
        assert reads_the_api(key) == 200
    with time_machine.travel(time.time() + (settings.API_TOKEN_DAYS + 1) * 86400, tick=False):
        assert reads_the_api(key) == 401


def test_reset_revokes_the_users_other_tokens(viewer) -> None:  # type: ignore[no-untyped-def]
    old = new_token(viewer.username)
    new = new_token(viewer.username, "--reset")
    assert (reads_the_api(old), reads_the_api(new)) == (401, 200)


def test_a_plaintext_token_from_before_keeps_working_hashed(viewer, settings) -> None:  # type: ignore[no-untyped-def]
    old_key = "0f3c2a9e8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a39"  # DRF's: 40 hex digits
    with connection.cursor() as cursor:  # as rest_framework.authtoken left it
        cursor.execute('CREATE TABLE "authtoken_token" ("key" varchar(40) PRIMARY KEY, '
                       '"created" timestamp with time zone NOT NULL, "user_id" integer NOT NULL)')
        cursor.execute('INSERT INTO "authtoken_token" VALUES (%s, now(), %s)',
                       [old_key, viewer.pk])
    with connection.schema_editor() as editor:
        UPGRADE.hash_plaintext_tokens(apps, editor)
    assert "authtoken_token" not in connection.introspection.table_names()
    assert old_key not in everything_stored()
    assert reads_the_api(old_key) == 200
    with time_machine.travel(time.time() + (settings.API_TOKEN_DAYS + 1) * 86400, tick=False):
        assert reads_the_api(old_key) == 401
