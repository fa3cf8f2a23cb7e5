"""Start routing or sending now instead of at the next tick.

With Celery (REDIS_URL set) a kick is a task: routing on the default queue,
sending on the `notify` queue that its own worker serves, so a slow webhook never
takes a collector's slot. Embedded, a small in-process thread pool does the same.
The periodic `route-alerts` tick catches anything a lost kick left behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger(__name__)
NOTIFY_QUEUE = "notify"


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=settings.NOTIFY_THREADS,
                              thread_name_prefix="raywatch-notify")


def _in_thread(fn: Callable[..., Any], *args: Any) -> None:
    close_old_connections()
    try:
        fn(*args)
    except Exception:
        log.exception("alert task %s failed", fn.__name__)
    finally:
        close_old_connections()


def kick_router() -> None:
    from dashboard.alerts import tasks

    if settings.EMBEDDED:
        _pool().submit(_in_thread, tasks.route_alerts.run)
    else:
        tasks.route_alerts.apply_async(expires=30)


def kick_sender(channel_id: int) -> None:
    from dashboard.alerts import tasks

    if settings.EMBEDDED:
        _pool().submit(_in_thread, tasks.send_channel.run, channel_id)
    else:
        tasks.send_channel.apply_async(args=[channel_id], queue=NOTIFY_QUEUE, expires=60)
