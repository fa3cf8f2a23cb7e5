from __future__ import annotations

from django.db import models


class Node(models.Model):
    """A Ray node as the Ray state API last described it."""

    ALIVE, DEAD = "ALIVE", "DEAD"

    node_id = models.CharField(max_length=64, unique=True)
    node_ip = models.CharField(max_length=64)
    hostname = models.CharField(max_length=255, blank=True, default="")
    is_head = models.BooleanField(default=False)
    state = models.CharField(max_length=16)
    state_message = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(null=True)
    ended_at = models.DateTimeField(null=True)
    # {"CPU": {"total": 8.0, "used": 2.0}, ...}; "used" is null when Ray did not say.
    resources = models.JSONField(default=dict)
    labels = models.JSONField(default=dict)
    cpu_percent = models.FloatField(null=True)
    mem_total_bytes = models.BigIntegerField(null=True)
    mem_used_bytes = models.BigIntegerField(null=True)
    object_store_total_bytes = models.BigIntegerField(null=True)
    object_store_used_bytes = models.BigIntegerField(null=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-is_head", "state", "node_ip", "node_id"]

    def __str__(self) -> str:
        return f"{self.node_ip} ({self.node_id[:8]}, {self.state})"


class Actor(models.Model):
    """A Ray actor that is not DEAD, as of the last poll. Rows of actors that died
    (or that Ray stopped listing) are removed at the next poll."""

    actor_id = models.CharField(max_length=64, unique=True)
    state = models.CharField(max_length=32)
    pid = models.IntegerField(null=True)
    node_id = models.CharField(max_length=64, blank=True, default="")
    class_name = models.CharField(max_length=500, blank=True, default="")
    repr_name = models.CharField(max_length=500, blank=True, default="")
    name = models.CharField(max_length=500, blank=True, default="")
    job_id = models.CharField(max_length=64, blank=True, default="")
    placement_group_id = models.CharField(max_length=64, blank=True, default="")
    required_resources = models.JSONField(default=dict)
    first_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["node_id", "pid"], name="actor_node_pid")]

    def __str__(self) -> str:
        return f"{self.repr_name or self.class_name} {self.actor_id[:8]} ({self.state})"
