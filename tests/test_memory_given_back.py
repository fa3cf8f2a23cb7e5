"""What a large poll freed goes back to the system (collectors/memory.py): a server
that read months of history on its first start does not carry that peak for months."""

from __future__ import annotations

import platform

import psutil
import pytest

from collectors import memory
from collectors.memory import give_back_freed


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


def test_only_a_large_poll_hands_memory_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's polls and the node agent's log reads call give_back_after with what
    they read or evaluated: the first read of a long history trims, the quiet polls that
    follow it (every few seconds, for months) do not pay for a trim each."""
    trims: list[int] = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: lambda pad: trims.append(pad) or 1)
    assert not memory.give_back_after(0)
    assert not memory.give_back_after(memory.LARGE_POLL - 1)
    assert trims == []
    assert memory.give_back_after(memory.LARGE_POLL)
    assert trims == [0]
