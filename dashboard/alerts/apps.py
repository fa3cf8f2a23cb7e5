from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "dashboard.alerts"
    label = "alerts"

    def ready(self) -> None:
        from dashboard.alerts.summary import alerts_summary
        from dashboard.core.push import ALERTS_GROUP, EVERY_PAGE
        from dashboard.incidents.signals import incident_changed

        EVERY_PAGE[ALERTS_GROUP] = alerts_summary  # the header's count, on every page
        incident_changed.connect(incidents_changed, dispatch_uid="dashboard.alerts")


def incidents_changed(notify: bool, **_: Any) -> None:
    """After incidents changed (committed): every page's header count now, and the
    router at once when there is news to send, not only at the next tick."""
    from dashboard.alerts import tasks
    from dashboard.alerts.summary import alerts_summary
    from dashboard.core.push import ALERTS_GROUP, send_now

    send_now(ALERTS_GROUP, "alerts", alerts_summary())
    if notify:
        tasks.kick_router()
