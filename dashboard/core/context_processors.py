from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from dashboard.core.health import health_payload
from dashboard.core.roles import role_of


def raywatch(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated:
        return {}
    try:
        health = health_payload()
    except Exception:
        health = []
    return {"source_health": health, "user_role": role_of(request.user)}
