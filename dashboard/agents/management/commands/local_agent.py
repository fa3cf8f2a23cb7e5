"""`manage.py local_agent --url URL`: this host's node agent, as `serve` starts it beside
itself: the same `python -m collectors.agent` every node runs, with the token this host
keeps in DATA_DIR (dashboard/agents/local.py). It replaces this process."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand
from django.db import connections
from django.utils import timezone

from dashboard.agents.local import agent_env


class Command(BaseCommand):
    help = "Run this host's node agent (serve starts it), reporting to raywatch at --url."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--url", required=True, help="raywatch's URL as this host reaches it")

    def handle(self, *args: Any, url: str, **options: Any) -> None:
        env = agent_env(url, timezone.now())
        connections.close_all()
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "collectors.agent"], env)
