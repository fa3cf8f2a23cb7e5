"""Run a Celery task soon: on a worker when there is a broker (REDIS_URL), in a small
in-process thread pool on the embedded default."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger(__name__)


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=settings.NOTIFY_THREADS,
                              thread_name_prefix="raywatch-background")


def _in_thread(task: Any, *args: Any) -> None:
    close_old_connections()
    try:
        task.run(*args)
    except Exception:
        log.exception("background task %s failed", task.name)
    finally:
        close_old_connections()


def run_soon(task: Any, *args: Any, queue: str | None = None, expires: float = 60) -> None:
    if settings.EMBEDDED:
        _pool().submit(_in_thread, task, *args)
    else:
        options: dict[str, Any] = {"expires": expires}
        if queue:
            options["queue"] = queue
        task.apply_async(args=list(args), **options)
