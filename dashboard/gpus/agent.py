"""The NVML agent of one node: who it is, its GPU source, and its registration.

An agent is a Celery worker started with `manage.py agent` on a GPU node; it
consumes only its own queue, `gpu.<node>`, where beat's dispatcher sends polls.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime

from django.conf import settings

from collectors.hostinfo import host_name, node_ip_address
from collectors.nvml import NvmlSource, load_nvml_module
from dashboard.gpus.models import Agent

log = logging.getLogger(__name__)

AGENT_ENV = "RAYWATCH_AGENT_NODE"  # set by `manage.py agent` for its worker
SIMULATED_MODULE = "collectors.simnvml"
_sources: dict[str, NvmlSource] = {}  # one per process: NVML is initialised once
_source_lock = threading.Lock()


def node_name() -> str:
    return settings.NODE_NAME or host_name()


def node_ip() -> str:
    return settings.NODE_IP or node_ip_address()


def queue_name(node: str) -> str:
    return f"gpu.{node}"


def gpu_source() -> NvmlSource:
    """This process's GPU source, created once: NVML is initialised once per process."""
    simulated = settings.GPU_SOURCE == "simulated"
    module_name = SIMULATED_MODULE if simulated else settings.NVML_MODULE
    with _source_lock:
        if module_name not in _sources:
            module = load_nvml_module(module_name)
            _sources[module_name] = NvmlSource(module, node=node_name(), simulated=simulated)
        return _sources[module_name]


def register(now: datetime, driver_version: str | None = None, polled: bool = False) -> Agent:
    """Record this node's agent so that the dispatcher sends it polls."""
    node = node_name()
    values = {"node_ip": node_ip(), "queue": queue_name(node), "source": settings.GPU_SOURCE}
    if driver_version:
        values["driver_version"] = driver_version[:64]
    if polled:
        values["last_poll_at"] = now
    agent, created = Agent.objects.update_or_create(
        node=node, defaults=values, create_defaults={**values, "registered_at": now}
    )
    if created:
        log.info("registered GPU agent %s (%s) on queue %s", node, agent.node_ip, agent.queue)
    return agent


def is_agent_process() -> bool:
    return bool(os.environ.get(AGENT_ENV))
