"""An incident's timeline: its events and the notifications that carried it."""

from __future__ import annotations

from typing import Any

from dashboard.alerts.models import Delivery
from dashboard.incidents.models import Incident


def timeline(incident: Incident) -> list[dict[str, Any]]:
    entries = [{"at": e.at, "kind": e.kind, "text": e.text,
                "actor": e.actor.get_username() if e.actor else None, "outcome": None}
               for e in incident.events.select_related("actor")]
    for d in Delivery.objects.filter(incidents=incident).select_related("channel"):
        entries.append({"at": d.created_at, "kind": "notification",
                        "text": f"{d.status} message to {d.channel.name} ({d.channel.kind})",
                        "actor": None, "outcome": outcome(d)})
    return sorted(entries, key=lambda e: e["at"])


def outcome(d: Delivery) -> str:
    tries = f"{d.attempts} {'try' if d.attempts == 1 else 'tries'}"
    if d.state == Delivery.SENT:
        return f"delivered {d.sent_at:%H:%M:%S} UTC (HTTP {d.response_code}, {tries})"
    if d.state == Delivery.FAILED:
        return f"failed after {tries}: {d.last_error}"
    if d.attempts:
        return f"retrying at {d.next_attempt_at:%H:%M:%S} UTC after {tries}: {d.last_error}"
    return "queued"
