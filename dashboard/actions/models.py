"""The audit trail of actions: one AuditEntry per action (who, when, from where,
the target as it was, why), written before anything is signalled, and one
AuditStep per thing that happened; and the acts of the apps below (agent tokens,
clusters, stacks taken by hand: dashboard/core/audit.py), each an entry done at once.
Append-only: on Postgres, triggers refuse deletes, step updates and changes to
who/what/why; the UI, API and admin offer no edit or delete.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from dashboard.core import audit


class AuditQuerySet(models.QuerySet):
    def actions(self) -> AuditQuerySet:
        """The actions (terminate, stop, kill), without the other acts of the trail."""
        return self.filter(kind__in=AuditEntry.ACTION_KINDS)


class AuditEntry(models.Model):
    TERMINATE_TRIAL, STOP_JOB, KILL_PROCESS = "terminate_trial", "stop_job", "kill_process"
    ACTION_KINDS = (TERMINATE_TRIAL, STOP_JOB, KILL_PROCESS)
    KINDS = [(TERMINATE_TRIAL, "terminate trial"), (STOP_JOB, "stop job"),
             (KILL_PROCESS, "kill GPU process"), *audit.KINDS]
    REQUESTED, SIGNALLED, SUCCEEDED, FAILED = "requested", "signalled", "succeeded", "failed"
    # Refused before anything was signalled (stale target, no permission, over the rate
    # limit, Ray or the node unreachable): kept with the reason, as a person was told it.
    REFUSED = "refused"
    ACTIVE = (REQUESTED, SIGNALLED)
    STATES = (REQUESTED, SIGNALLED, SUCCEEDED, FAILED, REFUSED)

    objects = AuditQuerySet.as_manager()

    kind = models.CharField(max_length=32, choices=KINDS)
    # trial:<experiment>/<id>, job:<key>, process:<gpu uuid>/<pid>
    target_key = models.CharField(max_length=300)
    target = models.JSONField()  # what the confirm dialog showed: pid, node, actor, GPUs, ...
    # No cascade from the user: the row is never rewritten when an account goes.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.DO_NOTHING,
                             db_constraint=False, related_name="+")
    username = models.CharField(max_length=150)  # kept when the account is deleted
    address = models.CharField(max_length=64, blank=True, default="")
    reason = models.TextField()
    requested_at = models.DateTimeField()
    state = models.CharField(max_length=16, default=REQUESTED)
    started_at = models.DateTimeField(null=True, blank=True)  # a runner claimed it
    outcome = models.TextField(blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            # Double clicks and concurrent requests on one target make one action.
            models.UniqueConstraint(fields=["target_key"], condition=Q(state__in=["requested",
                                                                                 "signalled"]),
                                    name="one_active_action_per_target"),
        ]
        indexes = [models.Index(fields=["user", "-requested_at"], name="audit_user_time")]

    def __str__(self) -> str:
        return f"{self.kind} {self.target_key} by {self.username} ({self.state})"


class AuditStep(models.Model):
    entry = models.ForeignKey(AuditEntry, on_delete=models.PROTECT, related_name="steps")
    at = models.DateTimeField()
    step = models.CharField(max_length=32)
    detail = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.step} at {self.at:%H:%M:%S}"
