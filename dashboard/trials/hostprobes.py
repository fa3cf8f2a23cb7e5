"""A trial's process on raywatch's own host (a single-host cluster, `make run`): read and
dumped here, the last resort after the node's agent and Ray."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from collectors.procstat import process_cpu_percent, process_state, this_host
from collectors.pystack import dump_stack
from dashboard.trials.models import Trial
from dashboard.trials.probes import Activity, Stack


def on_this_host(trial: Trial) -> bool:
    return trial.pid is not None and bool(trial.hostname) and trial.hostname == this_host()


def host_activity(trial: Trial, now: datetime) -> Activity | str | None:
    if not on_this_host(trial):
        return None
    state = process_state(trial.pid)  # type: ignore[arg-type]
    if state is None:
        return f"no process {trial.pid} on {this_host()}"
    return Activity(source=f"raywatch's host {this_host()}",
                    cpu_percent=process_cpu_percent(trial.pid),  # type: ignore[arg-type]
                    state=state[0], rss_bytes=state[1])


def host_stack(trial: Trial) -> Stack | str | None:
    if not on_this_host(trial):
        return None
    dump = dump_stack(trial.pid, settings.PY_SPY, settings.STACK_TIMEOUT_S)  # type: ignore[arg-type]
    if dump.text is None:
        return f"on raywatch's host {this_host()}: {dump.reason}"
    return Stack(source=f"py-spy on raywatch's host {this_host()}", text=dump.text)
