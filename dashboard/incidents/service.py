"""Open, update and resolve incidents from detector findings.

One firing incident per (kind, subject): finding the same thing again updates
it. A firing incident of the evaluated kinds that no detector reports any more
is resolved: incidents resolve themselves when the condition clears.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from dashboard.core.push import publish
from dashboard.incidents.models import Incident
from dashboard.incidents.rules import Finding

ALERTS_GROUP = "alerts"


def sync_findings(kinds: Iterable[str], findings: Iterable[Finding], now: datetime,
                  context: dict[str, dict[str, Any]] | None = None) -> dict[str, int]:
    """Make the firing incidents of `kinds` match `findings`. `context` maps a subject
    to extra fields for new incidents (trial, experiment, node_ip)."""
    kinds = set(kinds)
    found = {(f.kind, f.subject): f for f in findings}
    opened = updated = resolved = 0
    with transaction.atomic():
        firing = {
            (i.kind, i.subject): i
            for i in Incident.objects.select_for_update().filter(state=Incident.FIRING,
                                                                  kind__in=kinds)
        }
        for key, finding in found.items():
            incident = firing.get(key)
            if incident is None:
                opened += _open(finding, now, (context or {}).get(finding.subject, {}))
            elif (incident.summary, incident.details) != (finding.summary, finding.details):
                incident.summary, incident.details = finding.summary, finding.details
                incident.severity, incident.updated_at = finding.severity, now
                incident.save(update_fields=["summary", "details", "severity", "updated_at"])
                updated += 1
        for key, incident in firing.items():
            if key not in found:
                incident.state, incident.resolved_at, incident.updated_at = (
                    Incident.RESOLVED, now, now)
                incident.save(update_fields=["state", "resolved_at", "updated_at"])
                resolved += 1
        if opened or resolved or updated:
            publish(ALERTS_GROUP, "alerts", alerts_summary())
    return {"opened": opened, "updated": updated, "resolved": resolved}


def _open(finding: Finding, now: datetime, extra: dict[str, Any]) -> int:
    try:
        with transaction.atomic():
            Incident.objects.create(
                kind=finding.kind, subject=finding.subject, severity=finding.severity,
                summary=finding.summary, details=finding.details, opened_at=now,
                updated_at=now, **extra,
            )
    except IntegrityError:
        return 0  # another worker opened it a moment ago: one incident, not two
    return 1


def alerts_summary() -> dict[str, Any]:
    firing = Incident.objects.filter(state=Incident.FIRING)
    return {"firing": firing.count(),
            "critical": firing.filter(severity=Incident.CRITICAL).count()}
