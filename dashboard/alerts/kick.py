"""Start routing or sending now instead of at the next tick.

With Celery (REDIS_URL set) a kick is a task: routing on the default queue,
sending on the `notify` queue that its own worker serves, so a slow webhook never
takes a collector's slot. Embedded, a small in-process thread pool does the same.
The periodic `route-alerts` tick catches anything a lost kick left behind.
"""

from __future__ import annotations

from dashboard.core.background import run_soon

NOTIFY_QUEUE = "notify"


def kick_router() -> None:
    from dashboard.alerts import tasks

    run_soon(tasks.route_alerts, expires=30)


def kick_sender(channel_id: int) -> None:
    from dashboard.alerts import tasks

    run_soon(tasks.send_channel, channel_id, queue=NOTIFY_QUEUE)
