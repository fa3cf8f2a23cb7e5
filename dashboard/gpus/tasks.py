"""GPU tasks: retention and the resource detectors. GPU readings come from each node's
agent (collectors/agent/, raywatch's own host's included), stored as they arrive."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from dashboard.gpus.retention import prune, roll_up


@shared_task(name="dashboard.gpus.tasks.roll_up_and_prune")
def roll_up_and_prune() -> dict[str, int]:
    now = timezone.now()
    written = roll_up(now)
    return {"rollups_written": written, **prune(now)}


@shared_task(name="dashboard.gpus.tasks.detect_resources")
def detect_resources() -> dict[str, int]:
    from dashboard.gpus.detect import evaluate_resources

    return evaluate_resources(timezone.now())
