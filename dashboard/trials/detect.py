"""Trial detection: reconcile status with Ray, build snapshots, run the trial
rules (dashboard.incidents.trial_rules) and sync their incidents.

A trial's process is alive when Ray lists a live actor with the trial's pid on
the trial's node (result.json's pid equals the actor's pid: docs/ray-facts.md).
When the Ray source is failing, liveness is unknown and nothing is concluded.

A stalled trial is looked at (probes.py): busy or idle, read by the best source, and
its Python stack, asked for once per stall and taken in the background (stacks.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from dashboard.cluster.models import Actor, Cluster, Node
from dashboard.cluster.state import current_clusters
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident
from dashboard.incidents.service import sync_findings
from dashboard.incidents.trial_rules import (
    TRIAL_KINDS,
    Baseline,
    StepTiming,
    Thresholds,
    TrialSnapshot,
    derive_status,
    evaluate_trial,
    phase_timings,
    trial_stalled,
)
from dashboard.trials.models import StepResult, Trial, TrialStack
from dashboard.trials.probes import Activity, activity_of
from dashboard.trials.stacks import request_stack, stack_payload, stacks_of_stalls


def thresholds() -> Thresholds:
    return Thresholds(
        stall_min_s=settings.STALL_MIN_S, stall_factor=settings.STALL_FACTOR,
        slow_factor=settings.SLOW_FACTOR, slow_min_excess_s=settings.SLOW_MIN_EXCESS_S,
        slow_for_s=settings.SLOW_FOR_S, slow_window=settings.SLOW_WINDOW,
        gone_grace_s=settings.GONE_GRACE_S, errored_recent_s=settings.ERRORED_RECENT_H * 3600,
    )


# Findings on a finished trial follow from its row alone (status and error text: the
# rules look at time and at Ray only while a trial runs). So after one full pass per
# process, a poll evaluates the unfinished trials and the finished ones saved since the
# previous evaluation began, and leaves the incidents of the others as they are: months
# of finished history cost a poll nothing. Trial rows are written by this poll only
# (ingest, then reconcile), so each save is followed by an evaluation in the process
# that made it. Wall-clock times, as auto_now stamps Trial.updated_at.
_last_start: list[datetime] = []  # when this process last began an evaluation


def evaluate_trials(now: datetime) -> dict[str, int]:
    started = timezone.now()
    since = changed_since(started)
    live = live_processes(now)
    trials = list(Trial.objects.select_related("experiment__cluster").filter(
        to_evaluate(since)).distinct())
    changed = [t for t in trials if reconcile(t, live, now)]
    for trial in changed:
        trial.save(update_fields=["status", "status_reason", "process_alive", "gpus",
                                  "process_gone_since", "updated_at"])
    th = thresholds()
    steps = recent_steps([t for t in trials if t.status == Trial.RUNNING], th.slow_window)
    baselines = slow_baselines(trials)
    firing = history_firing(trials)
    findings: list[Finding] = []
    context: dict[str, dict[str, Any]] = {}
    stalled: list[Trial] = []
    # A cluster that ended (torn down, head lost) runs nothing: its trials' incidents resolve.
    ended = set(Cluster.objects.filter(state=Cluster.ENDED).values_list("pk", flat=True))
    for trial in trials:
        if trial.experiment.cluster_id in ended:
            continue
        snapshot = replace(snapshot_of(trial, steps.get(trial.pk, []), baselines.get(trial.pk)),
                           errored_firing="trial_errored" in firing.get(trial.pk, ()),
                           gone_firing="trial_process_gone" in firing.get(trial.pk, ()))
        if trial_stalled(snapshot, th, now):
            snapshot = with_activity(snapshot, activity_of(trial, now))
            stalled.append(trial)
        findings.extend(evaluate_trial(snapshot, th, now))
        context[snapshot.subject] = {"trial": trial, "experiment": trial.experiment.name,
                                     "node_ip": trial.node_ip}
    stacks = stacks_of_stalls(stalled)
    findings = [with_stack(f, context[f.subject]["trial"], stacks, now) for f in findings]
    covered = None if since is None else (Q(trial__isnull=True) | Q(trial__in=trials))
    result = sync_findings(TRIAL_KINDS, findings, now, context, among=covered)
    for trial in stalled:
        if trial.pk not in stacks:  # its incident just opened: where does it hang?
            request_stack(trial, now)
    result["status_changes"] = len(changed)
    _last_start[:] = [started]
    return result


def with_activity(snapshot: TrialSnapshot, activity: Activity) -> TrialSnapshot:
    return replace(snapshot, cpu_percent=activity.cpu_percent, process_state=activity.state,
                   rss_bytes=activity.rss_bytes, activity_source=activity.source,
                   activity_unknown=activity.unknown)


def with_stack(finding: Finding, trial: Trial, stacks: dict[int, TrialStack],
               now: datetime) -> Finding:
    """A stall's finding carries the stack of this stall, as far as it was taken."""
    if finding.kind != "trial_stalled" or trial.pk not in stacks:
        return finding
    return replace(finding, details={**finding.details,
                                     "stack": stack_payload(stacks[trial.pk], now)})


def changed_since(started: datetime) -> datetime | None:
    """Finished trials saved after this need evaluating; None: all of them (the first
    pass in this process, or the clock went back)."""
    if not _last_start or started < _last_start[0]:
        return None
    return _last_start[0]


