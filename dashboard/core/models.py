from __future__ import annotations

from django.db import models


class SourceHealth(models.Model):
    """How one collector source is doing, as the status strip shows it.

    `source` is the kind (ray, nvml, trial_logs); `scope` tells instances of a
    kind apart (the node of an NVML agent), empty for cluster-wide sources.
    """

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"

    source = models.CharField(max_length=32)
    scope = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=16, default=DOWN)
    last_success_at = models.DateTimeField(null=True)
    last_attempt_at = models.DateTimeField(null=True)
    last_error = models.TextField(blank=True, default="")
    last_duration_ms = models.FloatField(null=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    interval_s = models.FloatField(default=2.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "scope"], name="one_health_row_per_source")
        ]
        ordering = ["source", "scope"]

    def __str__(self) -> str:
        return f"{self.label}: {self.state}"

    @property
    def label(self) -> str:
        return f"{self.source}@{self.scope}" if self.scope else self.source
