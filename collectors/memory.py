"""Giving memory back once a large piece of work is done.

CPython frees what a first ingest of a long history or an evaluation of thousands of
trials held, but glibc's malloc keeps the freed pages of its heap for the process unless
told otherwise, so a server or node agent that read months of history on its first
start would carry that peak for as long as it runs. `malloc_trim` hands them back;
elsewhere (musl, macOS) there is nothing to call and nothing is done. Django-free: the
server (dashboard/trials/tasks.py) and the node agent (collectors/agent/main.py) both
call it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)


def give_back_freed() -> bool:
    """Return the heap's free pages to the system: True when some were."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


# Records read, trial dirs first seen or settled, or trials evaluated, in one poll from
# which its freed memory is handed back: a first read of a long history, or a restart's
# pass over every trial dir of it, not the polls that follow.
LARGE_POLL = 1_000


def give_back_after(count: int) -> bool:
    """give_back_freed() after a poll that went over `count` (records, trial dirs or
    trials), if that was large."""
    return count >= LARGE_POLL and give_back_freed()
