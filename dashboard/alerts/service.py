"""What operators do to incidents: acknowledge them, silence them. Permission
checks happen in the views; these record who did what on the incident's timeline."""

from __future__ import annotations

import fnmatch
from datetime import datetime
from typing import Any

from django.db import transaction

from dashboard.alerts.models import Silence
from dashboard.alerts.summary import alerts_summary
from dashboard.core.errors import ApiError
from dashboard.core.push import ALERTS_GROUP, publish
from dashboard.incidents.models import SEVERITIES, Incident, IncidentEvent
from dashboard.incidents.service import record

GLOB_CHARS = set("*?[")


class ActionError(ApiError):
    """An acknowledgement or a silence that cannot be made, and why."""


def acknowledge(incident: Incident, user: Any, note: str, now: datetime) -> bool:
    """Acknowledge a firing incident: its reminders stop; new incidents still alert.
    False when it was already acknowledged (nothing changes, nothing is recorded)."""
    with transaction.atomic():
        locked = Incident.objects.select_for_update().get(pk=incident.pk)
        if locked.state != Incident.FIRING:
            raise ActionError("this incident is resolved: there is nothing to acknowledge",
                              status=409)
        if locked.acknowledged_at is not None:
            return False
        locked.acknowledged_at, locked.acknowledged_by = now, user
        locked.ack_note = note.strip()[:2000]
        locked.save(update_fields=["acknowledged_at", "acknowledged_by", "ack_note"])
        record(locked, IncidentEvent.ACKNOWLEDGED, now, locked.ack_note, actor=user)
        _changed([locked.pk])
    incident.refresh_from_db()
    return True


def create_silence(user: Any, matchers: dict[str, str], starts_at: datetime,
                   ends_at: datetime, comment: str, now: datetime) -> Silence:
    matchers = {m: (matchers.get(m) or "").strip() for m in Silence.MATCHERS}
    problems = silence_problems(matchers, starts_at, ends_at, comment, now)
    if problems:
        raise ActionError("; ".join(problems))
    with transaction.atomic():
        silence = Silence.objects.create(created_by=user, comment=comment.strip(),
                                         starts_at=starts_at, ends_at=ends_at, **matchers)
        muted = would_mute(matchers)
        if silence.active(now):
            for incident in muted:
                record(incident, IncidentEvent.SILENCED, now,
                       f"silence #{silence.pk} until {ends_at:%Y-%m-%d %H:%M} UTC: "
                       f"{silence.comment}", actor=user)
        _changed([i.pk for i in muted])
    return silence


def silence_problems(matchers: dict[str, str], starts_at: datetime, ends_at: datetime,
                     comment: str, now: datetime) -> list[str]:
    problems = matcher_problems(matchers)
    if ends_at <= starts_at:
        problems.append("the silence must end after it starts")
    elif ends_at <= now:
        problems.append("the silence would already be over")
    if not comment.strip():
        problems.append("say why (a comment is required)")
    return problems


def matcher_problems(matchers: dict[str, str]) -> list[str]:
    problems = []
    if not any(matchers.values()):
        problems.append("give at least one matcher (kind, severity, subject, experiment or "
                        "node); use kind=* to silence everything")
    severity = matchers.get("severity", "")
    if severity and not GLOB_CHARS & set(severity) and severity not in SEVERITIES:
        problems.append(f"severity must be one of {', '.join(SEVERITIES)} or a glob")
    for name, pattern in matchers.items():
        if pattern.count("[") != pattern.count("]"):
            problems.append(f"{name}: unbalanced [ ] in the pattern")
        else:
            fnmatch.translate(pattern)
    return problems


def would_mute(matchers: dict[str, str]) -> list[Incident]:
    """The firing incidents a silence with these matchers would mute, matched as the
    silence itself will match them (Silence.matches), before it is made."""
    candidate = Silence(**{m: (matchers.get(m) or "").strip() for m in Silence.MATCHERS})
    firing = Incident.objects.filter(state=Incident.FIRING).select_related(
        "trial", "acknowledged_by", "cluster")
    return [i for i in firing.order_by("-opened_at", "-id") if candidate.matches(i)]


def end_silence(silence: Silence, now: datetime) -> bool:
    """End an active or future silence now. False when it was already over."""
    if silence.ends_at <= now:
        return False
    silence.ends_at = max(now, silence.starts_at)
    silence.save(update_fields=["ends_at"])
    _changed([])
    return True


def _changed(incident_ids: list[int]) -> None:
    publish(ALERTS_GROUP, "alerts", alerts_summary)
    publish(ALERTS_GROUP, "incidents_changed", {"incidents": incident_ids})
