"""Whether anybody was told of an incident: an incident no chat channel carried says so
on the alerts list and its own page, instead of looking as if someone knew."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dashboard.alerts.models import Channel, Delivery, Silence, silenced_by
from dashboard.incidents.models import Incident


def reach_context(incidents: Iterable[Incident], silences: list[Silence]) -> dict[str, Any]:
    """What the serializers need to say who was told, read once for a page of incidents."""
    ids = [i.pk for i in incidents]
    carried = Delivery.incidents.through.objects.filter(incident_id__in=ids)
    return {"silences": silences, "channels": list(Channel.objects.all()),
            "carried": set(carried.values_list("incident_id", flat=True))}


def nobody_told(incident: Incident, context: dict[str, Any]) -> str | None:
    """Why no channel carried this incident, when none did and none will; None when a
    message carried it (its timeline says how that went), a silence holds it, or a
    channel routes it and its group's message is still to come."""
    if incident.pk in context["carried"] or silenced_by(incident, context["silences"]):
        return None
    channels = context["channels"]
    if not channels:
        return "no channel configured: nobody was told"
    enabled = [c for c in channels if not c.disabled]
    if not enabled:
        return "every channel is disabled: nobody was told"
    if not any(c.routes(incident) for c in enabled):
        return f"no channel takes {incident.severity} {incident.kind}: nobody was told"
    return None
