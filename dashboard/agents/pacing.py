"""How long agents should gather before a report: the `send_s` of each report's answer.

A report costs a web process about the same whatever it holds (a group's share of the
authentication, the seq bookkeeping, the health and agent rows, the round trips): one
poll a report, 512 nodes at 1 Hz are 0.81x of what storing them needs; five polls a
report, 1.9x (bench/gpu_reports_bench.py). So a web process that hears from more agents
than it wants reports a second (`AGENT_REPORTS_PER_S`) asks each to gather
agents / AGENT_REPORTS_PER_S seconds, at most `AGENT_SEND_MAX_S`, below a GPU poll
none. A small cluster's agents keep sending every poll. An agent's own
RAYWATCH_AGENT_SEND_S overrides the advice.

Counted per web process (each has its group writer, so its own capacity): the tokens it
stored a report of within AGENT_STALE_S. Nothing shared, nothing stored.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Callable

from django.conf import settings

RECOUNT_S = 1.0  # the advice is worked out again at most this often


class Pacing:
    def __init__(self, reports_per_s: float, max_s: float, poll_s: float, window_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reports_per_s, self.max_s, self.poll_s = reports_per_s, max_s, poll_s
        self.window_s, self.clock = window_s, clock
        self.heard_at: dict[str, float] = {}
        self.advice = 0.0
        self.counted_at: float | None = None

    def heard(self, key: str) -> float:
        """An agent's report (`key`: its token) was stored: the advice to send it back."""
        now = self.clock()
        self.heard_at[key] = now
        if self.counted_at is None or now - self.counted_at >= RECOUNT_S:
            self._recount(now)
        return self.advice

    def _recount(self, now: float) -> None:
        since = now - self.window_s
        self.heard_at = {k: at for k, at in self.heard_at.items() if at >= since}
        self.counted_at = now
        gather = len(self.heard_at) / self.reports_per_s
        # Rounded up to a tenth of a second, so the advice does not flicker with each
        # agent; under one GPU poll it would change nothing an agent does.
        self.advice = 0.0 if gather < self.poll_s else min(math.ceil(gather * 10) / 10,
                                                           self.max_s)


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacing] = \
    weakref.WeakKeyDictionary()


def advice_for(key: str) -> float:
    """The advice for the agent of `key`, by this web process's (event loop's) count."""
    loop = asyncio.get_running_loop()
    pacing = _by_loop.get(loop)
    if pacing is None:
        pacing = _by_loop[loop] = Pacing(
            settings.AGENT_REPORTS_PER_S, settings.AGENT_SEND_MAX_S, settings.POLL_GPU_S,
            settings.AGENT_STALE_S)
    return pacing.heard(key)
