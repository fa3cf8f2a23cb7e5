from __future__ import annotations

import contextlib
import os

from celery import shared_task

from dashboard.actions import executor


@shared_task(ignore_result=True, acks_late=False)
def run_action(entry_id: int) -> None:
    """Not acks_late: an action half-done by a worker that died is not redone blindly;
    it stays signalled in the audit for a person to look at."""
    executor.run(entry_id)


@shared_task(ignore_result=True)
def signal_process(pid: int, sig: int) -> None:
    """Runs on the agent of the process's node (its own queue): only it can signal there."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
