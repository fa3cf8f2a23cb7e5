from __future__ import annotations

from typing import Any

from django.utils import timezone

from dashboard.alerts.models import Silence, silenced_by
from dashboard.incidents.models import Incident


def alerts_summary() -> dict[str, Any]:
    """The header's count: firing incidents nobody has acknowledged or silenced yet."""
    firing = list(Incident.objects.filter(state=Incident.FIRING)
                  .only("kind", "severity", "subject", "experiment", "node_ip",
                        "acknowledged_at"))
    silences = Silence.active_at(timezone.now())
    open_ = [i for i in firing if i.acknowledged_at is None and not silenced_by(i, silences)]
    return {"firing": len(firing), "open": len(open_),
            "critical": sum(1 for i in open_ if i.severity == Incident.CRITICAL),
            "acknowledged": sum(1 for i in firing if i.acknowledged_at is not None),
            "silenced": sum(1 for i in firing if silenced_by(i, silences))}
