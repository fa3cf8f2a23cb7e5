"""Helpers for the alert tests: a stand-in detector, the router and senders run in
this process at a given moment, and Celery workers as production runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from dashboard.alerts import delivery, router
from dashboard.alerts.models import Channel, Delivery
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident
from dashboard.incidents.service import sync_findings

KIND = "test_stalled"  # a kind no real detector evaluates, so none resolves it


class Detector:
    """Reports findings of one kind, as a real detector does on each evaluation."""

    def __init__(self, kind: str = KIND) -> None:
        self.kind = kind
        self.findings: dict[str, Finding] = {}
        self.context: dict[str, dict[str, Any]] = {}

    def find(self, subject: str, now: datetime | None = None, severity: str = "warning",
             summary: str = "", experiment: str = "", node_ip: str = "",
             details: dict[str, Any] | None = None, sync: bool = True) -> None:
        self.findings[subject] = Finding(self.kind, subject, severity,
                                         summary or f"{subject} is stalled", details or {})
        self.context[subject] = {"experiment": experiment, "node_ip": node_ip}
        if sync:
            self.sync(now)

    def clear(self, subject: str, now: datetime | None = None) -> None:
        self.findings.pop(subject)
        self.sync(now)

    def sync(self, now: datetime | None = None) -> dict[str, int]:
        return sync_findings([self.kind], list(self.findings.values()), now or timezone.now(),
                             self.context)

    def incident(self, subject: str) -> Incident:
        return Incident.objects.filter(kind=self.kind, subject=subject).latest("opened_at")


def route(now: datetime | None = None) -> list[Delivery]:
    return router.route_and_flush(now or timezone.now())


def send_all() -> int:
    return sum(delivery.drain(c.pk) for c in Channel.objects.all())


def webhook(url: str, name: str = "hook", kind: str = "webhook", **fields: Any) -> Channel:
    return Channel.objects.create(name=name, kind=kind, url=url, **fields)


def database_url() -> str:
    """This test's database, for a worker in another process."""
    db = connection.settings_dict
    return (f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/"
            f"{db['NAME']}")


def start_worker(queues: str, data_dir: Path) -> subprocess.Popen:
    """`celery worker -Q queues` (threads pool, as the notifier runs) on this test's
    database, with the alert settings the test process uses."""
    env = {**os.environ, "DATABASE_URL": database_url(), "RAYWATCH_DATA_DIR": str(data_dir),
           "RAYWATCH_WEBHOOK_ALLOW_PRIVATE": "1",
           "RAYWATCH_NOTIFY_TIMEOUT_S": str(settings.NOTIFY_TIMEOUT_S),
           "RAYWATCH_ALERT_GROUP_WAIT_S": str(settings.ALERT_GROUP_WAIT_S),
           "RAYWATCH_BASE_URL": settings.BASE_URL}
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "-Q", queues,
         "--pool", "threads", "--concurrency", "4", "--loglevel", "WARNING",
         "-n", f"test-{uuid.uuid4().hex[:6]}@%h"],
        cwd=Path(__file__).resolve().parent.parent, env=env, start_new_session=True)
