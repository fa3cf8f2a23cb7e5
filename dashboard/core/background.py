"""Run a Celery task soon: on a worker when there is a broker (REDIS_URL), in a small
in-process thread pool on the embedded default. A task for the stacks queue (py-spy
dumps that wait seconds on an agent) runs on threads of its own there too, as on its own
worker in production: a burst of them never holds up an operator's action or an alert."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from dashboard.celery import app as celery_app
from dashboard.core import stopping

log = logging.getLogger(__name__)


@cache
def _pool(queue: str | None = None) -> ThreadPoolExecutor:
    if queue == settings.STACKS_QUEUE:
        return ThreadPoolExecutor(max_workers=settings.STACK_THREADS,
                                  thread_name_prefix="raywatch-stacks")
    return ThreadPoolExecutor(max_workers=settings.NOTIFY_THREADS,
                              thread_name_prefix="raywatch-background")


def _pool_of(queue: str | None) -> ThreadPoolExecutor:
    return _pool(settings.STACKS_QUEUE if queue == settings.STACKS_QUEUE else None)


def finish() -> None:
    """Let the tasks running in the in-process pools (an action recording its last steps)
    finish, and drop those not started: at exit, before Python stops its threads."""
    stopping.winding_down.set()
    if _pool.cache_info().currsize:
        for queue in (None, settings.STACKS_QUEUE):
            _pool(queue).shutdown(wait=True, cancel_futures=True)
        _pool.cache_clear()


def _in_thread(fn: Callable[..., Any], name: str, *args: Any) -> None:
    close_old_connections()
    try:
        fn(*args)
    except Exception:
        log.exception("background task %s failed", name)
    finally:
        close_old_connections()


def run_soon(task: Any, *args: Any, queue: str | None = None, expires: float = 60) -> None:
    if settings.EMBEDDED:
        _pool_of(queue).submit(_in_thread, task.run, task.name, *args)
    else:
        task.apply_async(args=list(args), **_options(queue, expires))


def send_soon(name: str, fn: Callable[..., Any], *args: Any, queue: str | None = None,
              expires: float = 60) -> None:
    """run_soon for a caller that must not import the task's module (that module imports
    the caller): a worker is sent the task by name; the embedded pool runs `fn`, what
    the task runs."""
    if settings.EMBEDDED:
        _pool_of(queue).submit(_in_thread, fn, name, *args)
    else:
        celery_app.send_task(name, args=list(args), **_options(queue, expires))


def _options(queue: str | None, expires: float) -> dict[str, Any]:
    options: dict[str, Any] = {"expires": expires}
    if queue:
        options["queue"] = queue
    return options
