from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from dashboard.core.health import health_payload
from dashboard.core.roles import role_of
from dashboard.incidents.service import alerts_summary


def raywatch(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated:
        return {}
    try:
        health, alerts = health_payload(), alerts_summary()
    except Exception:  # a page still renders when the database hiccups
        health, alerts = [], None
    return {"source_health": health, "alert_summary": alerts, "user_role": role_of(request.user)}
