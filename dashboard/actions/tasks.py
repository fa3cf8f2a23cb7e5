"""Celery entry points of the actions app: nothing imports this module; the request
sends run_action by name (executor.RUN_ACTION)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from dashboard.actions import executor, settle


@shared_task(name=executor.RUN_ACTION, ignore_result=True, acks_late=False)
def run_action(entry_id: int) -> None:
    """Not acks_late: an action half-done by a worker that died is not redone blindly;
    settle_actions ends it as lost, with what is known, in the audit."""
    executor.run(entry_id)


@shared_task(name="dashboard.actions.tasks.settle_actions", ignore_result=True)
def settle_actions() -> None:
    """End the actions that nothing will finish (settle.py)."""
    settle.settle(timezone.now())
