"""The channel page's test button: one message now, its outcome on the page."""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from dashboard.alerts import delivery
from dashboard.alerts.messages import test_message
from dashboard.alerts.models import Channel, Delivery
from dashboard.alerts.transports import TransportError


def send_test(channel: Channel, by: str) -> tuple[bool, str]:
    """Sent right away, even to a disabled channel: that is how an admin checks a
    fixed URL before enabling it again. Recorded like any delivery."""
    now = timezone.now()
    row = Delivery.objects.create(
        channel=channel, status=Delivery.TEST, message=test_message(channel.name, by),
        state=Delivery.SENDING, attempts=1, claimed_at=now, claim_token="test",
        next_attempt_at=now, created_at=now)
    row.message["id"] = str(row.pk)
    row.save(update_fields=["message"])
    try:
        reply = delivery.TRANSPORTS[channel.kind](channel.url, channel.secret).send(
            row.message, settings.NOTIFY_TIMEOUT_S, settings.WEBHOOK_ALLOW_PRIVATE)
    except TransportError as exc:
        row.channel = channel
        delivery.failed(row, TransportError(exc.message, permanent=True, disable=exc.disable,
                                            status=exc.status), timezone.now())
        return False, f"Test message failed: {exc.message}"
    delivery.succeeded(row, reply.status, timezone.now())
    return True, f"Test message delivered (HTTP {reply.status})."
