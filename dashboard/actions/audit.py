"""Writing the audit trail of one action: each step as it happens, and the action's
state as it moves on (requested -> signalled -> succeeded or failed). The request
(service.py) and the run (executor.py) both write here; this module calls neither. The
acts the apps below say through dashboard/core/audit.py (tokens, clusters, stacks taken
by hand) are written here too (write_act)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dashboard.actions.models import AuditEntry, AuditStep
from dashboard.core import audit as core_audit
from dashboard.core.push import ACTIONS_GROUP, publish


def step(entry: AuditEntry, name: str, at: datetime, detail: str = "") -> None:
    AuditStep.objects.create(entry=entry, at=at, step=name, detail=detail)
    publish(ACTIONS_GROUP, "action", {"id": entry.pk, "state": entry.state})


def advance(entry: AuditEntry, state: str, at: datetime, detail: str,
            since: tuple[str, ...] = AuditEntry.ACTIVE) -> bool:
    """Move the action on (signalled, succeeded, failed) and record the step, if it is
    still in one of the states `since`. An action that already ended (failed as lost while
    its executor was stalled) keeps its outcome: what came late is a step of its own."""
    fields: dict[str, Any] = {"state": state}
    if state in (AuditEntry.SUCCEEDED, AuditEntry.FAILED):
        fields.update(outcome=detail, finished_at=at)
    if not AuditEntry.objects.filter(pk=entry.pk, state__in=since).update(**fields):
        step(entry, "late", at, f"{state} after the action had ended: {detail}")
        return False
    for name, value in fields.items():
        setattr(entry, name, value)
    step(entry, state, at, detail)
    return True


def write_act(sender: Any, act: core_audit.Act, **kwargs: Any) -> None:
    """An act of an app below this one (core/audit.py) as an entry of the trail: done
    when it is recorded (succeeded), with who, from where and what came of it."""
    entry = AuditEntry.objects.create(
        kind=act.kind, target_key=act.target_key[:300], target=act.target,
        user=act.user if act.user is not None and act.user.is_authenticated else None,
        username=core_audit.username(act.user), address=act.address[:64], reason="",
        requested_at=act.at, started_at=act.at, state=AuditEntry.SUCCEEDED,
        outcome=act.outcome, finished_at=act.at)
    step(entry, AuditEntry.SUCCEEDED, act.at,
         f"by {entry.username}{f' from {entry.address}' if entry.address else ''}"
         f"{f': {act.outcome}' if act.outcome else ''}")
