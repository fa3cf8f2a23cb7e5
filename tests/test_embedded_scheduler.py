"""The embedded scheduler runs the beat schedule in-process; one failing source
never stops the others, and every entry of the schedule is a real task."""

from __future__ import annotations

import threading

import pytest
from celery import Celery
from django.conf import settings

from dashboard.celery import app as raywatch_app
from dashboard.core.scheduler import EmbeddedScheduler
from tests.conftest import wait_for


def test_failing_task_does_not_stop_the_others() -> None:
    app = Celery("scheduler-test")
    calls = {"good": 0, "bad": 0}
    lock = threading.Lock()

    @app.task(name="good")
    def good() -> None:
        with lock:
            calls["good"] += 1

    @app.task(name="bad")
    def bad() -> None:
        with lock:
            calls["bad"] += 1
        raise RuntimeError("source exploded")

    scheduler = EmbeddedScheduler(app, {"g": {"task": "good", "schedule": 0.05},
                                        "b": {"task": "bad", "schedule": 0.05}})
    scheduler.start()
    try:
        wait_for(lambda: calls["good"] >= 5 and calls["bad"] >= 5, 10, 0.05, "both loops")
    finally:
        scheduler.stop()
    assert all(not t.is_alive() for t in scheduler.threads)


@pytest.mark.django_db
def test_beat_schedule_names_registered_tasks() -> None:
    raywatch_app.loader.import_default_modules()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in raywatch_app.tasks
