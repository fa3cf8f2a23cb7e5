"""API tokens move from rest_framework.authtoken (the key in plain text) to django-rest-knox
(a SHA-512 hash, an expiry). Each old token is hashed as knox hashes one, so scripts that
hold it keep working until RAYWATCH_API_TOKEN_DAYS from the upgrade; then the old table,
which no installed app owns any more, is dropped with the plain-text keys."""

import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import migrations
from django.utils import timezone

OLD_TABLE = "authtoken_token"
KEY_PREFIX = 15  # knox's CONSTANTS.TOKEN_KEY_LENGTH: the indexed start of a token


def hash_plaintext_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if OLD_TABLE not in connection.introspection.table_names():
        return
    AuthToken = apps.get_model("knox", "AuthToken")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id FROM {OLD_TABLE}")
        rows = cursor.fetchall()
    expiry = timezone.now() + timedelta(days=settings.API_TOKEN_DAYS)
    AuthToken.objects.bulk_create(
        [AuthToken(digest=hashlib.sha512(key.encode()).hexdigest(), token_key=key[:KEY_PREFIX],
                   user_id=user_id, expiry=expiry) for key, user_id in rows],
        ignore_conflicts=True)
    schema_editor.execute(f"DROP TABLE {OLD_TABLE}")


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("knox", "0009_extend_authtoken_field"),
    ]

    operations = [migrations.RunPython(hash_plaintext_tokens, migrations.RunPython.noop)]
