"""Writing the audit trail of one action: each step as it happens, and the action's
state as it moves on (requested -> signalled -> succeeded or failed). The request
(service.py) and the run (executor.py) both write here; this module calls neither."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dashboard.actions.models import AuditEntry, AuditStep
from dashboard.core.push import ACTIONS_GROUP, publish


def step(entry: AuditEntry, name: str, at: datetime, detail: str = "") -> None:
    AuditStep.objects.create(entry=entry, at=at, step=name, detail=detail)
    publish(ACTIONS_GROUP, "action", {"id": entry.pk, "state": entry.state})


def advance(entry: AuditEntry, state: str, at: datetime, detail: str) -> None:
    """Move the action on (signalled, succeeded, failed) and record the step."""
    fields: dict[str, Any] = {"state": state}
    if state in (AuditEntry.SUCCEEDED, AuditEntry.FAILED):
        fields.update(outcome=detail, finished_at=at)
    AuditEntry.objects.filter(pk=entry.pk).update(**fields)
    for name, value in fields.items():
        setattr(entry, name, value)
    step(entry, state, at, detail)
