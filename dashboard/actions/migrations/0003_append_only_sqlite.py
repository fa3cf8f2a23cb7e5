"""The same append-only audit on SQLite, the embedded default's database: deletes are
refused, steps cannot be changed, an entry's who/what/why cannot be rewritten (its
state, outcome and times move on as the action runs). 0002 does it on Postgres."""

from django.db import migrations

WHO_WHAT_WHY = ("kind", "target_key", "target", "user_id", "username", "address", "reason",
                "requested_at")
TRIGGERS = {
    "audit_entry_no_delete": "BEFORE DELETE ON actions_auditentry",
    "audit_step_no_delete": "BEFORE DELETE ON actions_auditstep",
    "audit_step_no_update": "BEFORE UPDATE ON actions_auditstep",
    "audit_entry_who_what_why": "BEFORE UPDATE ON actions_auditentry WHEN "
                                + " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in WHO_WHAT_WHY),
}
MESSAGES = {
    "audit_entry_no_delete": "the raywatch audit is append-only: delete refused",
    "audit_step_no_delete": "the raywatch audit is append-only: delete refused",
    "audit_step_no_update": "the raywatch audit is append-only: a step cannot be changed",
    "audit_entry_who_what_why": "the raywatch audit is append-only: who, what and why "
                                "cannot change",
}


def create_sql() -> list[str]:
    return [f"CREATE TRIGGER IF NOT EXISTS {name} {when} "
            f"BEGIN SELECT RAISE(ABORT, '{MESSAGES[name]}'); END"
            for name, when in TRIGGERS.items()]


def drop_sql() -> list[str]:
    return [f"DROP TRIGGER IF EXISTS {name}" for name in TRIGGERS]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in create_sql():
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in drop_sql():
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("actions", "0002_append_only")]
    operations = [migrations.RunPython(forwards, backwards)]
