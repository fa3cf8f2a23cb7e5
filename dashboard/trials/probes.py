"""Where a stalled trial's process can be looked at: is it busy or idle, and where does
it hang (its Python stack). Sources register here, best first: the node's raywatch
agent (dashboard.agents registers it in its AppConfig.ready(): this app does not import
that one; raywatch's own host runs one too), then Ray's per-node reporter. The central
processes never read a trial's process themselves: they share no pid namespace with it.

A probe answers for one trial: a reading, or in words why its source cannot tell
("node 10.0.0.7 has no raywatch agent"), or None when the trial is none of its
business. The first reading wins; when none comes, the reasons say why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from dashboard.trials.models import Trial
from dashboard.trials.process import TrialProcess, trial_process

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Activity:
    source: str  # who measured it: "the agent of gpu-b", "Ray's reporter on 10.0.0.7"
    cpu_percent: float | None
    state: str | None = None  # ps's letter: R, S, D, Z ...
    rss_bytes: int | None = None
    unknown: str = ""  # when no source could tell: why


@dataclass(frozen=True)
class Stack:
    source: str  # who took it: "py-spy by the agent of gpu-b"
    text: str  # the last one taken
    tried: list[str] = field(default_factory=list)  # what better sources said first
    # Several taken seconds apart give a verdict (collectors/pystack.hang_verdict): hung
    # in `frame` (waiting on `waits_on`), or slow and busy there; None: no verdict.
    samples: int = 1
    hung: bool | None = None
    frame: str = ""
    waits_on: str = ""
    verdict: str = ""


ActivityProbe = Callable[[Trial, datetime], "Activity | str | None"]
# A stack is taken only of the process Ray ties the trial to (dashboard.trials.process),
# never of a pid a result line names.
StackTaker = Callable[[Trial, TrialProcess], "Stack | str | None"]
_activity_probes: list[tuple[int, str, ActivityProbe]] = []
_stack_takers: list[tuple[int, str, StackTaker]] = []


def register_activity(order: int, name: str, probe: ActivityProbe) -> None:
    """Lower `order` is asked first. Registering a name again replaces it."""
    _register(_activity_probes, order, name, probe)


def register_stack(order: int, name: str, taker: StackTaker) -> None:
    _register(_stack_takers, order, name, taker)


def _register(table: list[tuple[int, str, Any]], order: int, name: str, fn: Any) -> None:
    table[:] = sorted([row for row in table if row[1] != name] + [(order, name, fn)],
                      key=lambda row: row[0])


def activity_of(trial: Trial, now: datetime) -> Activity:
    reasons = []
    for _, name, probe in list(_activity_probes):
        found = _ask(name, probe, trial, now)
        if isinstance(found, Activity):
            return found
        if found:
            reasons.append(found)
    return Activity(source="", cpu_percent=None, unknown=unknown(reasons))


def stack_of(trial: Trial) -> Stack | str:
    """The stack from the best source that can take it, or why none could."""
    bound = trial_process(trial)
    if isinstance(bound, str):
        return bound
    reasons = []
    for _, name, taker in list(_stack_takers):
        found = _ask(name, taker, trial, bound)
        if isinstance(found, Stack):
            return replace(found, tried=reasons)
        if found:
            reasons.append(found)
    return unknown(reasons)


def unknown(reasons: list[str]) -> str:
    return "; ".join(reasons) or "no source can look at this trial's process"


def _ask(name: str, probe: Callable[..., Any], *args: Any) -> Any:
    """A probe that fails is a reason, never an error in the detector's poll."""
    try:
        return probe(*args)
    except Exception as exc:
        log.exception("probe %s failed", name)
        return f"{name} failed: {exc}"
