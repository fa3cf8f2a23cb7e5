from __future__ import annotations

from django.db import models
from django.db.models import Q


class Incident(models.Model):
    """Something wrong that a detector found. One firing incident per (kind, subject):
    a detector that finds the same thing again updates it, never opens a twin."""

    FIRING, RESOLVED = "firing", "resolved"
    INFO, WARNING, CRITICAL = "info", "warning", "critical"

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
    opened_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "subject"], condition=Q(state="firing"),
                name="one_firing_incident_per_subject",
            )
        ]
        indexes = [models.Index(fields=["state", "-opened_at"], name="incident_state_opened")]
        ordering = ["-opened_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject} ({self.state})"
