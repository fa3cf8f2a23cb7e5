"""Trial detectors: pure rules `(trial snapshot, thresholds, now) -> Finding | None`.

No I/O and no clock of their own: time comes in as an argument, so tests move
time instead of sleeping. The thresholds come from settings (RAYWATCH_*, defaults
written there once and documented in docs/detectors.md).
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from itertools import pairwise
from statistics import median
from typing import Any

from collectors.pystack import BUSY_PERCENT
from dashboard.cluster.models import CallTiming
from dashboard.incidents.findings import Finding

TRIAL_KINDS = ("trial_stalled", "trial_process_gone", "trial_errored", "step_time_regression")
STEP_TOTAL = "step total"
STEP_INTERVAL = "step interval"  # time between results: what a step in progress is held to
MIN_HISTORY = 3  # steps needed before a trial's usual timings mean anything


@dataclass(frozen=True)
class Thresholds:
    stall_min_s: float
    stall_factor: float
    slow_factor: float
    slow_min_excess_s: float  # a slow step must also exceed its usual time by this much
    slow_for_s: float  # and stay slow this long before it opens (Alertmanager's `for:`)
    slow_window: int
    gone_grace_s: float
    errored_recent_s: float  # an older failure, first read from history, opens nothing
    # A step this far past its usual interval (hang_factor times it, at least hang_min_s:
    # RAYWATCH_CALL_OVERDUE_*, as a Ray call past its usual duration) has its process's
    # stacks sampled; a hung verdict stalls it then, before stall_min_s.
    hang_factor: float = 5.0
    hang_min_s: float = 30.0


@dataclass(frozen=True)
class StepTiming:
    iteration: int
    at: datetime | None
    total_s: float | None
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Baseline:
    """A trial's usual timings from before a slowdown began, and when it began.

    Kept in the firing incident while the slowdown lasts, so that a phase which
    stays slow is judged against its fast past, never against its own slow steps."""

    since: datetime
    seconds: dict[str, float]  # series (phase, step total, step interval) -> usual seconds

    def as_details(self) -> dict[str, Any]:
        return {"since": self.since.isoformat(),
                "baseline_s": {name: round(v, 4) for name, v in self.seconds.items()}}

    @classmethod
    def from_details(cls, details: dict[str, Any]) -> Baseline | None:
        try:
            return cls(datetime.fromisoformat(details["since"]),
                       {str(k): float(v) for k, v in details["baseline_s"].items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


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
    process_state: str | None = None  # ps's letter (R, S, D, Z ...), where it was read
    rss_bytes: int | None = None
    activity_source: str = ""  # who read the process: "the agent of gpu-b"
    activity_unknown: str = ""  # when no source could: why
    node_ip: str = ""
    pid: int | None = None
    slow_baseline: Baseline | None = None  # from the firing step_time_regression, if any
    error_at: datetime | None = None  # when error.txt was written
    errored_firing: bool = False  # its trial_errored incident is open
    gone_firing: bool = False  # its trial_process_gone incident is open
    # Its results come only from node agents, silent a while (stopped, cut off, raywatch
    # restarted before they reconnected): its silence is counted up to their last report.
    data_until: datetime | None = None
    agent_note: str = ""  # its agents have been silent longer than a hold: said so
    ended_by: str = ""  # who terminated its current attempt through raywatch
    # The verdict of the stacks taken in this silence (since its last result): hung True,
    # slow and busy False, none None; and in words.
    hung: bool | None = None
    verdict: str = ""
    verdict_at: datetime | None = None  # when those stacks were taken
    verdict_pending: bool = False  # its stacks are being taken now
    # An RL run found from Ray before it printed a step: when raywatch first saw its
    # trainer, from which its silence counts (a hang in the very first step).
    started_at: datetime | None = None
    # An RL run's trainer runs its run call (TaskRunner.run), as Ray lists its calls:
    # False when it runs none (its loop returned, the actor lives on idle), so its silence
    # is no step in progress. None: not a run, or not known.
    in_run_call: bool | None = None
    # Why Ray says its process's actor ended, when it was on purpose (its owner or a user
    # ended it: Tune pausing it, ray.kill), in words; "" when not, or not known.
    ended_on_purpose: str = ""
    death: str = ""  # how Ray says its process died, when not on purpose, in words
    # What its busy stacks say the step in progress is doing, when it is the framework's
    # own lifecycle and not training (collectors.pystack.lifecycle_of): "validation",
    # "a checkpoint save"; "" otherwise.
    during: str = ""
    noun: str = "Trial"  # what its incidents call it: "Run" for an RL or Train run

    @property
    def subject(self) -> str:
        return f"trial:{self.experiment}/{self.trial_id}"

    @property
    def quiet_since(self) -> datetime | None:
        """Since when it has been silent: its last result, or, for a run that has printed
        none yet, since its trainer was found."""
        return self.last_result_at or self.started_at


# Timing keys that are no phase of a step: its whole time (verl's and EasyR1's
# timing_s/step, OpenRLHF's train/timing/step_total) and statistics over workers (verl's
# timing_s/generation_timing/max). The trial page charts them unstacked (it is sent this).
# verl's agent loop (verl/experimental/agent_loop/agent_loop.py) adds statistics over the
# samples of its generation, some not even seconds: agent_loop/slowest/{generate_sequences,
# tool_calls,compute_score,prompt_length,response_length,num_preempted} and
# agent_loop/*/{min,max,mean}: inside `gen`, no phase beside it.
NOT_A_PHASE = r"(^|/)(step|step_total)$|/(min|max|mean|topk_ratio)$|(^|/)agent_loop/"
_not_a_phase = re.compile(NOT_A_PHASE).search


# Phases of a framework's own lifecycle, not of its training step: verl's validation
# (`testing`, every trainer.test_freq steps) and EasyR1's (`validation`), both frameworks'
# checkpoint saves (`save_checkpoint`, every save_freq: verl #2238 saw 22 to 36 minutes).
# A step that ran one is held to the usual step without it, and they are never the slow
# phase themselves (docs/ray-facts.md "A trainer's console").
LIFECYCLE_PHASE = r"(^|/)(testing|validation|save_checkpoint)$"
_lifecycle_search = re.compile(LIFECYCLE_PHASE).search


@lru_cache(maxsize=4096)
def _lifecycle(key: str) -> bool:
    # Asked for every phase of every recent step of every running trial at each poll:
    # a run has a few dozen phase names, matched once.
    return _lifecycle_search(key) is not None


def routine(step: StepTiming) -> tuple[float | None, dict[str, float]]:
    """A step's total and phases without its lifecycle phases (validation, a save)."""
    extra = {k: v for k, v in step.phases.items() if _lifecycle(k)}
    if not extra:  # most steps: as they are, nothing copied
        return step.total_s, step.phases
    phases = {k: v for k, v in step.phases.items() if k not in extra}
    if step.total_s is None:
        return None, phases
    return max(0.0, step.total_s - sum(extra.values())), phases


