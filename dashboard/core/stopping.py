"""The server is stopping: requests that wait on purpose (an agent's commands long-poll
waits up to 25 s) answer now instead of being cancelled when the shutdown's grace ends.

`manage.py serve` announces it when uvicorn begins to shut down; a waiting request
awaits `event()` beside what it waits for. One event per event loop (the tests run
servers on loops of their own).
"""

from __future__ import annotations

import asyncio
import weakref

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
