"""Celery entry points of the agents app: nothing imports this module; the detector
sends take_call_stack by name (dashboard.cluster.callstacks.TAKE_TASK)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.utils import timezone

from dashboard.agents import callstacks, retention


@shared_task(name="dashboard.agents.tasks.take_call_stack", ignore_result=True)
def take_call_stack(pk: int) -> None:
    """Runs on the notifier's threads: it waits on an agent's answers for seconds."""
    callstacks.take(pk)


@shared_task(name="dashboard.agents.tasks.prune_stacks", ignore_result=True)
def prune_stacks() -> dict[str, Any]:
    """Hourly: stacks and stack commands past RAYWATCH_STACKS_KEEP_D."""
    return retention.prune_stacks(timezone.now())
