"""Data for the trial pages, the API and the pushes: one function per view of it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db.models import Count, Max
from django.db.models.functions import Coalesce, Greatest
from django.urls import reverse

from collectors.records import RAYTRAIN
from dashboard.cluster.models import Cluster, Node
from dashboard.cluster.trainruns import train_payload
from dashboard.cluster.views_data import calls_payload
from dashboard.core.push import jsonable
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, RunRank, StepResult, Trial
from dashboard.trials.ranks import rank_nodes
from dashboard.trials.runs import is_run, listed_train_runs, train_key, trainer_job
from dashboard.trials.serializers import (
    ExperimentSerializer,
    StepResultSerializer,
    trial_rows,
)

INCIDENTS_SHOWN = 50  # a trial's newest incidents on its page


def experiments_payload(cluster: str | None = None) -> list[dict[str, Any]]:
    """Every experiment (of the cluster named `cluster`), the latest active first."""
    rows = Experiment.objects.select_related("cluster")
    if cluster:
        rows = rows.filter(cluster__name=cluster)
    experiments = list(rows.annotate(
        trial_count=Count("trials"),
        last_activity=Greatest("updated_at", Coalesce(Max("trials__updated_at"), "updated_at")),
    ).order_by("-last_activity", "name"))
    statuses: dict[int, Counter[str]] = {}
    frameworks: dict[int, set[str]] = {}
    for exp_id, status, framework, count in Trial.objects.values_list(
            "experiment_id", "status", "framework").annotate(count=Count("id")).order_by():
        statuses.setdefault(exp_id, Counter())[status] += count
        frameworks.setdefault(exp_id, set()).add(framework)
    firing = Counter(
        Incident.objects.filter(state=Incident.FIRING, trial__isnull=False)
        .values_list("trial__experiment_id", flat=True)
    )
    for exp in experiments:
        exp.by_status = dict(statuses.get(exp.pk, {}))  # type: ignore[attr-defined]
        exp.frameworks = sorted(frameworks.get(exp.pk, set()) - {""})  # type: ignore[attr-defined]
        exp.firing = firing.get(exp.pk, 0)  # type: ignore[attr-defined]
    return jsonable(ExperimentSerializer(experiments, many=True).data)


def trial_payload(trial: Trial) -> dict[str, Any]:
    return jsonable(trial_rows([trial])[0])


def run_job(trial: Trial) -> tuple[int, str] | None:
    """An RL run's trainer's Ray job (cluster pk, job id), whose calls are its steps; None
    for a Tune trial, or a run not tied to a live trainer."""
    job = trainer_job(trial) if is_run(trial) else ""
    return (trial.experiment.cluster_id, job) if job else None


def run_calls_payload(trial: Trial, job: tuple[int, str] | None = None
                      ) -> list[dict[str, Any]] | None:
    """What an RL run's step is doing now: its trainer's job's running calls (the Jobs
    page's rows); None for a Tune trial (its steps are its own process's). `job`: the
    run's, when the caller already looked it up (run_job)."""
    if not is_run(trial):
        return None
    job = job or run_job(trial)
    return calls_payload(job=job) if job else []


def train_run_payload(trial: Trial) -> dict[str, Any] | None:
    """A Ray Train run as Train's state API lists it: its status, attempts and its latest
    attempt's workers (rank, node, pid, GPU ids); None for any other trial, or a run the
    API does not list (state tracking off: the status strip says so)."""
    if trial.framework != RAYTRAIN:
        return None
    ranks = {r.rank: r for r in RunRank.objects.filter(trial=trial)}
    listed = train_payload(listed_train_runs([trial]).get(train_key(trial)))
    if listed is not None:  # Train's workers, with each rank's last report where read
        for worker in listed["workers"]:
            row = ranks.get(worker.get("rank"))  # type: ignore[arg-type]
            worker["step"] = row.step if row is not None else None
        return listed
    if not ranks:
        return None
    # State tracking off: the ranks as their own Ray Train logs said, on their nodes.
    nodes = rank_nodes(list(Node.objects.filter(cluster_id=trial.experiment.cluster_id)),
                       list(ranks.values()))
    return jsonable({"source": "logs", "status": None, "attempts": None, "run_id": "",
                     "world_size": max((r.world_size or 0 for r in ranks.values()),
                                       default=0) or len(ranks),
                     "workers": [{"rank": r.rank, "pid": r.pid,
                                  "node_ip": n.node_ip if (n := nodes.get(r.rank)) else r.node,
                                  "gpu_ids": [], "state": "", "actor_id": "", "step": r.step,
                                  "step_at": r.step_at} for _, r in sorted(ranks.items())]})


def results_payload(trial: Trial, limit: int = 20_000) -> list[dict[str, Any]]:
    rows = StepResult.objects.filter(trial=trial).order_by("attempt", "iteration")[:limit]
    return jsonable(StepResultSerializer(rows, many=True).data)


def incidents_payload(trial_pks: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Each trial's incidents, open and past, newest first."""
    found: dict[int, list[dict[str, Any]]] = {pk: [] for pk in trial_pks}
    for incident in Incident.objects.filter(trial_id__in=trial_pks).order_by("-opened_at"):
        shown = found[incident.trial_id]  # type: ignore[index]
        if len(shown) < INCIDENTS_SHOWN:
            shown.append(_incident(incident))
    return {pk: jsonable(shown) for pk, shown in found.items()}


def _incident(incident: Incident) -> dict[str, Any]:
    return {"id": incident.pk, "kind": incident.kind, "severity": incident.severity,
            "state": incident.state, "summary": incident.summary,
            "opened_at": incident.opened_at, "resolved_at": incident.resolved_at,
            "acknowledged_at": incident.acknowledged_at,
            "url": reverse("incident", args=[incident.pk])}


def gpu_hours(cluster: Cluster) -> list[dict[str, Any]]:
    """The GPU-hours each experiment of `cluster` held, for the cluster's history
    (dashboard.cluster.views_data): each trial's GPUs (what its actor asked Ray for) times
    how long it ran (first seen to its last result)."""
    hours: dict[tuple[int, str], list[float]] = {}
    for exp_id, exp_name, gpus, first, last, updated in Trial.objects.filter(
            experiment__cluster=cluster, gpus__gt=0).values_list(
            "experiment_id", "experiment__name", "gpus", "first_seen_at", "last_result_at",
            "updated_at"):
        ran = max(0.0, ((last or updated) - first).total_seconds())
        row = hours.setdefault((exp_id, exp_name), [0.0, 0])
        row[0] += gpus * ran / 3600
        row[1] += 1
    return [{"experiment_id": k[0], "experiment": k[1], "gpu_hours": round(v[0], 2),
             "trials": int(v[1])} for k, v in hours.items()]


def running_trials_by_process(pids: set[int]) -> dict[tuple[int, str, int], tuple[int, str]]:
    """The RUNNING trials these pids run: (cluster pk, node IP, pid) -> (trial pk, trial
    id). A Ray call of one of them is its trial's (call_overdue leaves it to the trial
    detectors; the Jobs page links it)."""
    return {(cluster, ip, pid): (pk, trial_id) for cluster, ip, pid, pk, trial_id in
            Trial.objects.filter(status=Trial.RUNNING, pid__in=pids).values_list(
                "experiment__cluster_id", "node_ip", "pid", "pk", "trial_id")}
