"""On Postgres the audit refuses TRUNCATE too (issue 43, L8): row triggers (0002) do not
fire for it, so one statement could empty the trail. The test suite's flush between
transactional tests lifts these two for its own statement (tests/conftest.py)."""

from django.db import migrations

TABLES = {"audit_entry_no_truncate": "actions_auditentry",
          "audit_step_no_truncate": "actions_auditstep"}
NO_TRUNCATE = """
CREATE OR REPLACE FUNCTION raywatch_audit_no_truncate() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'the raywatch audit is append-only: truncate refused';
END
$$ LANGUAGE plpgsql;
""" + "".join(f"CREATE TRIGGER {name} BEFORE TRUNCATE ON {table} FOR EACH STATEMENT "
              "EXECUTE FUNCTION raywatch_audit_no_truncate();\n"
              for name, table in TABLES.items())
DROP = "".join(f"DROP TRIGGER IF EXISTS {name} ON {table};\n"
               for name, table in TABLES.items()) + \
    "DROP FUNCTION IF EXISTS raywatch_audit_no_truncate();\n"


def lifted_sql() -> list[str]:
    """What lets one flush through (the test suite's), and puts the triggers back."""
    return [f"ALTER TABLE {table} DISABLE TRIGGER {name}" for name, table in TABLES.items()]


def restored_sql() -> list[str]:
    return [f"ALTER TABLE {table} ENABLE TRIGGER {name}" for name, table in TABLES.items()]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(NO_TRUNCATE)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("actions", "0004_audit_more_kinds")]
    operations = [migrations.RunPython(forwards, backwards)]