def phase_timings(metrics: dict[str, Any], patterns: Sequence[str]) -> dict[str, float]:
    """The metrics whose keys match the timing patterns (e.g. timing_s/*), as phases."""
    matches = _timing_regex(tuple(patterns)).match
    return {
        key: float(value)
        for key, value in metrics.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
        and value == value and matches(key) and not _not_a_phase(key)
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


def busy(trial: TrialSnapshot) -> bool | None:
    """Busy (BUSY_PERCENT of a core or of a GPU) or idle; None when nothing was measured."""
    if trial.cpu_percent is None and trial.gpu_percent is None:
        return None
    return (trial.cpu_percent or 0) >= BUSY_PERCENT or (trial.gpu_percent or 0) >= BUSY_PERCENT


def _activity(trial: TrialSnapshot) -> str:
    parts = []
    if trial.cpu_percent is not None:
        parts.append(f"CPU {trial.cpu_percent:.0f}%")
    if trial.gpu_percent is not None:
        parts.append(f"GPU {trial.gpu_percent:.0f}%")
    if trial.process_state:
        parts.append(f"state {trial.process_state}")
    working = busy(trial)
    head = "activity unknown" if working is None else "busy" if working else "idle"
    text = f"{head}: {', '.join(parts)}" if parts else head
    return f"{text}, per {trial.activity_source}" if trial.activity_source else text


def trial_stalled(trial: TrialSnapshot, th: Thresholds, now: datetime) -> Finding | None:
    quiet_since = trial.quiet_since
    if trial.status != "RUNNING" or trial.process_alive is not True or not quiet_since \
            or trial.in_run_call is False:
        return None
    if trial.hung is False and not has_habit(trial):
        # No usual step to hold it to, and its own stacks say it works (a long first
        # rollout, a validation before training, a checkpoint save): no threshold
        # overrules that evidence. Sampled again while the silence lasts (needs_verdict).
        return None
    interval = median_interval_s(trial.steps)
    limit = stall_limit_s(interval, th)
    early = hang_limit_s(trial, th)
    if trial.hung:  # its stacks say hung: no need to wait longer
        limit = min(limit, early)
    seen_until = min(now, trial.data_until) if trial.data_until else now
    silent = (seen_until - quiet_since).total_seconds()
    if silent <= limit:
        return None
    activity = _activity(trial)
    behind = (now - seen_until).total_seconds()
    known = f" (counted to the newest data raywatch has, {behind:.0f} s old)" \
        if trial.data_until else ""
    return Finding(
        kind="trial_stalled", subject=trial.subject, severity="critical",
        summary=(f"{trial.noun} {trial.trial_id} has reported no result for {silent:.0f} s "
                 f"(limit {limit:.0f} s){known} while its process is alive ({activity})"
                 + (f": {trial.verdict}" if trial.verdict else "")
                 + (f"; {trial.agent_note}" if trial.agent_note else "")),
        details={"silent_s": round(silent, 1), "limit_s": round(limit, 1),
                 "median_interval_s": interval, "activity": activity, "busy": busy(trial),
                 "cpu_percent": trial.cpu_percent, "gpu_percent": trial.gpu_percent,
                 "process_state": trial.process_state, "rss_bytes": trial.rss_bytes,
                 "activity_source": trial.activity_source,
                 "activity_unknown": trial.activity_unknown,
                 "hung": trial.hung, "verdict": trial.verdict},
    )


def has_habit(trial: TrialSnapshot) -> bool:
    """Whether it has steps enough (MIN_HISTORY) for a usual interval to mean anything."""
    return len(trial.steps) >= MIN_HISTORY and median_interval_s(trial.steps) is not None


def hang_limit_s(trial: TrialSnapshot, th: Thresholds) -> float:
    """How long a running trial may go without a result before its process's stacks are
    sampled for a verdict: its usual interval past the overdue factor, as a Ray call past
    its usual duration (CallTiming.overdue_after). Before it has a habit (most hangs come
    in the first step, before any duration was learned) hang_min_s: evidence first, and
    the stall limit is only the backstop for processes no agent can sample."""
    interval = median_interval_s(trial.steps) if has_habit(trial) else None
    if interval is None:
        return th.hang_min_s
    return CallTiming.overdue_after(interval, th.hang_factor, th.hang_min_s)


def sample_after_s(trial: TrialSnapshot, th: Thresholds) -> float:
    """When a silent trial's stacks are first sampled: at its hang limit, or sooner, once
    the step in progress overran its slow limit (step_time_regression's, never before
    hang_min_s): the verdict is in before that regression's hold ends, so a step that is
    busy validating or saving is told from a slow one before anything opens."""
    limit = hang_limit_s(trial, th)
    interval = median_interval_s(trial.steps) if has_habit(trial) else None
    if interval is None:
        return limit
    return min(limit, max(th.hang_min_s, slow_limit(interval, th)))


def verdict_refresh_s(th: Thresholds) -> float:
    """How old a busy verdict may grow while the silence lasts before the stacks are
    sampled again: work that was busy may hang later."""
    return 2 * max(th.hang_min_s, 1.0)


def needs_verdict(trial: TrialSnapshot, th: Thresholds, now: datetime) -> bool:
    """A running trial silent past its hang limit whose stacks have given no verdict in
    this silence, or only a busy one grown old: its node's agent is asked to sample them
    (dashboard.trials.detect)."""
    quiet_since = trial.quiet_since
    if trial.status != "RUNNING" or trial.process_alive is not True or not quiet_since \
            or trial.in_run_call is False:
        return False
    if (now - quiet_since).total_seconds() <= sample_after_s(trial, th):
        return False
    if trial.hung is None:
        return True
    return trial.hung is False and trial.verdict_at is not None \
        and (now - trial.verdict_at).total_seconds() > verdict_refresh_s(th)


def stall_limit_s(median_interval: float | None, th: Thresholds) -> float:
    """How long a running trial may go without a result: its usual interval times the
    stall factor, never less than the stall minimum."""
    return max(th.stall_min_s, th.stall_factor * median_interval if median_interval else 0.0)


def trial_process_gone(trial: TrialSnapshot, th: Thresholds, now: datetime) -> Finding | None:
    if trial.status in ("TERMINATED", "ERROR", "PAUSED", "PENDING"):
        return None
    if trial.process_alive is not False or trial.process_gone_since is None:
        return None
    if trial.ended_on_purpose:
        return None  # its owner ended it (Tune pausing it): Tune's word on it is to come
    gone_for = (now - trial.process_gone_since).total_seconds()
    if gone_for < th.gone_grace_s:
        return None
    # A node's Ray temp dir keeps the sessions of earlier Ray starts, and Tune's state of a
    # killed driver still says RUNNING: a trial last heard from long ago whose process is
    # gone is history, not news. An open incident stays open until it clears.
    if (not trial.gone_firing and trial.last_result_at is not None
            and (now - trial.last_result_at).total_seconds() > th.errored_recent_s):
        return None
    return Finding(
        kind="trial_process_gone", subject=trial.subject, severity="critical",
        summary=(f"{trial.noun} {trial.trial_id} is {trial.status} but its process "
                 f"(pid {trial.pid} on {trial.node_ip or 'unknown node'}) has been gone "
                 f"for {gone_for:.0f} s" + (f": {trial.death}" if trial.death else "")),
        details={"gone_for_s": round(gone_for, 1), "pid": trial.pid, "node_ip": trial.node_ip,
                 "death": trial.death},
    )


def trial_errored(trial: TrialSnapshot, th: Thresholds, now: datetime) -> Finding | None:
    if trial.status != "ERROR" or not trial.error_text or trial.ended_by:
        return None  # an operator's terminate is no failure to page about
    # Months of finished searches under ~/ray_results hold old failures: raywatch's first
    # read of them is history, not news. An open incident stays open until it clears.
    if (not trial.errored_firing and trial.error_at is not None
            and (now - trial.error_at).total_seconds() > th.errored_recent_s):
        return None
    first = trial.error_text.strip().splitlines()
    return Finding(
        kind="trial_errored", subject=trial.subject, severity="critical",
        summary=(f"{trial.noun} {trial.trial_id} failed: "
                 f"{first[-1][:300] if first else 'error.txt'}"),
        details={"error_head": "\n".join(first[:20])},
    )


@dataclass(frozen=True)
class Slowness:
    phase: str
    took: float
    usual: float
    in_progress: bool


def slow_limit(usual: float, th: Thresholds) -> float:
    """Slow means both a factor over the usual time and a real excess in seconds: a
    0.5 s step that once takes 1.7 s is scheduler jitter, not a regression."""
    return max(th.slow_factor * usual, usual + th.slow_min_excess_s)


def usual_timings(steps: Sequence[StepTiming]) -> dict[str, float]:
    """The median of each series (step total, interval between results, each phase)."""
    series: dict[str, list[float]] = defaultdict(list)
    for step in steps:
        total, phases = routine(step)
        if total is not None:
            series[STEP_TOTAL].append(total)
        for name, value in phases.items():
            series[name].append(value)
    usual = {name: median(v) for name, v in series.items() if len(v) >= MIN_HISTORY}
    if len(steps) >= MIN_HISTORY:
        # Tune stamps results in whole seconds: short steps show gaps of 0 s and 1 s.
        interval = max(median_interval_s(steps) or 0.0, usual.get(STEP_TOTAL, 0.0))
        if interval > 0:
            usual[STEP_INTERVAL] = interval
    return usual


def step_time_regression(trial: TrialSnapshot, th: Thresholds, now: datetime) -> Finding | None:
    """A step, or a phase of it, much slower than before the slowdown began. Fires for
    as long as it stays slow, and resolves once a step is fast again."""
    kept = trial.slow_baseline
    baseline = kept or baseline_before_slowdown(trial, th)
    if baseline is None:
        return None
    slow = latest_slowness(trial, baseline.seconds, th, now)
    if slow is None:
        return None
    if kept is None and (now - baseline.since).total_seconds() < th.slow_for_s:
        return None  # not slow for long enough yet
    latest = trial.steps[-1].iteration if trial.steps else None
    what = ("the step in progress has run" if slow.in_progress
            else f"step {latest} took")
    where = "" if slow.phase == STEP_TOTAL else f" in phase {slow.phase}"
    return Finding(
        kind="step_time_regression", subject=trial.subject, severity="warning",
        summary=(f"{trial.noun} {trial.trial_id}: {what} {slow.took:.1f} s{where}, "
                 f"{slow.took / slow.usual:.1f}x its usual {slow.usual:.1f} s "
                 f"(slow since {baseline.since:%H:%M:%S})"),
        details={"phase": slow.phase, "seconds": round(slow.took, 3),
                 "median_s": round(slow.usual, 3), "factor": round(slow.took / slow.usual, 2),
                 "in_progress": slow.in_progress, "iteration": latest,
                 **baseline.as_details()},
    )


# The last snapshot's baseline: step_time_regression and next_check both ask for it, one
# after the other (a tenth of a poll's CPU at 10,000 running trials). Kept by identity,
# and the snapshot held, so another snapshot can never be taken for it.
_last_baseline: list[Any] = []


def baseline_before_slowdown(trial: TrialSnapshot, th: Thresholds) -> Baseline | None:
    """Usual timings of the steps before the trailing run of slow steps, and when the
    slowdown began: when the first slow step (or the step in progress) overran."""
    last = _last_baseline[:]
    if last and last[0] is trial and last[1] == th:
        return last[2]
    found = _baseline_before_slowdown(trial, th)
    _last_baseline[:] = [trial, th, found]
    return found


def _baseline_before_slowdown(trial: TrialSnapshot, th: Thresholds) -> Baseline | None:
    steps = list(trial.steps)[-(th.slow_window + 1):]
    if len(steps) <= MIN_HISTORY:
        return None
    # The older half of the window stays fast while the slowdown is younger than it:
    # a rolling median of the whole window would absorb a slowdown half as old.
    older = usual_timings(steps[:max(MIN_HISTORY, len(steps) // 2)])
    run = 0
    while run < len(steps) and _slow_phases(steps[-1 - run], older, th):
        run += 1
    before = steps[:len(steps) - run]
    usual = usual_timings(before)
    if not usual:
        return None
    started = before[-1].at or (None if run else trial.last_result_at)
    overran = (started + timedelta(seconds=slow_limit(usual[STEP_INTERVAL], th))
               if started and STEP_INTERVAL in usual else None)
    first_slow_at = steps[-run].at if run else None
    since = min((t for t in (overran, first_slow_at) if t is not None), default=None)
    return Baseline(since, usual) if since else None


def latest_slowness(trial: TrialSnapshot, usual: dict[str, float], th: Thresholds,
                    now: datetime) -> Slowness | None:
    """The latest step's slowest phase, else the step in progress if it overran."""
    found = _slow_phases(trial.steps[-1], usual, th) if trial.steps else []
    if found:
        # Name the phase that blew up most; the step total only when no phase explains it.
        pool = [s for s in found if s.phase != STEP_TOTAL] or found
        return max(pool, key=lambda s: s.took / s.usual)
    interval = usual.get(STEP_INTERVAL)
    if (interval is None or trial.status != "RUNNING" or trial.process_alive is not True
            or trial.last_result_at is None):
        return None
    if trial.hung is False and trial.during:
        return None  # busy validating or saving: judged as that step once it reports
    if trial.verdict_pending:
        return None  # its stacks are being taken: hung (a stall) or busy decides
    running = (now - trial.last_result_at).total_seconds()
    if trial.hung is None and running <= sample_after_s(trial, th):
        return None  # evidence first: its stacks are sampled then (a hang is a stall)
    if running > slow_limit(interval, th):
        return Slowness(STEP_TOTAL, running, interval, in_progress=True)
    return None


def _slow_phases(step: StepTiming, usual: dict[str, float], th: Thresholds) -> list[Slowness]:
    total, phases = routine(step)
    took = {STEP_TOTAL: total, **phases}
    return [Slowness(name, value, usual[name], in_progress=False)
            for name, value in took.items()
            if value is not None and usual.get(name, 0) > 0
            and value > slow_limit(usual[name], th)]


TRIAL_RULES = (trial_stalled, trial_process_gone, trial_errored, step_time_regression)


def evaluate_trial(trial: TrialSnapshot, th: Thresholds, now: datetime) -> list[Finding]:
    found = [f for rule in TRIAL_RULES if (f := rule(trial, th, now)) is not None]
    if any(f.kind == "trial_stalled" for f in found):
        # One incident per hang (Alertmanager's inhibition): the stall supersedes a
        # step-in-progress regression; a regression of completed steps stays its own.
        found = [f for f in found
                 if not (f.kind == "step_time_regression" and f.details.get("in_progress"))]
    return found


def next_check(trial: TrialSnapshot, found: Sequence[Finding], th: Thresholds,
               now: datetime) -> datetime | None:
    """When these rules may find something else for this trial though no result arrives
    and Ray's view of it stays as it is: the next deadline it crosses (its stall limit,
    its step in progress overrunning, a slowdown lasting slow_for_s, its process gone for
    the grace period). `now` while something is found: a finding's details follow the
    clock (silent for N s), and a slowdown may end. None: only new data can change it.
    Earlier than needed costs one evaluation; later would miss, so every rule that reads
    `now` has its deadline here."""
    if found:
        return now
    times: list[datetime] = []
    quiet_since = trial.quiet_since
    if trial.status == "RUNNING" and trial.process_alive is True and quiet_since:
        limit = stall_limit_s(median_interval_s(trial.steps), th)
        times.append(quiet_since + timedelta(seconds=limit))
        early = hang_limit_s(trial, th)
        if trial.hung is None:  # its stacks are sampled then (an overran step counts)
            times.append(quiet_since + timedelta(seconds=early))
            times.append(quiet_since + timedelta(seconds=sample_after_s(trial, th)))
        elif trial.hung is False and trial.verdict_at is not None:  # and again
            times.append(trial.verdict_at + timedelta(seconds=verdict_refresh_s(th)))
        if trial.data_until is not None:
            times.append(now)  # held for its agents: look again once they report
        baseline = trial.slow_baseline or baseline_before_slowdown(trial, th)
        if baseline is not None:
            times.append(baseline.since + timedelta(seconds=th.slow_for_s))
            interval = baseline.seconds.get(STEP_INTERVAL)
            if interval:
                times.append(quiet_since
                             + timedelta(seconds=slow_limit(interval, th)))
    if (trial.process_alive is False and trial.process_gone_since is not None
            and trial.status not in ("TERMINATED", "ERROR", "PAUSED", "PENDING")):
        times.append(trial.process_gone_since + timedelta(seconds=th.gone_grace_s))
    # A deadline already crossed found nothing (the rule's other conditions do not hold):
    # only a later one can change that without new data. One reached just now is kept:
    # the rules fire once it is passed, at the next look.
    return min((t for t in times if t >= now), default=None)


def derive_status(
    tune_status: str, error_present: bool, process_alive: bool | None, ended_by: str = "",
    run: bool = False,
) -> tuple[str, str]:
    """Tune's status where it can be trusted, corrected by the logs and by Ray.

    experiment_state files lag and lie (docs/ray-facts.md): error.txt and the
    actor's liveness are the real signals. `ended_by`: who terminated the attempt
    through raywatch (Tune writes error.txt for that kill too). `run`: an RL run, whose
    end is its trainer's and its Ray job's (dashboard/trials/runs.py), and whose error
    is the first failed call Ray lists of its job.
    """
    if error_present:
        return "ERROR", (f"terminated by {ended_by} through raywatch" if ended_by
                         else "its Ray job's first failed call" if run
                         else "error.txt was written")
    if process_alive is True and tune_status in ("", "RUNNING", "PENDING", "UNKNOWN"):
        return "RUNNING", "its actor is alive"
    if tune_status == "PENDING" and run:
        return tune_status, "its trainer has not started: its job's driver runs"
    if tune_status:
        return tune_status, ("as its trainer and Ray job ended" if run
                             else "as Tune's experiment state reports")
    if process_alive is False:
        return "UNKNOWN", "no live actor and no Tune state"
    return "UNKNOWN", "no Tune state yet"
