"""Send deliveries: claim one (conditional update), post it, record the outcome.

One delivery in flight per channel, so a channel whose endpoint hangs holds one
sender for at most its timeout and never the others. A claim older than the
claim TTL belongs to a sender that died mid-delivery: it is taken over, so the
message is still sent (the generic webhook's `id` lets a receiver drop the copy
it may have half-received).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from dashboard.alerts.models import Channel, Delivery
from dashboard.alerts.transports import TRANSPORTS, TransportError
from dashboard.core.push import ALERTS_GROUP, publish

log = logging.getLogger(__name__)
SWEEP_EVERY = timedelta(seconds=5)


def claim_ttl() -> timedelta:
    # post() can take up to about twice its timeout (connect, then the reply).
    return timedelta(seconds=2 * settings.NOTIFY_TIMEOUT_S + 5)


def backoff(attempts: int, retry_after: float | None = None) -> timedelta:
    delay = settings.NOTIFY_BACKOFF_S * 2 ** max(0, attempts - 1)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return timedelta(seconds=min(delay, settings.NOTIFY_BACKOFF_CAP_S))


def due(now: datetime) -> Q:
    return (Q(state=Delivery.PENDING, next_attempt_at__lte=now)
            | Q(state=Delivery.SENDING, claimed_at__lte=now - claim_ttl()))


def claim_next(channel_id: int, now: datetime) -> Delivery | None:
    with transaction.atomic():
        channel = Channel.objects.select_for_update().filter(pk=channel_id,
                                                             disabled=False).first()
        if channel is None:
            return None
        deliveries = Delivery.objects.filter(channel=channel)
        if deliveries.filter(state=Delivery.SENDING, claimed_at__gt=now - claim_ttl()).exists():
            return None  # one in flight per channel
        candidate = deliveries.filter(due(now)).order_by("id").first()
        if candidate is None:
            return None
        token = uuid.uuid4().hex
        claimed = Delivery.objects.filter(
            pk=candidate.pk, state=candidate.state, claimed_at=candidate.claimed_at,
        ).update(state=Delivery.SENDING, claimed_at=now, claim_token=token,
                 attempts=F("attempts") + 1)
        if claimed != 1:
            return None
    return Delivery.objects.select_related("channel").get(pk=candidate.pk)


def drain(channel_id: int) -> int:
    """Send this channel's due deliveries, oldest first, one at a time."""
    sent = 0
    while (delivery := claim_next(channel_id, timezone.now())) is not None:
        send(delivery)
        sent += 1
    return sent


def channels_to_sweep(now: datetime) -> list[int]:
    """Channels with something due (a retry, a claim whose sender died) and no sender
    at work, each at most once per SWEEP_EVERY: with no notifier running, the queue
    grows by one message per channel per SWEEP_EVERY, not per tick."""
    busy = Delivery.objects.filter(state=Delivery.SENDING, claimed_at__gt=now - claim_ttl())
    candidates = set(Delivery.objects.filter(due(now), channel__disabled=False)
                     .exclude(channel__in=busy.values("channel_id"))
                     .values_list("channel_id", flat=True))
    return [pk for pk in sorted(candidates)
            if Channel.objects.filter(Q(swept_at=None) | Q(swept_at__lte=now - SWEEP_EVERY),
                                      pk=pk).update(swept_at=now)]


def send(delivery: Delivery) -> bool:
    channel = delivery.channel
    transport = TRANSPORTS[channel.kind](channel.url, channel.secret)
    try:
        reply = transport.send(delivery.message, settings.NOTIFY_TIMEOUT_S,
                               settings.WEBHOOK_ALLOW_PRIVATE)
    except TransportError as exc:
        failed(delivery, exc, timezone.now())
        return False
    succeeded(delivery, reply.status, timezone.now())
    return True


def _finish(delivery: Delivery, **fields: object) -> bool:
    """Record the outcome, unless another sender took the claim over meanwhile."""
    return Delivery.objects.filter(pk=delivery.pk, claim_token=delivery.claim_token,
                                   state=Delivery.SENDING).update(**fields) == 1


def succeeded(delivery: Delivery, status: int, now: datetime) -> None:
    with transaction.atomic():
        if _finish(delivery, state=Delivery.SENT, sent_at=now, response_code=status,
                   last_error=""):
            Channel.objects.filter(pk=delivery.channel_id).update(
                last_delivery_at=now, last_error="")
            _changed(delivery)


def failed(delivery: Delivery, exc: TransportError, now: datetime) -> None:
    channel = delivery.channel
    give_up = exc.permanent or delivery.attempts >= settings.NOTIFY_MAX_ATTEMPTS
    error = exc.message if not give_up or exc.permanent else (
        f"gave up after {delivery.attempts} tries: {exc.message}")
    log.warning("alert delivery #%s to channel %r, try %s: %s", delivery.pk, channel.name,
                delivery.attempts, error)
    with transaction.atomic():
        if give_up:
            done = _finish(delivery, state=Delivery.FAILED, last_error=error,
                           response_code=exc.status)
        else:
            done = _finish(delivery, state=Delivery.PENDING, last_error=error,
                           response_code=exc.status,
                           next_attempt_at=now + backoff(delivery.attempts, exc.retry_after))
        if not done:
            return
        changes: dict[str, object] = {"last_error": error, "last_error_at": now}
        if exc.disable:
            changes.update(disabled=True, disabled_reason=f"{now:%Y-%m-%d %H:%M} UTC: {error}")
        Channel.objects.filter(pk=channel.pk).update(**changes)
        _changed(delivery)


def _changed(delivery: Delivery) -> None:
    publish(ALERTS_GROUP, "deliveries", lambda: {
        "channel": delivery.channel_id,
        "incidents": list(delivery.incidents.values_list("pk", flat=True)),
    })
