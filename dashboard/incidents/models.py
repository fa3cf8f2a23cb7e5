from __future__ import annotations

from collections import Counter

from django.conf import settings
from django.db import models
from django.db.models import Q

from dashboard.cluster.models import cluster_field

SEVERITIES = ("info", "warning", "critical")  # ascending


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


class Incident(models.Model):
    """Something wrong that a detector found. One firing incident per (kind, subject):
    a detector that finds the same thing again updates it, never opens a twin.

    Resolved by the detector when the condition clears; acknowledged by an operator
    (who, when, note). Silenced is not stored here: a silence applies while it is
    active (alerts.Silence), so an expired one stops applying by itself."""

    FIRING, RESOLVED = "firing", "resolved"
    INFO, WARNING, CRITICAL = SEVERITIES

    cluster = cluster_field()  # the cluster its subject is in
    kind = models.CharField(max_length=64)
    subject = models.CharField(max_length=500)
    state = models.CharField(max_length=16, default=FIRING)
    severity = models.CharField(max_length=16, default=WARNING)
    summary = models.TextField()
    details = models.JSONField(default=dict)
    trial = models.ForeignKey(
        "trials.Trial", null=True, blank=True, on_delete=models.SET_NULL, related_name="incidents"
    )
    experiment = models.CharField(max_length=255, blank=True, default="")
    node_ip = models.CharField(max_length=64, blank=True, default="")
    # Incidents of one experiment (else one node, else one subject) go out as one message.
    group_key = models.CharField(max_length=300, blank=True, default="")
    opened_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    ack_note = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "kind", "subject"], condition=Q(state="firing"),
                name="one_firing_incident_per_cluster_subject",
            )
        ]
        indexes = [
            models.Index(fields=["state", "-opened_at"], name="incident_state_opened"),
            models.Index(fields=["group_key", "state"], name="incident_group_state"),
        ]
        ordering = ["-opened_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject} ({self.state})"


def firing_per_cluster() -> Counter[int]:
    """How many incidents fire in each cluster, by its pk: the clusters' overview
    (dashboard.cluster.views_data)."""
    return Counter(Incident.objects.filter(state=Incident.FIRING)
                   .values_list("cluster_id", flat=True))


class IncidentEvent(models.Model):
    """The incident's timeline. Events that notify (opened, escalated, resolved) are
    also the outbox: written in the transaction that changes the incident, and
    routed to notification channels later (routed_at set once, by one router)."""

    OPENED, UPDATED, ESCALATED, RESOLVED = "opened", "updated", "escalated", "resolved"
    ACKNOWLEDGED, SILENCED, UNSILENCED = "acknowledged", "silenced", "unsilenced"
    NOTIFYING = (OPENED, ESCALATED, RESOLVED)

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    kind = models.CharField(max_length=32)
    text = models.TextField(blank=True, default="")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="+")
    notify = models.BooleanField(default=False)
    routed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["id"], condition=Q(notify=True, routed_at=None),
                         name="incident_event_outbox"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.incident_id} at {self.at:%Y-%m-%d %H:%M:%S}"
