"""Celery entry points of the agents app: nothing imports this module; the detector
sends take_call_stack by name (dashboard.cluster.callstacks.TAKE_TASK)."""

from __future__ import annotations

from celery import shared_task

from dashboard.agents import callstacks


@shared_task(name="dashboard.agents.tasks.take_call_stack", ignore_result=True)
def take_call_stack(pk: int) -> None:
    """Runs on the notifier's threads: it waits on an agent's answers for seconds."""
    callstacks.take(pk)
