"""Notification channels, silences, and the durable path from incident to chat.

IncidentEvent (the outbox) -> AlertGroup (per channel and experiment/node: group
wait, group interval, repeat) -> Delivery (one message to one channel, retried
until sent or given up) -> transports.
"""

from __future__ import annotations

import fnmatch
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

from dashboard.incidents.models import SEVERITIES, Incident, severity_rank


class Channel(models.Model):
    SLACK, DISCORD, TEAMS, WEBHOOK = "slack", "discord", "teams", "webhook"
    KINDS = [(SLACK, "Slack (incoming webhook)"), (DISCORD, "Discord webhook"),
             (TEAMS, "Microsoft Teams (workflow webhook)"), (WEBHOOK, "Generic JSON webhook")]

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=KINDS)
    # The URL of a chat webhook is itself a credential: shown masked, never logged.
    url = models.TextField()
    secret = models.CharField(max_length=200, blank=True, default="")
    # Routing: glob patterns of incident kinds (empty: all kinds), of cluster names (empty:
    # every cluster), and a minimum severity.
    kinds = models.JSONField(default=list, blank=True)
    clusters = models.JSONField(default=list, blank=True)
    min_severity = models.CharField(max_length=16, default="warning",
                                    choices=[(s, s) for s in SEVERITIES])
    send_resolved = models.BooleanField(default=True)
    disabled = models.BooleanField(default=False)
    disabled_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    last_delivery_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_error_at = models.DateTimeField(null=True, blank=True)
    swept_at = models.DateTimeField(null=True, blank=True)  # the tick last started its sender

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def routes(self, incident: Incident) -> bool:
        if severity_rank(incident.severity) < severity_rank(self.min_severity):
            return False
        if self.clusters and not any(fnmatch.fnmatchcase(incident.cluster.name, p)
                                     for p in self.clusters):
            return False
        return not self.kinds or any(fnmatch.fnmatchcase(incident.kind, p) for p in self.kinds)


class Silence(models.Model):
    """Mutes matching incidents between starts_at and ends_at. Each matcher is exact or
    a glob (`trial_*`, `10.0.0.*`); an empty matcher matches anything."""

    MATCHERS = ("kind", "severity", "subject", "experiment", "node", "cluster")

    kind = models.CharField(max_length=200, blank=True, default="")
    severity = models.CharField(max_length=200, blank=True, default="")
    subject = models.CharField(max_length=500, blank=True, default="")
    experiment = models.CharField(max_length=300, blank=True, default="")
    node = models.CharField(max_length=200, blank=True, default="")
    cluster = models.CharField(max_length=200, blank=True, default="")  # its name, or a glob
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True,
                                   on_delete=models.SET_NULL, related_name="+")
    comment = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    end_handled = models.BooleanField(default=False)  # its incidents were told it ended

    class Meta:
        ordering = ["-ends_at"]
        indexes = [models.Index(fields=["ends_at"], name="silence_ends")]

    def __str__(self) -> str:
        return f"silence #{self.pk}: {self.describe()}"

    def describe(self) -> str:
        return ", ".join(f"{m}={getattr(self, m)}" for m in self.MATCHERS if getattr(self, m))

    def active(self, now: datetime) -> bool:
        return self.starts_at <= now < self.ends_at

    def matches(self, incident: Incident) -> bool:
        values = {"kind": lambda: incident.kind, "severity": lambda: incident.severity,
                  "subject": lambda: incident.subject, "experiment": lambda: incident.experiment,
                  "node": lambda: incident.node_ip,
                  "cluster": lambda: incident.cluster.name}  # read only when a silence asks
        return all(fnmatch.fnmatchcase(values[m](), getattr(self, m))
                   for m in self.MATCHERS if getattr(self, m))

    @classmethod
    def active_at(cls, now: datetime) -> list[Silence]:
        return list(cls.objects.filter(starts_at__lte=now, ends_at__gt=now))


def silenced_by(incident: Incident, silences: list[Silence]) -> Silence | None:
    return next((s for s in silences if s.matches(incident)), None)


class AlertGroup(models.Model):
    """What one channel was told about one group (an experiment, a node), and when it
    is due to hear again: the pacing state, durable so a restart changes nothing."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="groups")
    key = models.CharField(max_length=300)
    dirty_since = models.DateTimeField(null=True, blank=True)  # oldest change not yet sent
    last_sent_at = models.DateTimeField(null=True, blank=True)
    next_flush_at = models.DateTimeField(null=True, blank=True)
    notified = models.JSONField(default=dict)  # incident id -> severity, as last sent firing

    class Meta:
        constraints = [models.UniqueConstraint(fields=["channel", "key"],
                                               name="one_group_per_channel_key")]
        indexes = [models.Index(fields=["next_flush_at"], name="alertgroup_due")]

    def __str__(self) -> str:
        return f"{self.key} -> {self.channel_id}"


class Delivery(models.Model):
    """One message to one channel. Claimed by one sender at a time (conditional update);
    a claim older than the claim TTL is a sender that died and is taken over."""

    PENDING, SENDING, SENT, FAILED = "pending", "sending", "sent", "failed"
    FIRING, RESOLVED, TEST = "firing", "resolved", "test"

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    group_key = models.CharField(max_length=300, blank=True, default="")
    status = models.CharField(max_length=16, default=FIRING)
    message = models.JSONField()
    incidents = models.ManyToManyField(Incident, related_name="deliveries", blank=True)
    state = models.CharField(max_length=16, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    response_code = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["channel", "next_attempt_at"],
                         condition=Q(state__in=["pending", "sending"]), name="delivery_due"),
        ]

    def __str__(self) -> str:
        return f"delivery #{self.pk} to {self.channel_id} ({self.state})"
