"""Stacks and the commands that took them are kept RAYWATCH_STACKS_KEEP_D days, then
deleted (issue 43, L6): each stack command holds a py-spy dump of up to ~100 KB, three a
sampled process, and months of overdue calls and stalls would fill the database. A
trial's newest stack stays whatever its age (its page shows it); an incident keeps the
copy of the stack it was opened with in its own details."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max

from dashboard.agents.models import AgentCommand
from dashboard.cluster.models import CallStack
from dashboard.gpus.retention import delete_in_batches
from dashboard.trials.models import TrialStack


def prune_stacks(now: datetime) -> dict[str, int]:
    cutoff = now - timedelta(days=settings.STACKS_KEEP_D)
    with_old = TrialStack.objects.filter(requested_at__lt=cutoff).values("trial_id")
    newest = TrialStack.objects.filter(trial_id__in=with_old).values("trial_id").annotate(
        newest=Max("id")).values_list("newest", flat=True)
    old_trial_stacks = TrialStack.objects.filter(requested_at__lt=cutoff).exclude(
        id__in=list(newest))
    return {
        "commands": delete_in_batches(AgentCommand, "created_at", cutoff,
                                      among=AgentCommand.objects.exclude(done_at=None,
                                                                         expires_at__gte=now)),
        "call_stacks": delete_in_batches(CallStack, "requested_at", cutoff),
        "trial_stacks": delete_in_batches(TrialStack, "requested_at", cutoff,
                                          among=old_trial_stacks),
    }
