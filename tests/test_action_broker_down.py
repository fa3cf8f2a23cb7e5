"""When the Celery broker (Redis) is down, an accepted action cannot be handed to a
worker: it fails at once with that reason in the audit, instead of staying
"requested" forever and blocking every later action on its target."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.served import embedded_env, manage, migrate, scratch_database

# Runs inside `manage.py shell` of a raywatch whose REDIS_URL answers nothing.
SCRIPT = """
import json
from django.contrib.auth.models import Group, User
from django.utils import timezone
from dashboard.actions.models import AuditEntry
from dashboard.actions.service import Plan, request
user = User.objects.create_user("oscar")
user.groups.add(Group.objects.get_or_create(name="operator")[0])
plan = lambda: Plan("stop_job", "job:x", {"key": "x"}, "operator", lambda: None)
tries = [request(user, plan, {}, "stop it", "127.0.0.1", timezone.now(), "operator")
         for _ in range(2)]
print(json.dumps([{"created": created, "state": e.state, "outcome": e.outcome,
                   "steps": list(e.steps.values_list("step", flat=True))}
                  for e, created in ((AuditEntry.objects.get(pk=e.pk), c) for e, c in tries)]))
"""


def test_an_action_no_worker_can_take_fails_with_why(tmp_path: Path) -> None:
    with scratch_database(os.environ["DATABASE_URL"]) as database:
        env = {**embedded_env(tmp_path), "DATABASE_URL": database,
               "REDIS_URL": "redis://127.0.0.1:1/0"}  # nothing listens on port 1
        migrate(env)
        first, second = json.loads(manage(env, "shell", "-c", SCRIPT).splitlines()[-1])
    assert first["state"] == "failed" and first["steps"] == ["requested", "failed"]
    assert first["outcome"].startswith("could not start the action: ")
    assert "127.0.0.1:1" in first["outcome"]
    assert second["created"]  # the target is not left blocked by the first