def to_evaluate(since: datetime | None) -> Q:
    unfinished = ~Q(status__in=Trial.FINISHED)
    if since is not None:
        return unfinished | Q(updated_at__gte=since)
    # Every trial that can have a finding, or an incident to resolve.
    return (unfinished | Q(incidents__state=Incident.FIRING)
            | Q(status="ERROR", error_text__gt=""))


def live_processes(now: datetime) -> dict[int, dict[tuple[str, int], float]]:
    """Per cluster whose Ray view is current (a cluster pk), the (node_ip, pid) of every
    live actor with the GPUs it asked Ray for; a cluster that is not current is absent:
    nothing of it is known gone."""
    current = current_clusters(now)
    ips = dict(Node.objects.filter(cluster_id__in=current).values_list("node_id", "node_ip"))
    live: dict[int, dict[tuple[str, int], float]] = {pk: {} for pk in current}
    for cluster_id, node_id, pid, resources in Actor.objects.filter(
            cluster_id__in=current, state="ALIVE", pid__isnull=False).values_list(
            "cluster_id", "node_id", "pid", "required_resources"):
        gpus = (resources or {}).get("GPU") if isinstance(resources, dict) else None
        live[cluster_id][(ips.get(node_id, ""), pid)] = float(gpus or 0)
    return live


def reconcile(trial: Trial, live: dict[int, dict[tuple[str, int], float]],
              now: datetime) -> bool:
    before = (trial.status, trial.status_reason, trial.process_alive, trial.process_gone_since,
              trial.gpus)
    of_cluster = live.get(trial.experiment.cluster_id)
    alive = None if of_cluster is None or trial.pid is None else \
        (trial.node_ip, trial.pid) in of_cluster
    if alive:  # what its actor asked Ray for: the GPU-hours per experiment count on it
        trial.gpus = of_cluster[(trial.node_ip, trial.pid)]  # type: ignore[index]
    if alive is not None:
        if alive:
            trial.process_gone_since = None
        elif trial.process_alive is not False or trial.process_gone_since is None:
            trial.process_gone_since = now
        trial.process_alive = alive
    error_present = bool(trial.error_text) and trial.attempt <= trial.error_attempt
    trial.status, trial.status_reason = derive_status(trial.tune_status, error_present, alive)
    return before != (trial.status, trial.status_reason, trial.process_alive,
                      trial.process_gone_since, trial.gpus)


def recent_steps(trials: list[Trial], window: int) -> dict[int, list[StepResult]]:
    """The last `window + 1` results of each trial's current attempt, in one query."""
    if not trials:
        return {}
    # A range on the (trial, attempt, iteration) index: the cost follows the window,
    # not how many results a long-running trial has stored.
    current = Q()
    for trial in trials:
        newest = trial.iteration or 0
        current |= Q(trial_id=trial.pk, attempt=trial.attempt,
                     iteration__gt=newest - window - 1, iteration__lte=newest)
    rows = StepResult.objects.filter(current).only(
        "trial_id", "iteration", "at", "time_this_iter_s", "metrics"
    )
    grouped: dict[int, list[StepResult]] = defaultdict(list)
    for row in rows:
        grouped[row.trial_id].append(row)
    for items in grouped.values():
        items.sort(key=lambda r: r.iteration)
    return grouped


def slow_baselines(trials: list[Trial]) -> dict[int, Baseline]:
    """The baseline each firing step_time_regression was opened against: a slowdown
    is judged against the timings from before it began for as long as it lasts."""
    wanted = {t.pk for t in trials}
    rows = Incident.objects.filter(state=Incident.FIRING, kind="step_time_regression",
                                   trial__isnull=False).values_list("trial_id", "details")
    rows = [(pk, details) for pk, details in rows if pk in wanted]
    found = {pk: Baseline.from_details(details) for pk, details in rows}
    return {pk: baseline for pk, baseline in found.items() if baseline is not None}


def history_firing(trials: list[Trial]) -> dict[int, set[str]]:
    """The open trial_errored / trial_process_gone incidents of the errored or gone trials
    (the rules leave an old failure or an old disappearance alone unless its incident is
    already open): trial pk -> kinds, in one query."""
    wanted = {t.pk for t in trials if t.status == Trial.ERROR or t.process_alive is False}
    if not wanted:
        return {}
    found: dict[int, set[str]] = defaultdict(set)
    for pk, kind in Incident.objects.filter(
            state=Incident.FIRING, kind__in=("trial_errored", "trial_process_gone"),
            trial__in=wanted).values_list("trial_id", "kind"):
        found[pk].add(kind)
    return found


def snapshot_of(trial: Trial, steps: list[StepResult],
                slow_baseline: Baseline | None = None) -> TrialSnapshot:
    patterns = settings.TIMING_KEYS
    return TrialSnapshot(
        trial_id=trial.trial_id, experiment=trial.experiment.name, status=trial.status,
        process_alive=trial.process_alive, process_gone_since=trial.process_gone_since,
        last_result_at=trial.last_result_at, error_text=trial.error_text,
        error_at=trial.error_at,
        node_ip=trial.node_ip, pid=trial.pid, slow_baseline=slow_baseline,
        steps=[StepTiming(iteration=s.iteration, at=s.at, total_s=s.time_this_iter_s,
                          phases=phase_timings(s.metrics, patterns)) for s in steps],
    )
