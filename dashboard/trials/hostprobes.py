"""A trial's process on raywatch's own host (a single-host cluster, `make run`): read and
dumped here, the last resort after the node's agent and Ray."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from collectors.procstat import process_cpu_percent, process_state, this_host
from collectors.pystack import dump_stack
from dashboard.trials.models import Trial
from dashboard.trials.probes import Activity, Stack
from dashboard.trials.process import TrialProcess, trial_process


def host_activity(trial: Trial, now: datetime) -> Activity | str | None:
    bound = trial_process(trial)  # on this host by Ray's address, never by a line's name
    if isinstance(bound, str) or not bound.local:
        return None
    state = process_state(trial.pid)  # type: ignore[arg-type]
    if state is None:
        return f"no process {trial.pid} on {this_host()}"
    return Activity(source=f"raywatch's host {this_host()}",
                    cpu_percent=process_cpu_percent(trial.pid),  # type: ignore[arg-type]
                    state=state[0], rss_bytes=state[1])


def host_stack(trial: Trial, bound: TrialProcess) -> Stack | str | None:
    if not bound.local:
        return None
    dump = dump_stack(bound.pid, settings.PY_SPY, settings.STACK_TIMEOUT_S)
    if dump.text is None:
        return f"on raywatch's host {this_host()}: {dump.reason}"
    return Stack(source=f"py-spy on raywatch's host {this_host()}", text=dump.text)
