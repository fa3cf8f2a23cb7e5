"""Detectors: pure rules `(trial history, thresholds, now) -> Finding | None`.

No I/O and no clock of their own: time comes in as an argument, so tests move
time instead of sleeping. The thresholds are documented in README ("Detectors").
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from itertools import pairwise
from statistics import median
from typing import Any

TRIAL_KINDS = ("trial_stalled", "trial_process_gone", "trial_errored", "step_time_regression")
STEP_TOTAL = "step total"


@dataclass(frozen=True)
class Thresholds:
    stall_min_s: float = 120.0
    stall_factor: float = 5.0
    slow_factor: float = 3.0
    slow_min_s: float = 1.0
    slow_window: int = 20
    gone_grace_s: float = 30.0
    min_history: int = 3


@dataclass(frozen=True)
class StepTiming:
    iteration: int
    at: datetime | None
    total_s: float | None
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialSnapshot:
    trial_id: str
    experiment: str
    status: str
    process_alive: bool | None
    process_gone_since: datetime | None
    last_result_at: datetime | None
    steps: Sequence[StepTiming] = ()  # the current attempt's recent steps, oldest first
    error_text: str = ""
    cpu_percent: float | None = None
    gpu_percent: float | None = None
    node_ip: str = ""
    pid: int | None = None

    @property
    def subject(self) -> str:
        return f"trial:{self.experiment}/{self.trial_id}"


@dataclass(frozen=True)
class Finding:
    kind: str
    subject: str
    severity: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


def phase_timings(metrics: dict[str, Any], patterns: Sequence[str]) -> dict[str, float]:
    """The metrics whose keys match the timing patterns (e.g. timing_s/*), as phases."""
    matches = _timing_regex(tuple(patterns)).match
    return {
        key: float(value)
        for key, value in metrics.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
        and value == value and matches(key)
    }


@lru_cache(maxsize=16)
def _timing_regex(patterns: tuple[str, ...]) -> re.Pattern[str]:
    # One compiled regex instead of fnmatch per key and pattern: this runs for every
    # recent step of every running trial at every poll.
    return re.compile("|".join(fnmatch.translate(p) for p in patterns) or "(?!)")


def median_interval_s(steps: Sequence[StepTiming]) -> float | None:
    times = [s.at for s in steps if s.at is not None]
    gaps = [(b - a).total_seconds() for a, b in pairwise(times)]
    gaps = [g for g in gaps if g >= 0]
    if gaps:
        return median(gaps)
    totals = [s.total_s for s in steps if s.total_s is not None]
    return median(totals) if totals else None


def _activity(trial: TrialSnapshot) -> str:
    parts = []
    if trial.cpu_percent is not None:
        parts.append(f"CPU {trial.cpu_percent:.0f}%")
    if trial.gpu_percent is not None:
        parts.append(f"GPU {trial.gpu_percent:.0f}%")
    if not parts:
        return "activity unknown"
    busy = (trial.cpu_percent or 0) >= 5 or (trial.gpu_percent or 0) >= 5
    return ("busy: " if busy else "idle: ") + ", ".join(parts)


def trial_stalled(trial: TrialSnapshot, th: Thresholds, now: datetime) -> Finding | None:
    if trial.status != "RUNNING" or trial.process_alive is not True or not trial.last_result_at:
        return None
    interval = median_interval_s(trial.steps)
    limit = max(th.stall_min_s, th.stall_factor * interval if interval else 0.0)
    silent = (now - trial.last_result_at).total_seconds()
    if silent <= limit:
        return None
    activity = _activity(trial)
    return Finding(
        kind="trial_stalled", subject=trial.subject, severity="critical",
        summary=(f"Trial {trial.trial_id} has reported no result for {silent:.0f} s "
                 f"(limit {limit:.0f} s) while its process is alive ({activity})"),
        details={"silent_s": round(silent, 1), "limit_s": round(limit, 1),
                 "median_interval_s": interval, "activity": activity,
                 "cpu_percent": trial.cpu_percent, "gpu_percent": trial.gpu_percent},
    )


def trial_process_gone(trial: TrialSnapshot, th: Thresholds, now: datetime) -> Finding | None:
    if trial.status in ("TERMINATED", "ERROR", "PAUSED", "PENDING"):
        return None
    if trial.process_alive is not False or trial.process_gone_since is None:
        return None
    gone_for = (now - trial.process_gone_since).total_seconds()
    if gone_for < th.gone_grace_s:
        return None
    return Finding(
        kind="trial_process_gone", subject=trial.subject, severity="critical",
        summary=(f"Trial {trial.trial_id} is {trial.status} but its process "
                 f"(pid {trial.pid} on {trial.node_ip or 'unknown node'}) has been gone "
                 f"for {gone_for:.0f} s"),
        details={"gone_for_s": round(gone_for, 1), "pid": trial.pid, "node_ip": trial.node_ip},
    )


def trial_errored(trial: TrialSnapshot, th: Thresholds, now: datetime) -> Finding | None:
    if trial.status != "ERROR" or not trial.error_text:
        return None
    first = trial.error_text.strip().splitlines()
    return Finding(
        kind="trial_errored", subject=trial.subject, severity="critical",
        summary=f"Trial {trial.trial_id} failed: {first[-1][:300] if first else 'error.txt'}",
        details={"error_head": "\n".join(first[:20])},
    )


def step_time_regression(trial: TrialSnapshot, th: Thresholds, now: datetime) -> Finding | None:
    steps = list(trial.steps)[-(th.slow_window + 1):]
    if len(steps) < th.min_history + 1:
        return None
    *history, latest = steps
    worst = _worst_phase(history, latest, th)
    if worst is None and trial.status == "RUNNING" and trial.process_alive and trial.last_result_at:
        worst = _step_in_progress(history, trial.last_result_at, th, now)
    if worst is None:
        return None
    phase, took, usual, in_progress = worst
    what = "the step in progress has run" if in_progress else f"step {latest.iteration} took"
    where = "" if phase == STEP_TOTAL else f" in phase {phase}"
    return Finding(
        kind="step_time_regression", subject=trial.subject, severity="warning",
        summary=(f"Trial {trial.trial_id}: {what} {took:.1f} s{where}, "
                 f"{took / usual:.1f}x its median of {usual:.1f} s"),
        details={"phase": phase, "seconds": round(took, 3), "median_s": round(usual, 3),
                 "factor": round(took / usual, 2), "in_progress": in_progress,
                 "iteration": latest.iteration},
    )


def _worst_phase(history: list[StepTiming], latest: StepTiming,
                 th: Thresholds) -> tuple[str, float, float, bool] | None:
    candidates: list[tuple[str, float, float, bool]] = []
    series = {STEP_TOTAL: ([s.total_s for s in history], latest.total_s)}
    for name, value in latest.phases.items():
        series[name] = ([s.phases.get(name) for s in history], value)
    for name, (past, now_value) in series.items():
        known = [v for v in past if v is not None]
        if now_value is None or len(known) < th.min_history:
            continue
        usual = median(known)
        if usual > 0 and now_value >= th.slow_min_s and now_value > th.slow_factor * usual:
            candidates.append((name, now_value, usual, False))
    # Name the phase that blew up most; the step total only when no phase explains it.
    phases = [c for c in candidates if c[0] != STEP_TOTAL]
    pool = phases or candidates
    return max(pool, key=lambda c: c[1] / c[2]) if pool else None


def _step_in_progress(history: list[StepTiming], last_result_at: datetime, th: Thresholds,
                      now: datetime) -> tuple[str, float, float, bool] | None:
    usual = median_interval_s(history)
    running = (now - last_result_at).total_seconds()
    if usual and usual > 0 and running >= th.slow_min_s and running > th.slow_factor * usual:
        return (STEP_TOTAL, running, usual, True)
    return None


TRIAL_RULES = (trial_stalled, trial_process_gone, trial_errored, step_time_regression)


def evaluate_trial(trial: TrialSnapshot, th: Thresholds, now: datetime) -> list[Finding]:
    return [f for rule in TRIAL_RULES if (f := rule(trial, th, now)) is not None]


def derive_status(
    tune_status: str, error_present: bool, process_alive: bool | None
) -> tuple[str, str]:
    """Tune's status where it can be trusted, corrected by the logs and by Ray.

    experiment_state files lag and lie (shared/RAY_FACTS.md): error.txt and the
    actor's liveness are the real signals.
    """
    if error_present:
        return "ERROR", "error.txt was written"
    if process_alive is True and tune_status in ("", "RUNNING", "PENDING", "UNKNOWN"):
        return "RUNNING", "its actor is alive"
    if tune_status:
        return tune_status, "as Tune's experiment state reports"
    if process_alive is False:
        return "UNKNOWN", "no live actor and no Tune state"
    return "UNKNOWN", "no Tune state yet"
