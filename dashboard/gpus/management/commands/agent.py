"""`manage.py agent` (`make agent`): the NVML agent of this node.

A Celery worker that consumes only this node's queue, `gpu.<node>`, polls the
node's GPUs when beat's dispatcher says so, and writes to the shared database.
Run one on every GPU node, with the same DATABASE_URL and REDIS_URL as the web.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from dashboard.gpus.agent import AGENT_ENV, node_ip, node_name, queue_name


class Command(BaseCommand):
    help = "Run this node's GPU agent (a Celery worker on the node's own queue)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--loglevel", default="WARNING")

    def handle(self, *args: Any, loglevel: str, **options: Any) -> None:
        if settings.EMBEDDED:
            raise CommandError(
                "an agent needs REDIS_URL (the broker) and DATABASE_URL (the shared "
                "database); with neither, `make run` already polls this node's GPUs in-process"
            )
        if settings.GPU_SOURCE == "off":
            raise CommandError("RAYWATCH_GPU_SOURCE=off: this node has no GPU source to run")
        node = node_name()
        self.stdout.write(f"GPU agent for node {node} ({node_ip()}), queue {queue_name(node)}, "
                          f"source {settings.GPU_SOURCE}")
        sys.stdout.flush()
        env = {**os.environ, AGENT_ENV: node, "RAYWATCH_NODE_NAME": node}
        cmd = [sys.executable, "-m", "celery", "-A", "dashboard", "worker",
               "--queues", queue_name(node), "--hostname", f"agent@{node}",
               "--pool", "solo", "--loglevel", loglevel, "--without-gossip", "--without-mingle"]
        os.execve(sys.executable, cmd, env)
