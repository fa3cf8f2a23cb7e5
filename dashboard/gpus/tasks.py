"""GPU tasks: the agents' poll, beat's dispatcher, retention and resource detectors."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from collectors.procstat import with_ancestors
from dashboard.core.health import source_poll
from dashboard.gpus import agent
from dashboard.gpus.ingest import ingest_gpu_poll
from dashboard.gpus.models import Agent
from dashboard.gpus.retention import prune, roll_up

log = logging.getLogger(__name__)


@shared_task(name="dashboard.gpus.tasks.poll_gpus")
def poll_gpus(node: str | None = None) -> None:
    """Read this node's GPUs and store them. Runs on the node's agent (or in-process)."""
    if settings.GPU_SOURCE == "off":
        return
    here = agent.node_name()
    if node is not None and node != here:
        # A poll meant for another node reached this queue: never store our GPUs as theirs.
        log.warning("poll for node %s reached the agent of %s; ignored", node, here)
        return
    with source_poll("nvml", settings.POLL_GPU_S, scope=here) as poll:
        now = timezone.now()
        result = with_ancestors(agent.gpu_source().poll(now))
        poll.warnings.extend(result.problems)
        if not result.gpus and not result.problems:
            poll.warnings.append("NVML sees no GPU on this node")
        agent.register(now, result.driver_version, polled=True)
        ingest_gpu_poll(result, agent.node_ip(), now)


@shared_task(name="dashboard.gpus.tasks.dispatch_gpu_polls")
def dispatch_gpu_polls() -> int:
    """Send a poll to every agent heard from lately, on its own queue. A poll that
    waits longer than one interval (agent down) expires instead of piling up."""
    now = timezone.now()
    recent = now - timedelta(seconds=settings.AGENT_FORGET_S)
    agents = Agent.objects.filter(Q(last_poll_at__gte=recent) | Q(registered_at__gte=recent)
                                  ).exclude(queue="")  # an HTTP agent polls by itself
    expires = max(settings.POLL_GPU_S * 5, 5)  # a busy agent still gets most polls
    sent = 0
    for row in agents:
        poll_gpus.apply_async(kwargs={"node": row.node}, queue=row.queue, expires=expires)
        sent += 1
    return sent


@shared_task(name="dashboard.gpus.tasks.roll_up_and_prune")
def roll_up_and_prune() -> dict[str, int]:
    now = timezone.now()
    written = roll_up(now)
    return {"rollups_written": written, **prune(now)}


@shared_task(name="dashboard.gpus.tasks.detect_resources")
def detect_resources() -> dict[str, int]:
    from dashboard.gpus.detect import evaluate_resources

    return evaluate_resources(timezone.now())


@worker_ready.connect
def register_agent(sender: object = None, **_: object) -> None:
    """An agent announces itself as soon as its worker is up, before its first poll."""
    if not agent.is_agent_process():
        return
    try:
        agent.register(timezone.now())
    except Exception as exc:  # the database may be briefly away; the first poll registers
        log.warning("cannot register this GPU agent yet: %s", exc)
