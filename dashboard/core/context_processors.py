from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from dashboard.core.health import health_payload
from dashboard.core.push import ALERTS_GROUP, EVERY_PAGE
from dashboard.core.roles import role_of


def raywatch(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated:
        return {"time_display": settings.TIME_DISPLAY}
    summary = EVERY_PAGE.get(ALERTS_GROUP)  # registered by the alerts app
    try:
        health, alerts = health_payload(), summary() if summary else None
    except Exception:  # a page still renders when the database hiccups
        health, alerts = [], None
    return {"source_health": health, "alert_summary": alerts, "user_role": role_of(request.user),
            "time_display": settings.TIME_DISPLAY}
