"""What a large poll freed goes back to the system (dashboard/core/memory.py): a server
that read months of history on its first start does not carry that peak for months."""

from __future__ import annotations

import platform

import psutil
import pytest

from dashboard.core.memory import give_back_freed


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_pages_leave_the_process() -> None:
    process = psutil.Process()
    # ~100 MB in blocks too big for Python's small-object arenas (glibc's heap), one in 50
    # kept, so that the heap's top is never free and glibc would keep the rest.
    blocks = [bytes(1000) + str(i).encode() for i in range(100_000)]
    kept = blocks[::50]
    peak = process.memory_info().rss
    del blocks
    assert give_back_freed()
    after = process.memory_info().rss
    assert peak - after > 60 * 2**20, (peak >> 20, after >> 20)
    assert len(kept) == 2_000
