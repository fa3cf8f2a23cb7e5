"""The embedded scheduler: runs the Celery beat schedule's tasks in-process.

With no REDIS_URL there is no broker, so the same task functions Celery would
run are called here, each schedule entry on its own thread so a slow source never
delays another.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery import Celery
from django.db import close_old_connections

log = logging.getLogger(__name__)


class EmbeddedScheduler:
    def __init__(self, app: Celery, schedule: dict[str, dict[str, Any]]) -> None:
        self.app = app
        self.schedule = schedule
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.app.loader.import_default_modules()
        for name, entry in self.schedule.items():
            task = self.app.tasks[entry["task"]]
            thread = threading.Thread(
                target=self._loop, args=(name, task, float(entry["schedule"])),
                name=f"raywatch-{name}", daemon=True,
            )
            thread.start()
            self.threads.append(thread)

    def stop(self, timeout_s: float = 10.0) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout_s)

    def _loop(self, name: str, task: Any, interval_s: float) -> None:
        while not self.stop_event.is_set():
            started = time.monotonic()
            close_old_connections()
            try:
                task.run()
            except Exception:
                log.exception("scheduled task %s failed", name)
            finally:
                close_old_connections()
            self.stop_event.wait(max(0.0, interval_s - (time.monotonic() - started)))
