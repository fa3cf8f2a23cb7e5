"""What the incidents app tells the apps that consume it, without importing them.

Incidents are the producer: detectors record events here and the alert router, the
header's count and anything later subscribe (dashboard.alerts connects in its
AppConfig.ready()), as Alertmanager's dispatcher subscribes to its alert provider.
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal

from dashboard.incidents.models import Incident

# Sent once the transaction that opened, changed or resolved incidents has committed,
# so a receiver reads what was recorded. `notify` is True when an event that notifies
# was recorded (opened, escalated, resolved): the outbox has something to route.
incident_changed = Signal()


def send_after_commit(notify: bool) -> None:
    transaction.on_commit(lambda: incident_changed.send(sender=Incident, notify=notify),
                          robust=True)
