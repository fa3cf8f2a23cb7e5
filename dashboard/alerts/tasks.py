"""The alert pipeline's Celery entry points, and the kicks that start them now
instead of at the next tick.

With Celery (REDIS_URL set) a kick is a task: routing on the default queue, sending
on the notify queue that its own worker serves, so a slow webhook never takes a
collector's slot. Embedded, a small in-process thread pool does the same. The
periodic `route-alerts` tick catches anything a lost kick left behind.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from dashboard.alerts import delivery, router
from dashboard.core.background import run_soon


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


def kick_router() -> None:
    run_soon(route_alerts, expires=30)


def kick_sender(channel_id: int) -> None:
    run_soon(send_channel, channel_id, queue=settings.NOTIFY_QUEUE)
