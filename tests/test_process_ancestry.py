"""A GPU process's parent chain (the owner join walks it up to its Ray worker) is read
once and kept while its process lives, not walked again every poll; after `ttl_s` it is
read afresh, so a chain whose parent ended is seen as it is now."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from collectors.procstat import Ancestry, ancestors
from tests.conftest import wait_for

SPAWN = ("import subprocess; p = subprocess.Popen(['sleep', '600']); "
         "print(p.pid, flush=True); p.wait()")


def test_a_chain_is_kept_until_its_ttl_then_read_again() -> None:
    middle = subprocess.Popen([sys.executable, "-c", SPAWN], stdout=subprocess.PIPE, text=True)
    sleeper = int(middle.stdout.readline())  # type: ignore[union-attr]
    now = [0.0]
    ancestry = Ancestry(ttl_s=30, clock=lambda: now[0])
    try:
        first = ancestry.of(sleeper)
        assert first[0] == middle.pid and first == ancestors(sleeper)
        middle.kill()
        middle.wait()
        wait_for(lambda: middle.pid not in ancestors(sleeper), 10, 0.05, "the re-parenting")
        now[0] = 29.0
        assert ancestry.of(sleeper) == first  # kept: not walked again within the ttl
        now[0] = 31.0
        assert middle.pid not in ancestry.of(sleeper)  # read afresh after it
        assert ancestry.of(2**22 + 12345) == ()  # no such process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(sleeper, signal.SIGKILL)
