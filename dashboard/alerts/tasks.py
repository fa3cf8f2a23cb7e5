from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from dashboard.alerts import delivery, router
from dashboard.alerts.kick import kick_sender


@shared_task(ignore_result=True)
def route_alerts() -> dict[str, int]:
    """The alert tick: route new incident events, flush due groups into deliveries,
    and start a sender for each channel with new messages, or with a retry due or a
    claim whose sender died (the sweep)."""
    made = router.route_and_flush(timezone.now())
    fresh = {d.channel_id for d in made}
    swept = [c for c in delivery.channels_to_sweep(timezone.now()) if c not in fresh]
    for channel_id in sorted(fresh) + swept:
        kick_sender(channel_id)
    return {"deliveries": len(made), "channels": len(fresh) + len(swept)}


@shared_task(ignore_result=True)
def send_channel(channel_id: int) -> int:
    return delivery.drain(channel_id)
