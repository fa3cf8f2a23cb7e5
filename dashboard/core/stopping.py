"""The process is stopping, and what waits on purpose stops waiting.

- Requests: an agent's commands long-poll (up to 25 s) answers now instead of being
  cancelled when the shutdown's grace ends. `Server`, the uvicorn that `manage.py serve`
  runs (and the tests' in-process servers), announces it when it begins to shut down; a
  waiting request awaits `event()` beside what it waits for. One event per event loop
  (the tests run servers on loops of their own).
- Background work: `winding_down`, set by serve's stop (background.finish) and by a Celery
  worker's warm shutdown.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import uvicorn
from celery.signals import worker_shutting_down

SHUTDOWN_GRACE_S = 3  # how long a stop lets open requests (pages' websockets) finish
# How long an idle keep-alive connection stays open. uvicorn's own 5 s is shorter than
# what clients keep a pooled connection for (the Caddy proxy of docker-compose.yml: 2
# minutes; nginx's upstream keepalive and cloud load balancers: 60 s; Playwright's
# request context: until the server's close arrives), and a request sent on a connection
# the server is closing meets a reset: a 502 for an operator's action behind the proxy.
# Longer than all of them, the server is never the one that closes under a request.
KEEP_ALIVE_S = 130

_events: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
    weakref.WeakKeyDictionary())


def event() -> asyncio.Event:
    """This loop's stopping event (set once the server began to stop)."""
    loop = asyncio.get_running_loop()
    if loop not in _events:
        _events[loop] = asyncio.Event()
    return _events[loop]


def announce() -> None:
    event().set()


# The process is stopping (serve's Ctrl-C, a Celery worker's warm shutdown): work that
# only waits to write down an afterthought (what Tune made of a terminated trial) stops
# waiting and says so; what an action must finish (its signal, its outcome) still runs.
winding_down = threading.Event()


@worker_shutting_down.connect
def _worker_stopping(**_: object) -> None:
    # A warm shutdown waits for the running tasks; the workers run a thread pool, so
    # the tasks see this process's event.
    winding_down.set()


class Server(uvicorn.Server):
    """uvicorn that tells waiting requests (agents' long-polls) it is stopping, so they
    answer within the shutdown's grace instead of being cancelled at its end; open pages'
    websockets get `SHUTDOWN_GRACE_S` (a page reconnects, an agent asks again)."""

    def __init__(self, host: str, port: int, grace_s: float = SHUTDOWN_GRACE_S,
                 **config: Any) -> None:
        super().__init__(uvicorn.Config(
            "dashboard.asgi:application", host=host, port=port, lifespan="off",
            log_level="warning", timeout_graceful_shutdown=grace_s,
            timeout_keep_alive=KEEP_ALIVE_S, **config))

    async def shutdown(self, sockets: Any = None) -> None:
        announce()
        await super().shutdown(sockets)
