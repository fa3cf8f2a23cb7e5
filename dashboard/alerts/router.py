"""From outbox to messages: route new incident events to the channels that want
them, and turn each due group into one Delivery (Alertmanager's pacing).

A group is one channel's view of one experiment (else node, else subject):
  - its first message waits ALERT_GROUP_WAIT_S after the first event, so incidents
    that start together go out together;
  - later changes wait for ALERT_GROUP_INTERVAL_S after the previous message;
  - while anything in it still fires unacknowledged, it is repeated every
    ALERT_REPEAT_S;
  - incidents that resolve after being sent get a resolved notice.
Silences apply when a message is built: a silenced incident sends nothing.
One router at a time (a transaction-scoped advisory lock on Postgres; SQLite
serialises writers anyway), so a flush never produces two messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from dashboard.alerts.messages import build_message
from dashboard.alerts.models import AlertGroup, Channel, Delivery, Silence, silenced_by
from dashboard.alerts.summary import alerts_summary
from dashboard.core.push import ALERTS_GROUP, publish
from dashboard.incidents.models import Incident, IncidentEvent, severity_rank
from dashboard.incidents.service import record

BATCH = 5000
ROUTER_LOCK = 7_261_001  # pg advisory lock id: "raywatch alert router"


def _seconds(name: str) -> timedelta:
    return timedelta(seconds=float(getattr(settings, name)))


def route_and_flush(now: datetime) -> list[Delivery]:
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROUTER_LOCK])
        route_events(now)
        end_silences(now)
        return flush_due(now)


def route_events(now: datetime) -> int:
    events = list(IncidentEvent.objects.select_related("incident")
                  .filter(notify=True, routed_at=None).order_by("id")[:BATCH])
    if not events:
        return 0
    channels = list(Channel.objects.filter(disabled=False))
    groups = _groups({e.incident.group_key for e in events})
    for event in events:
        incident = event.incident
        for channel in channels:
            group = groups.get((channel.pk, incident.group_key))
            if event.kind == IncidentEvent.RESOLVED:
                wanted = group is not None and str(incident.pk) in group.notified
            else:
                wanted = channel.routes(incident)
            if wanted:
                group = group or groups.setdefault(
                    (channel.pk, incident.group_key),
                    AlertGroup(channel=channel, key=incident.group_key))
                mark_dirty(group, event.at)
    for group in groups.values():
        group.save()
    IncidentEvent.objects.filter(pk__in=[e.pk for e in events]).update(routed_at=now)
    return len(events)


def _groups(keys: Iterable[str]) -> dict[tuple[int, str], AlertGroup]:
    return {(g.channel_id, g.key): g
            for g in AlertGroup.objects.select_for_update().filter(key__in=list(keys))}


def mark_dirty(group: AlertGroup, at: datetime) -> None:
    group.dirty_since = min(t for t in (group.dirty_since, at) if t is not None)
    if group.last_sent_at is None or not group.notified:
        due = group.dirty_since + _seconds("ALERT_GROUP_WAIT_S")
    else:
        due = max(group.dirty_since, group.last_sent_at + _seconds("ALERT_GROUP_INTERVAL_S"))
    group.next_flush_at = min(t for t in (group.next_flush_at, due) if t is not None)


def end_silences(now: datetime) -> None:
    """A silence that ended lets its still-firing incidents be told: their groups are
    marked changed, as if the incidents had just opened."""
    ended = list(Silence.objects.filter(ends_at__lte=now, end_handled=False))
    if not ended:
        return
    firing = list(Incident.objects.filter(state=Incident.FIRING))
    channels = list(Channel.objects.filter(disabled=False))
    for silence in ended:
        for incident in (i for i in firing if silence.matches(i)):
            record(incident, IncidentEvent.UNSILENCED, now, f"silence #{silence.pk} ended")
            for channel in (c for c in channels if c.routes(incident)):
                group, _ = AlertGroup.objects.select_for_update().get_or_create(
                    channel=channel, key=incident.group_key)
                mark_dirty(group, now)
                group.save()
    Silence.objects.filter(pk__in=[s.pk for s in ended]).update(end_handled=True)
    publish(ALERTS_GROUP, "alerts", alerts_summary)  # the header counts them open again


def flush_due(now: datetime) -> list[Delivery]:
    silences = Silence.active_at(now)
    due = (AlertGroup.objects.select_for_update().select_related("channel")
           .filter(next_flush_at__lte=now, channel__disabled=False).order_by("next_flush_at"))
    return [d for group in due[:BATCH] if (d := flush(group, silences, now))]


def flush(group: AlertGroup, silences: list[Silence], now: datetime) -> Delivery | None:
    channel = group.channel
    firing = [i for i in Incident.objects.select_related("trial", "acknowledged_by", "cluster")
              .filter(group_key=group.key, state=Incident.FIRING)
              if channel.routes(i) and not silenced_by(i, silences)]
    resolved = []
    if channel.send_resolved and group.notified:
        resolved = [i for i in Incident.objects.select_related("trial", "acknowledged_by",
                                                               "cluster")
                    .filter(pk__in=[int(k) for k in group.notified], state=Incident.RESOLVED)
                    if not silenced_by(i, silences)]
    told = group.notified
    new_ids = {i.pk for i in firing if str(i.pk) not in told
               or severity_rank(i.severity) > severity_rank(told[str(i.pk)])}
    delivery = None
    if new_ids or resolved:
        delivery = _deliver(group, firing, resolved, new_ids, now, repeat=False)
    elif group.last_sent_at and now >= group.last_sent_at + _seconds("ALERT_REPEAT_S"):
        unacked = [i for i in firing if i.acknowledged_at is None]
        if unacked:
            delivery = _deliver(group, unacked, [], set(), now, repeat=True)
    group.notified = {str(i.pk): i.severity for i in firing}
    group.dirty_since = None
    group.next_flush_at = (group.last_sent_at + _seconds("ALERT_REPEAT_S")
                           if group.notified and group.last_sent_at else None)
    group.save()
    return delivery


def _deliver(group: AlertGroup, firing: list[Incident], resolved: list[Incident],
             new_ids: set[int], now: datetime, repeat: bool) -> Delivery:
    message = build_message(group.key, firing, resolved, new_ids, repeat)
    delivery = Delivery.objects.create(
        channel=group.channel, group_key=group.key, status=message["status"], message=message,
        next_attempt_at=now, created_at=now)
    delivery.message["id"] = str(delivery.pk)
    delivery.save(update_fields=["message"])
    delivery.incidents.set([*firing, *resolved])
    group.last_sent_at = now
    return delivery
