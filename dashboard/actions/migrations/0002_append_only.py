"""On Postgres the audit is append-only in the database itself: deletes are refused,
steps cannot be changed, and an entry's who/what/why cannot be rewritten (its
state, outcome and times move on as the action runs)."""

from django.db import migrations

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION raywatch_audit_append_only() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'the raywatch audit is append-only: delete refused';
  END IF;
  IF TG_TABLE_NAME = 'actions_auditstep' THEN
    RAISE EXCEPTION 'the raywatch audit is append-only: a step cannot be changed';
  END IF;
  IF (NEW.kind, NEW.target_key, NEW.target, NEW.user_id, NEW.username, NEW.address,
      NEW.reason, NEW.requested_at)
     IS DISTINCT FROM (OLD.kind, OLD.target_key, OLD.target, OLD.user_id, OLD.username,
      OLD.address, OLD.reason, OLD.requested_at) THEN
    RAISE EXCEPTION 'the raywatch audit is append-only: who, what and why cannot change';
  END IF;
  RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_entry_append_only BEFORE UPDATE OR DELETE ON actions_auditentry
  FOR EACH ROW EXECUTE FUNCTION raywatch_audit_append_only();
CREATE TRIGGER audit_step_append_only BEFORE UPDATE OR DELETE ON actions_auditstep
  FOR EACH ROW EXECUTE FUNCTION raywatch_audit_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS audit_entry_append_only ON actions_auditentry;
DROP TRIGGER IF EXISTS audit_step_append_only ON actions_auditstep;
DROP FUNCTION IF EXISTS raywatch_audit_append_only();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("actions", "0001_audit")]
    operations = [migrations.RunPython(forwards, backwards)]
